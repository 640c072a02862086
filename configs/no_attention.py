"""No attention (Sutskever et al. 2014): htilde_t = h_t.

python -m nmt_jax.main --config=configs/no_attention.py --workdir=runs/no_attention
python -m nmt_jax.main --config=configs/no_attention.py:copy200 --workdir=runs/no_attention_copy200
"""

from nmt_jax import default_config


def get_config(arg=None):
  config = default_config.get_config(arg)
  config.model.attention.kind = 'none'
  return config
