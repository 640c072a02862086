"""Luong local-m attention: window [t - D, t + D] (D = model.attention.window), truncated at the sentence boundaries.

python -m nmt_jax.main --config=configs/local_m.py --workdir=runs/local_m
python -m nmt_jax.main --config=configs/local_m.py:copy200 --workdir=runs/local_m_copy200
"""

from nmt_jax.config import defaults


def get_config(arg=None):
  config = defaults.get_config(arg)
  config.model.attention.kind = 'local_m'
  return config
