"""Fine-tuning from another workdir (train.init_from): its parameters, its rate."""

import os
from typing import Optional, Tuple

from nmt_jax.system import workdir_files
from nmt_jax.system.errors import CheckpointError
from nmt_jax.workdir import checkpoint
from nmt_jax.workdir import run_config
from nmt_jax.workdir import writers


def _check_init_from(workdir: str):
  config_path = os.path.join(workdir, workdir_files.CONFIG)
  if not os.path.exists(config_path) or not checkpoint.has_checkpoints(workdir):
    raise CheckpointError(
        f'train.init_from={workdir!r} has no config.json and checkpoints; '
        'point it at the workdir of a finished training run'
    )


def init_from_learning_rate(workdir: str) -> Tuple[int, float]:
  """(best step, learning rate there) of another workdir (train.init_from).

  The rate is the one its training steps up to that checkpoint ran at last:
  the latest metrics.jsonl 'train' record at or before the step (the
  schedule times the plateau decays so far).
  """
  _check_init_from(workdir)
  ckpts = checkpoint.Checkpoints(workdir, create=False)
  try:
    step = ckpts.best_step()
  finally:
    ckpts.close()
  rates = [
      record['learning_rate']
      for record in writers.read_metrics(workdir)
      if record.get('split') == 'train'
      and 'learning_rate' in record
      and record.get('step', 0) <= step
  ]
  if not rates:
    raise CheckpointError(
        f'train.init_from={workdir!r} has no training record up to step'
        f' {step} in metrics.jsonl to take the learning rate from; set'
        ' train.init_from_learning_rate=False and give train.learning_rate'
    )
  return step, float(rates[-1])


def load_params_from(
    workdir: str,
    config,
    abstract_params,
    mesh,
    task=None,
    step: Optional[int] = None,
):
  """(params, step) of another workdir (train.init_from): its best or `step`.

  They are checked against this model (and `task`'s vocabularies: the same
  ids must mean the same words).
  """
  _check_init_from(workdir)
  other_kind = run_config.load_config(workdir).model.attention.kind
  if other_kind != config.model.attention.kind:
    raise CheckpointError(
        f'train.init_from={workdir!r} trained attention kind {other_kind!r}, '
        f'this config {config.model.attention.kind!r}; fine-tune a workdir '
        'of the same kind'
    )
  return checkpoint.best_params(
      workdir,
      abstract_params,
      mesh,
      f'this model (train.init_from={workdir})',
      task,
      step,
  )
