"""Global attention, concat score v_a^T tanh(W_a [h_t; hbar_s]) (Bahdanau additive).

python -m nmt_jax.main --config=configs/global_concat.py --workdir=runs/global_concat
python -m nmt_jax.main --config=configs/global_concat.py:copy200 --workdir=runs/global_concat_copy200
"""

from nmt_jax.config import defaults


def get_config(arg=None):
  config = defaults.get_config(arg)
  config.model.attention.kind = 'global'
  config.model.attention.score = 'concat'
  return config
