"""Where a training run resumes: its newest good checkpoint.

The checkpoint's state, its meta (validation, the divergence check's running
mean) and the data iterator at its step; damaged checkpoints are set aside.
"""

from nmt_jax.system.errors import CheckpointError
from nmt_jax.workdir import checkpoint


def restore_training(ckpts, state, iterator, task, workdir: str, train_config):
  """(step, state, meta) of the newest good checkpoint, `iterator` at its step.

  Damaged ones are set aside: unreadable, or with the data iterator
  elsewhere than at their step.
  """
  abstract_state = checkpoint.abstract(state)
  num_steps = train_config.num_steps

  def restore(step):
    # Reading the meta first sets a damaged step aside (an empty directory
    # is not the last checkpoint); the vocabulary then says why a checkpoint
    # does not fit, not which shape differs.
    meta = ckpts.meta(step)
    if step > num_steps:  # before the data iterator: its stream ends there
      fix = (
          f'raise --config.train.num_epochs (now {train_config.num_epochs:g})'
          if train_config.num_epochs
          else 'raise --config.train.num_steps'
      )
      raise CheckpointError(
          f'train.num_steps={num_steps} is below the last checkpoint of'
          f' {workdir} (step {step}); {fix}, or use --mode=eval to evaluate'
          ' it'
      )
    checkpoint.check_vocab(meta, task, f'workdir {workdir}')
    # A newer step that failed to verify may have moved the iterator already.
    iterator.set_state({'next_index': 0})
    restored = ckpts.restore(step, abstract_state, iterator)[0]
    position = iterator.get_state()['next_index']
    if position not in (0, step):
      raise checkpoint.DamagedCheckpoint(
          f'its data iterator stands at batch {position}, not at the step'
      )
    return restored, meta

  step, restored = ckpts.first_good(restore)
  if step is None:
    raise CheckpointError(
        f'every checkpoint of {workdir} is damaged (moved to'
        f' {ckpts.directory}/corrupt/); train in a new --workdir'
    )
  if iterator.get_state()['next_index'] != step:
    # Saved with another process count: the stream is a function of the step.
    iterator.set_state({'next_index': step})
  return (step, *restored)
