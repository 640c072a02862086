"""Flexible attention fine-tuning (Shu & Nakayama 2017 §3.2): J = NLL - beta * mean_t g(t).

Starts from the best checkpoint of a trained flexible workdir:

  python -m nmt_jax.main --config=configs/flexible_finetune.py:chunk \
      --config.train.init_from=runs/flexible --workdir=runs/flexible_finetune

The paper fine-tunes one epoch with beta = 0.1.
"""

from nmt_jax import default_config


def get_config(arg=None):
  config = default_config.sibling_config(__file__, 'flexible', arg)
  config.train.beta = 0.1
  config.train.init_from = ''  # required: the trained flexible workdir
  return config
