"""Flexible attention fine-tuning (Shu & Nakayama 2017, 3.2).

J = sum over sentences of (NLL - beta * mean_t g(t)) with beta = 0.1, for one
epoch of the training split, as the paper. Starts from the best checkpoint of
a trained flexible workdir:

  python -m nmt_jax.main --config=configs/flexible_finetune.py:chunk \
      --config.train.init_from=runs/flexible --workdir=runs/flexible_finetune

Only the parameters are taken from train.init_from. Reset: the optimizer
state (fresh Adam moments), the step counter (so the learning-rate schedule
starts again at train.learning_rate; with train.schedule=halve it does not
resume halved) and the data order (the training split's epoch-0 shuffle of
seed). `--config.train.init_from_learning_rate=true` starts at the rate the
parent trained at last instead (a parent whose rate decayed at plateaus).
`--config.train.num_epochs=0 --config.train.num_steps=N` trains N steps
instead; `--config.train.beta_normalization=token` uses the earlier mean-token
objective (beta weighs ~mean target length times more).
"""

from nmt_jax.config import defaults


def get_config(arg=None):
  config = defaults.sibling_config(__file__, 'flexible', arg)
  config.train.beta = 0.1
  config.train.beta_normalization = 'sentence'
  config.train.num_epochs = 1.0
  config.train.init_from = ''  # required: the trained flexible workdir
  return config
