"""What a workdir holds besides the checkpoints, and how a run picks it up.

A workdir has `config.json` (the resolved config), `checkpoints/`
(checkpoint.py), `metrics.jsonl` and TensorBoard events (writers.py),
`vocab/` and `data_cache/` for real corpora (nmt_jax/data/encoding.py) and,
after evaluation, `eval_results.json` and `eval_hypotheses.txt`.
"""

import json
import os
from typing import Any, Dict, Optional

from absl import logging
import jax

from nmt_jax import checkpoint
from nmt_jax import data
from nmt_jax import default_config
from nmt_jax import parallel
from nmt_jax import steps
from nmt_jax import writers
from nmt_jax.data import batching
from nmt_jax.data import dataset
from nmt_jax.errors import CheckpointError


def prepare(workdir: str):
  """Creates the workdir and checks it is writable.

  This happens before anything is written.
  """
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


def write_config(workdir: str, config):
  """Writes config.json.

  Logs the fields that differ from the workdir's earlier run.
  """
  path = os.path.join(workdir, 'config.json')
  resolved = json.loads(config.to_json_best_effort())
  if os.path.exists(path):
    with open(path) as f:
      before = _flatten(json.load(f))
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

  Fields added to nmt_jax since the run was made keep their defaults.
  """
  with open(os.path.join(workdir, 'config.json'), encoding='utf-8') as f:
    stored = json.load(f)
  config = default_config.get_config()
  _merge(config, stored)
  return config


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


def load_params_from(workdir: str, config, abstract_params, mesh):
  """Best params of another workdir (train.init_from).

  They are checked against this model.
  """
  config_path = os.path.join(workdir, 'config.json')
  if not os.path.exists(config_path) or not checkpoint.has_checkpoints(workdir):
    raise CheckpointError(
        f'train.init_from={workdir!r} has no config.json and checkpoints; '
        'point it at the workdir of a finished training run'
    )
  with open(config_path) as f:
    other_kind = json.load(f)['model']['attention']['kind']
  if other_kind != config.model.attention.kind:
    raise CheckpointError(
        f'train.init_from={workdir!r} trained attention kind {other_kind!r}, '
        f'this config {config.model.attention.kind!r}; fine-tune a workdir '
        'of the same kind'
    )
  ckpts = checkpoint.Checkpoints(workdir, create=False)
  try:
    step = ckpts.best_step()
    params = ckpts.restore_params(
        step,
        abstract_params,
        parallel.replicated(mesh),
        f'this model (train.init_from={workdir})',
    )
    return params, step
  finally:
    ckpts.close()


def restore_for_inference(config, workdir: str):
  """(task, model, mesh, params, step) of the workdir's best checkpoint.

  `config` is resolved (validation.resolve).
  """
  if not checkpoint.has_checkpoints(workdir):
    raise CheckpointError(
        f'workdir {workdir} has no checkpoints; train first '
        f'(python -m nmt_jax.main --config=... --workdir={workdir})'
    )
  task = data.load_task(config.data, config.seed, workdir)
  model = steps.create_model(config, task)
  mesh = parallel.make_mesh(config.parallel.mesh_shape)
  sample = batching.dummy_batch(1, 1)
  abstract_params = jax.eval_shape(
      lambda: model.init(
          jax.random.key(0), sample['source'], sample['target_in']
      )['params']
  )
  ckpts = checkpoint.Checkpoints(workdir, create=False)
  try:
    step = ckpts.best_step()
    check_vocab(ckpts.meta(step), task, f'workdir {workdir}')
    params = ckpts.restore_params(
        step, abstract_params, parallel.replicated(mesh)
    )
  finally:
    ckpts.close()
  return task, model, mesh, params, step
