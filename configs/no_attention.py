"""No attention (Sutskever et al. 2014): htilde_t = h_t.

python -m nmt_jax.main --config=configs/no_attention.py --workdir=runs/no_attention
python -m nmt_jax.main --config=configs/no_attention.py:copy200 --workdir=runs/no_attention_copy200
"""

from nmt_jax.config import defaults


def get_config(arg=None):
  config = defaults.get_config(arg)
  config.model.attention.kind = 'none'
  # Without a context there is no W_c [c_t; h_t] for a preset's readout layer
  # (shu_de_en's 600 units) to size: it becomes a tanh layer on h_t instead.
  if config.model.readout == 'luong' and config.model.readout_size:
    if not config.model.output_hidden_size:
      config.model.output_hidden_size = config.model.readout_size
    config.model.readout_size = 0
  return config
