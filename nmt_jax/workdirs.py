"""What a workdir holds besides the checkpoints, and how a run picks it up.

A workdir has `config.json` (the resolved config; run_config.py), `checkpoints/`
(checkpoint.py), `metrics.jsonl` and TensorBoard events (writers.py),
`vocab/` and `data_cache/` for real corpora (nmt_jax/data/encoding.py) and,
after evaluation, `eval_results.json` and `eval_hypotheses.txt`.
"""

import contextlib
import json
import os
from typing import Dict, Optional, Sequence

import jax

from nmt_jax import attention
from nmt_jax import checkpoint
from nmt_jax import data
from nmt_jax import parallel
from nmt_jax import plateau
from nmt_jax import run_config
from nmt_jax import scorers
from nmt_jax import steps
from nmt_jax.data import batching
from nmt_jax.data import dataset
from nmt_jax.errors import CheckpointError
from nmt_jax.errors import ConfigError


def prepare(workdir: str) -> Optional[str]:
  """Creates the workdir and checks it is writable.

  Returns the topmost folder it created (for remove_if_empty), or None when
  the workdir existed. This happens before anything is written.
  """
  created, missing = None, os.path.abspath(workdir)
  while not os.path.exists(missing):
    created, missing = missing, os.path.dirname(missing)
  checkpoints = os.path.join(workdir, 'checkpoints')
  if os.path.exists(checkpoints) and not os.path.isdir(checkpoints):
    raise CheckpointError(
        f'{checkpoints} is a file, not a directory; move it away or use'
        ' another --workdir'
    )
  try:
    os.makedirs(workdir, exist_ok=True)
    probe = os.path.join(workdir, f'.write-test-{os.getpid()}')
    with open(probe, 'w') as f:
      f.write('ok')
    os.remove(probe)
  except OSError as e:
    raise CheckpointError(
        f'workdir {workdir} is not writable ({e.strerror}); '
        'choose another --workdir'
    ) from None
  return created


def remove_if_empty(workdir: str, created: Optional[str] = None):
  """Removes a workdir this run created when a failure left nothing in it.

  An empty checkpoints/ (made by opening them) counts as nothing; so do the
  empty folders above it up to `created` (prepare's result: a mistyped
  --workdir=a/b/c leaves no a/b either).
  """
  directory = os.path.abspath(workdir)
  with contextlib.suppress(OSError):
    os.rmdir(os.path.join(directory, 'checkpoints'))
  top = os.path.abspath(created) if created else directory
  if os.path.commonpath([top, directory]) != top:
    return  # `created` is not above it: nothing of this run's to remove
  while True:
    try:
      os.rmdir(directory)
    except OSError:
      return
    if directory == top:
      return
    directory = os.path.dirname(directory)


def training_finished(workdir: str) -> bool:
  """Trained to its end (train.num_steps, or stopped early), evaluated after.

  eval_results.json alone does not say so: --mode=eval writes it for any
  checkpoint of a run that may still be training.
  """
  directory = os.path.join(workdir, 'checkpoints')
  try:
    last = max(int(name) for name in os.listdir(directory) if name.isdigit())
    evaluated = os.path.getmtime(os.path.join(workdir, 'eval_results.json'))
    if evaluated < os.path.getmtime(os.path.join(directory, str(last))):
      return False
    train_config = run_config.load_config(workdir).train
  # No checkpoint, no results, or no readable config.json.
  except (OSError, ValueError, CheckpointError):
    return False
  if last >= train_config.num_steps:
    return True
  # Stopped early: its validations up to `last` say so, as a resume replays.
  return plateau.resume(train_config, workdir, last, 1.0).stopped


def checkpoint_meta(
    config, task: dataset.Task, step: int, validation: Optional[Dict] = None
):
  """The JSON saved with every checkpoint: config, vocabularies, validation."""
  return {
      'step': int(step),
      'config': json.loads(config.to_json_best_effort()),
      'source_vocab': task.source_vocab.tokens,
      'target_vocab': task.target_vocab.tokens,
      'validation': validation or {},
  }


def check_vocab(meta: Dict, task: dataset.Task, where: str):
  """A checkpoint restores only with the vocabularies it was trained with."""
  for side, vocab in (
      ('source', task.source_vocab),
      ('target', task.target_vocab),
  ):
    stored = meta.get(f'{side}_vocab')
    if stored is not None and stored != vocab.tokens:
      raise CheckpointError(
          f'{where} was trained with a different {side} vocabulary '
          f'({len(stored)} tokens, now {len(vocab.tokens)}); use the data '
          'config it was trained with or a new --workdir'
      )


