"""Luong global attention, dot score h_t^T hbar_s.

python -m nmt_jax.main --config=configs/global_dot.py --workdir=runs/global_dot
python -m nmt_jax.main --config=configs/global_dot.py:copy200 --workdir=runs/global_dot_copy200
"""

from nmt_jax.config import defaults


def get_config(arg=None):
  config = defaults.get_config(arg)
  config.model.attention.kind = 'global'
  config.model.attention.score = 'dot'
  return config
