"""Luong local-p attention: predicted centre p_t = (S - 1) sigmoid(v_p^T tanh(W_p h_t)), Gaussian (sigma = D/2) after the window softmax.

python -m nmt_jax.main --config=configs/local_p.py --workdir=runs/local_p
python -m nmt_jax.main --config=configs/local_p.py:copy200 --workdir=runs/local_p_copy200
"""

from nmt_jax.config import defaults


def get_config(arg=None):
  config = defaults.get_config(arg)
  config.model.attention.kind = 'local_p'
  return config
