"""What a workdir holds besides the checkpoints, and how a run picks it up.

A workdir has `config.json` (the resolved config), `checkpoints/`
(checkpoint.py), `metrics.jsonl` and TensorBoard events (writers.py),
`vocab/` and `data_cache/` for real corpora (nmt_jax/data/encoding.py) and,
after evaluation, `eval_results.json` and `eval_hypotheses.txt`.
"""

import contextlib
import json
import os
from typing import Any, Dict, Optional, Sequence

from absl import logging
import jax

from nmt_jax import attention
from nmt_jax import checkpoint
from nmt_jax import data
from nmt_jax import default_config
from nmt_jax import parallel
from nmt_jax import plateau
from nmt_jax import scorers
from nmt_jax import steps
from nmt_jax import writers
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
  while True:
    try:
      os.rmdir(directory)
    except OSError:
      return
    if directory == top or os.path.dirname(directory) == directory:
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
    train_config = load_config(workdir).train
  except (
      OSError,
      ValueError,
      CheckpointError,
  ):  # no checkpoint, results, config
    return False
  if last >= train_config.num_steps:
    return True
  # Stopped early: its validations up to `last` say so, as a resume replays.
  return plateau.resume(train_config, workdir, last, 1.0).stopped


# ------------------------------------------------------- the model's identity


# model.* fields that change how a trained model runs, not what it computes:
# an evaluation may set them otherwise than training did.
RUN_OPTIONS = (
    'dtype',
    'explicit_weight_grads',
    'gate_table',
    'hoist_weight_grads',
    'project_query',
    'scan_unroll',
)


def with_run_options(member_config, config):
  """A workdir's config with `config`'s run options and decoding fields.

  An ensemble builds each member from its own config.json; the command
  line's compute dtype, speed switches and (for members of its attention
  kind) decoding fields such as flexible attention's tau apply to it as to a
  single workdir.
  """
  for field in RUN_OPTIONS:  # member_config: a fresh load_config, changed here
    if field in config.model:
      member_config.model[field] = config.model[field]
  kind = config.model.attention.kind
  if member_config.model.attention.kind == kind:
    for field in attention.get(kind).DECODING_FIELDS:
      member_config.model.attention[field] = config.model.attention[field]
  return member_config


def identity_fields(config) -> Dict[str, Any]:
  """The config fields that say what a workdir's parameters mean.

  Every model.* field (of model.attention, those the kind's `identity`
  names: its own fields without those that only steer decoding) except
  dropout and the speed switches (RUN_OPTIONS: a float32 run can be evaluated
  in bfloat16 and back), and the data fields that define the vocabularies
  (data.vocab.* for a corpus, data.num_symbols for an embedded task).
  Flattened, JSON values.
  """
  flat = _flatten(json.loads(config.to_json_best_effort()))
  kind = attention.get(config.model.attention.kind)
  kind_fields = {
      f'model.attention.{f}' for f in kind.identity(config.model.attention)
  } | {'model.attention.kind'}
  embedded = config.data.name in data.embedded.NAMES
  data_fields = (
      'data.name',
      'data.source_lang',
      'data.target_lang',
      'data.reverse_source',
  ) + (('data.num_symbols',) if embedded else ())

  def keep(key: str) -> bool:
    if key.startswith('model.attention.'):
      return key in kind_fields
    if key.startswith('model.'):
      return key != 'model.dropout' and key[len('model.') :] not in RUN_OPTIONS
    return key in data_fields or (
        not embedded and key.startswith('data.vocab.')
    )

  return {k: v for k, v in flat.items() if keep(k)}


def check_identity(config, workdir: str, doing: str):
  """Raises CheckpointError if `config` describes another model than the
  workdir's config.json (a workdir without one passes)."""
  if not os.path.exists(os.path.join(workdir, 'config.json')):
    return
  try:
    stored = identity_fields(load_config(workdir))
  except (OSError, ValueError) as e:
    raise CheckpointError(
        f'{workdir}/config.json cannot be read ({e}); restore it, or use'
        ' another --workdir'
    ) from None
  wanted = identity_fields(config)
  changes = [
      f'{k}: {stored.get(k)!r} there, {wanted.get(k)!r} here'
      for k in sorted(set(stored) | set(wanted))
      if stored.get(k) != wanted.get(k)
  ]
  if changes:
    raise CheckpointError(
        f'workdir {workdir} holds another model than this config ({doing}):'
        f' {"; ".join(changes)}; use the config it was trained with (its'
        ' config.json), or another --workdir'
    )


# ---------------------------------------------------------- config.json


def write_config(workdir: str, config):
  """Writes config.json.

  Logs the fields that differ from the workdir's earlier run.
  """
  path = os.path.join(workdir, 'config.json')
  resolved = json.loads(config.to_json_best_effort())
  if os.path.exists(path):
    load_config(workdir)  # one that cannot be read is not replaced
    before = _flatten(_read_config_json(path))
    changes = {
        k: (before.get(k), v)
        for k, v in _flatten(resolved).items()
        if before.get(k) != v
    }
    if changes:
      logging.warning(
          "config differs from the workdir's config.json: %s",
          ', '.join(
              f'{k}: {old!r} -> {new!r}'
              for k, (old, new) in sorted(changes.items())
          ),
      )
  writers.write_json(path, resolved)


def _flatten(tree, prefix=''):
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      flat.update(_flatten(value, f'{prefix}{key}.'))
    else:
      flat[f'{prefix}{key}'] = value
  return flat


def load_config(workdir: str):
  """The workdir's resolved config (config.json) as a ConfigDict.

  Fields added to nmt_jax since the run was made keep their defaults. Raises
  OSError when there is none, CheckpointError when it cannot be read.
  """
  path = os.path.join(workdir, 'config.json')
  config = default_config.get_config()
  try:
    _merge(config, _read_config_json(path))
  except (TypeError, AttributeError, ValueError) as e:  # fields of wrong types
    raise _unreadable(path, e) from None
  return config


def _read_config_json(path: str) -> Dict[str, Any]:
  with open(path, encoding='utf-8') as f:
    try:
      stored = json.load(f)
    except ValueError as e:  # also a UnicodeDecodeError
      raise _unreadable(path, e) from None
  if not isinstance(stored, dict):
    raise _unreadable(path, 'not a JSON object')
  return stored


def _unreadable(path: str, why) -> CheckpointError:
  return CheckpointError(
      f'{path} cannot be read ({why}); restore it, or use another --workdir'
  )


def _merge(config, stored: Dict[str, Any]):
  for key, value in stored.items():
    if key in config and isinstance(value, dict):
      _merge(config[key], value)
    elif key in config:
      current = config[key]
      config[key] = tuple(value) if isinstance(current, tuple) else value


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
  other_kind = load_config(workdir).model.attention.kind
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
  check_identity(config, workdir, 'restoring its checkpoint')
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
      k: v for k, v in identity_fields(config).items() if k.startswith('data.')
  }
  configs = []
  for path in paths:
    _check_has_checkpoints(path)
    configs.append(load_config(path))
    stored = identity_fields(configs[-1])
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
    model = steps.create_model(with_run_options(member_config, config), task)
    member_params, step = best_params(
        path, _abstract_params(model), mesh, f'member {path}', task=task
    )
    members.append(model)
    params.append(member_params)
    steps_.append(step)
  scorer = scorers.Ensemble(members, config.decode.ensemble_average)
  return task, scorer, mesh, tuple(params), steps_
