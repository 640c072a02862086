"""Shu & Nakayama 2017 flexible attention on the Bahdanau-style decoder they build on.

Trains untruncated (tau plays no role in training); decoding drops positions
whose penalty reaches model.attention.tau (inf keeps all). Sweep tau on a
trained workdir with --mode=eval --config.model.attention.tau=1.2.

  python -m nmt_jax.main --config=configs/flexible.py:chunk --workdir=runs/flexible
  python -m nmt_jax.main --config=configs/flexible.py:shu_de_en --workdir=runs/flexible_de_en
"""

from nmt_jax.config import defaults


def get_config(arg=None):
  config = defaults.get_config(arg)
  config.model.attention.kind = 'flexible'
  # RNNsearch (Bahdanau): score h_{t-1} with the additive score.
  config.model.query = 'previous'
  config.model.attention.score = 'concat'
  config.model.attention.sigma = 1.5
  config.model.attention.tau = float('inf')
  return config