def load_params_from(workdir: str, config, abstract_params, mesh, task=None):
  """Best params of another workdir (train.init_from).

  They are checked against this model (and `task`'s vocabularies: the same
  ids must mean the same words).
  """
  config_path = os.path.join(workdir, 'config.json')
  if not os.path.exists(config_path) or not checkpoint.has_checkpoints(workdir):
    raise CheckpointError(
        f'train.init_from={workdir!r} has no config.json and checkpoints; '
        'point it at the workdir of a finished training run'
    )
  other_kind = run_config.load_config(workdir).model.attention.kind
  if other_kind != config.model.attention.kind:
    raise CheckpointError(
        f'train.init_from={workdir!r} trained attention kind {other_kind!r}, '
        f'this config {config.model.attention.kind!r}; fine-tune a workdir '
        'of the same kind'
    )
  return best_params(
      workdir,
      abstract_params,
      mesh,
      f'this model (train.init_from={workdir})',
      task,
  )


def best_params(workdir: str, abstract_params, mesh, what: str, task=None):
  """(params, step) of the workdir's best good checkpoint.

  Damaged checkpoints are set aside (checkpoint.Checkpoints.first_good). With
  a `task`, its vocabularies are checked first.
  """
  ckpts = checkpoint.Checkpoints(workdir, create=False)
  try:

    def restore(step):
      if task is not None:
        check_vocab(ckpts.meta(step), task, f'workdir {workdir}')
      return ckpts.restore_params(
          step, abstract_params, parallel.replicated(mesh), what
      )[0]

    step, params = ckpts.first_good(restore, best=True)
  finally:
    ckpts.close()
  if step is None:
    raise CheckpointError(
        f'every checkpoint of {workdir} is damaged (moved to'
        f' {ckpts.directory}/corrupt/); train again'
    )
  return params, step


def _abstract_params(model):
  sample = batching.dummy_batch(1, 1)
  return jax.eval_shape(
      lambda: model.init(
          jax.random.key(0), sample['source'], sample['target_in']
      )['params']
  )


def _check_has_checkpoints(workdir: str):
  if not checkpoint.has_checkpoints(workdir):
    raise CheckpointError(
        f'workdir {workdir} has no checkpoints; train first '
        f'(python -m nmt_jax.main --config=... --workdir={workdir})'
    )


def restore_for_inference(config, workdir: str, corpus: bool = True):
  """(task, model, mesh, params, step) of the workdir's best checkpoint.

  `config` is resolved (validation.resolve). Without `corpus` the task has
  the vocabularies only (data.load_vocab_task): enough to translate or score
  given sentences, and the corpus is not read.
  """
  _check_has_checkpoints(workdir)
  run_config.check_identity(config, workdir, 'restoring its checkpoint')
  task = _load_task(config, workdir, corpus)
  model = steps.create_model(config, task)
  mesh = parallel.make_mesh(config.parallel.mesh_shape)
  params, step = best_params(
      workdir, _abstract_params(model), mesh, 'this config', task=task
  )
  return task, model, mesh, params, step


def _load_task(config, workdir: str, corpus: bool):
  if corpus:
    return data.load_task(config.data, config.seed, workdir)
  return data.load_vocab_task(config.data, workdir)


def restore_scorer(config, paths: Sequence[str], corpus: bool = True):
  """(task, scorer, mesh, params, steps) for one workdir or an ensemble.

  One workdir: its model (checked against `config`), params its tree. Several:
  an ensemble (scorers.Ensemble, params a tuple); each member's model comes
  from its own config.json (attention kinds may differ), `config` gives the
  data (its vocabulary fields must match every member's) and decoding.
  `corpus` as in restore_for_inference.
  """
  if len(paths) == 1:
    task, model, mesh, params, step = restore_for_inference(
        config, paths[0], corpus
    )
    return task, scorers.Single(model), mesh, params, [step]
  wanted = {
      k: v
      for k, v in run_config.identity_fields(config).items()
      if k.startswith('data.')
  }
  configs = []
  for path in paths:
    _check_has_checkpoints(path)
    configs.append(run_config.load_config(path))
    stored = run_config.identity_fields(configs[-1])
    changes = [
        f'{k}: {stored.get(k)!r} there, {v!r} here'
        for k, v in sorted(wanted.items())
        if stored.get(k) != v
    ]
    if changes:
      raise CheckpointError(
          f'ensemble member {path} was trained on other data than this'
          f' config: {"; ".join(changes)}; ensemble workdirs of one corpus'
          ' and vocabulary'
      )
  aligned = config.decode.alignments or config.decode.replace_unk
  if aligned and not any(
      attention.get(c.model.attention.kind).HAS_CONTEXT for c in configs
  ):
    raise ConfigError(
        'config: decode.alignments and decode.replace_unk need attention'
        ' weights and no ensemble member has attention; turn them off'
    )
  task = _load_task(config, paths[0], corpus)
  mesh = parallel.make_mesh(config.parallel.mesh_shape)
  members, params, steps_ = [], [], []
  for path, member_config in zip(paths, configs):
    model = steps.create_model(
        run_config.with_run_options(member_config, config), task
    )
    member_params, step = best_params(
        path, _abstract_params(model), mesh, f'member {path}', task=task
    )
    members.append(model)
    params.append(member_params)
    steps_.append(step)
  scorer = scorers.Ensemble(members, config.decode.ensemble_average)
  return task, scorer, mesh, tuple(params), steps_
