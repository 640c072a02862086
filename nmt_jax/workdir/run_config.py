"""A workdir's config.json, and the fields that make a model's identity.

config.json holds the run's resolved config; a later run of the same workdir
(resume, --mode=eval, translate, an ensemble member) must describe the same
model: identity_fields names what has to agree, check_identity refuses what
does not.
"""

import json
import os
from typing import Any, Dict

from absl import logging

from nmt_jax import attention
from nmt_jax import data
from nmt_jax.config import defaults
from nmt_jax.system import workdir_files
from nmt_jax.system.errors import CheckpointError
from nmt_jax.workdir import writers

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


# model.* regularisers that act in training only: the trained parameters
# compute the same function whatever their rate.
TRAINING_ONLY = (
    'model.dropout',
    'model.recurrent_dropout',
    'model.word_dropout',
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
  the training-only regularisers (TRAINING_ONLY), the initialisation (model.init_uniform) and the speed switches
  (RUN_OPTIONS: a float32 run can be evaluated in bfloat16 and back), and
  the data fields that define the vocabularies (data.vocab.* for a corpus,
  data.num_symbols for an embedded task).
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
      return (
          key not in TRAINING_ONLY + ('model.init_uniform',)
          and key[len('model.') :] not in RUN_OPTIONS
      )
    return key in data_fields or (
        not embedded and key.startswith('data.vocab.')
    )

  return {k: v for k, v in flat.items() if keep(k)}


def check_identity(config, workdir: str, doing: str):
  """Raises CheckpointError if `config` describes another model than the
  workdir's config.json (a workdir without one passes)."""
  if not os.path.exists(os.path.join(workdir, workdir_files.CONFIG)):
    return
  path = os.path.join(workdir, workdir_files.CONFIG)
  try:
    stored = identity_fields(load_config(workdir))
  except OSError as e:  # load_config raises the rest as this line already
    raise _unreadable(path, e.strerror or e) from None
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
  path = os.path.join(workdir, workdir_files.CONFIG)
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
  path = os.path.join(workdir, workdir_files.CONFIG)
  config = defaults.get_config()
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
