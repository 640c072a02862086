"""Luong location-based attention: a_t = softmax(W_a h_t) over source positions.

python -m nmt_jax.main --config=configs/global_location.py --workdir=runs/global_location
python -m nmt_jax.main --config=configs/global_location.py:copy200 --workdir=runs/global_location_copy200
"""

from nmt_jax.config import defaults


def get_config(arg=None):
  config = defaults.get_config(arg)
  config.model.attention.kind = 'global'
  config.model.attention.score = 'location'
  return config
