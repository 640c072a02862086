"""A trained model, or an ensemble, restored from its workdirs for decoding."""

from typing import Sequence

import jax

from nmt_jax import attention
from nmt_jax import data
from nmt_jax.data import batching
from nmt_jax.decoding import scorers
from nmt_jax.model import seq2seq
from nmt_jax.system import parallel
from nmt_jax.system.errors import CheckpointError
from nmt_jax.system.errors import ConfigError
from nmt_jax.workdir import checkpoint
from nmt_jax.workdir import run_config


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

  Or of the kept step that config.decode.step names. `config` is resolved (validation.resolve). Without `corpus` the task has
  the vocabularies only (data.load_vocab_task): enough to translate or score
  given sentences, and the corpus is not read.
  """
  _check_has_checkpoints(workdir)
  run_config.check_identity(config, workdir, 'restoring its checkpoint')
  task = _load_task(config, workdir, corpus)
  model = seq2seq.create_model(config, task)
  mesh = parallel.make_mesh(config.parallel.mesh_shape)
  params, step = checkpoint.best_params(
      workdir,
      _abstract_params(model),
      mesh,
      'this config',
      task=task,
      step=config.decode.step,
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
    model = seq2seq.create_model(
        run_config.with_run_options(member_config, config), task
    )
    member_params, step = checkpoint.best_params(
        path,
        _abstract_params(model),
        mesh,
        f'member {path}',
        task=task,
        step=config.decode.step,
    )
    members.append(model)
    params.append(member_params)
    steps_.append(step)
  scorer = scorers.Ensemble(members, config.decode.ensemble_average)
  return task, scorer, mesh, tuple(params), steps_
