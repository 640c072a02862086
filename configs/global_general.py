"""Luong global attention, general score h_t^T W_a hbar_s.

python -m nmt_jax.main --config=configs/global_general.py --workdir=runs/global_general
python -m nmt_jax.main --config=configs/global_general.py:copy200 --workdir=runs/global_general_copy200
"""

from nmt_jax.config import defaults


def get_config(arg=None):
  config = defaults.get_config(arg)
  config.model.attention.kind = 'global'
  config.model.attention.score = 'general'
  return config
