"""Shu & Nakayama 2017 on the chunk_reverse task: flexible attention before and after
beta fine-tuning, next to global (concat) and local-p attention with the same decoder.

Runs in order (the fine-tuning starts from the first run's best checkpoint), then the
tau sweep on both flexible models:

  python -m nmt_jax.sweep run --sweep=configs/sweeps/flexible_chunk.py --root=runs/flex
  python -m nmt_jax.sweep tau --config=configs/flexible.py:chunk --workdir=runs/flex/flexible
  python -m nmt_jax.sweep tau --config=configs/flexible_finetune.py:chunk \
      --config.train.init_from=runs/flex/flexible --workdir=runs/flex/flexible_finetune

'{root}' in a value is replaced by the sweep's --root. The argument is the L of the task
(default 20).
"""


def get_sweep(arg=None):
  length = int(arg or 20)
  common = {'data.max_length': length}
  # The same Bahdanau-style decoder (query h_{t-1}, concat score) for every kind.
  bahdanau = {
      **common,
      'model.query': 'previous',
      'model.attention.score': 'concat',
  }
  return [
      {
          'name': 'flexible',
          'config': '../flexible.py:chunk',
          'overrides': common,
      },
      # Shu: fine-tune one epoch with beta = 0.1 (the config's defaults).
      {
          'name': 'flexible_finetune',
          'config': '../flexible_finetune.py:chunk',
          'overrides': {**common, 'train.init_from': '{root}/flexible'},
      },
      {
          'name': 'global_concat',
          'config': '../global_concat.py:chunk',
          'overrides': bahdanau,
      },
      {
          'name': 'local_p',
          'config': '../local_p.py:chunk',
          'overrides': bahdanau,
      },
  ]
