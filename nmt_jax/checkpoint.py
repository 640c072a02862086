"""A workdir's Orbax checkpoints: last few steps, best by validation BLEU.

A step directory holds `state` (TrainState: step, params, optimizer state),
`meta` (JSON: config, vocabulary, validation metrics) and `data` (the Grain
training iterator's position, one file per process). Orbax writes each
step to a temporary directory and renames it when complete, so a process
killed mid-save leaves the previous checkpoints intact.
"""

import logging as std_logging
import os
from typing import Any, Dict, Optional, Tuple

import grain
import jax
import orbax.checkpoint as ocp

from nmt_jax.errors import CheckpointError

policies = ocp.checkpoint_managers


class _NoMetricsFilter(std_logging.Filter):
  """Drops Orbax's warning for saves between evaluations.

  Those saves have no BLEU on purpose.
  """

  def filter(self, record):
    return 'did not provide metrics' not in record.getMessage()


std_logging.getLogger('absl').addFilter(_NoMetricsFilter())


def _path_name(path) -> str:
  """A key path as a name such as 'opt_state/1/0/count'.

  Works for a live tree (attributes, tuples) and Orbax metadata (dicts) alike.
  """
  parts = []
  for key in path:
    for attribute in ('key', 'name', 'idx'):
      if hasattr(key, attribute):
        parts.append(str(getattr(key, attribute)))
        break
  return '/'.join(parts)


def _leaf_shapes(tree) -> Dict[str, Tuple[int, ...]]:
  flat = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {
      _path_name(path): tuple(getattr(leaf, 'shape', ())) for path, leaf in flat
  }


class Checkpoints:
  """The checkpoints of `<workdir>/checkpoints`."""

  def __init__(self, workdir: str, keep: int = 2, create: bool = True):
    self.directory = os.path.join(os.path.abspath(workdir), 'checkpoints')
    options = ocp.CheckpointManagerOptions(
        create=create,
        enable_async_checkpointing=True,
        # Keep the newest `keep` (resume never goes back in time)
        # and the best by BLEU.
        preservation_policy=policies.AnyPreservationPolicy([
            policies.LatestN(keep),
            policies.BestN(
                get_metric_fn=lambda m: m['bleu'],
                reverse=False,
                n=1,
                keep_checkpoints_without_metrics=False,
            ),
        ]),
        best_fn=lambda m: m['bleu'],
        best_mode='max',
    )
    self.manager = ocp.CheckpointManager(
        self.directory,
        options=options,
        item_handlers={
            'state': ocp.StandardCheckpointHandler(),
            'meta': ocp.JsonCheckpointHandler(),
            'data': grain.checkpoint.CheckpointHandler(),
        },
    )

  def latest_step(self) -> Optional[int]:
    return self.manager.latest_step()

  def best_step(self) -> Optional[int]:
    """The step with the best validation BLEU, else the latest."""
    best = self.manager.best_step()
    return best if best is not None else self.latest_step()

  def save(
      self,
      step: int,
      state,
      meta: Dict[str, Any],
      bleu: Optional[float] = None,
      data_iterator=None,
  ):
    """Starts an asynchronous save; `bleu` ranks it for the best checkpoint."""
    items = dict(
        state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)
    )
    if data_iterator is not None:
      items['data'] = grain.checkpoint.CheckpointSave(data_iterator)
    self.manager.save(
        step,
        args=ocp.args.Composite(**items),
        metrics=None if bleu is None else {'bleu': float(bleu)},
        force=True,
    )

  def has_data_state(self, step: int) -> bool:
    """Whether `step` holds this process's data-iterator state.

    It must have been saved with the same process count.
    """
    name = f'process_{jax.process_index()}-of-{jax.process_count()}.json'
    return os.path.isfile(os.path.join(self.directory, str(step), 'data', name))

  def meta(self, step: int) -> Dict[str, Any]:
    return self.manager.restore(
        step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())
    ).meta

  def check_compatible(
      self,
      step: int,
      abstract_state,
      what: str = 'this config',
      subtree: Optional[str] = None,
  ):
    """Raises CheckpointError naming the first array whose shape differs."""
    stored = self.manager.item_metadata(step)['state']
    stored = _leaf_shapes(stored[subtree] if subtree else stored)
    wanted = _leaf_shapes(abstract_state)
    for name in sorted(set(stored) | set(wanted)):
      if stored.get(name) != wanted.get(name):
        raise CheckpointError(
            f'checkpoint {self.directory}/{step} does not match {what}: {name}'
            f' has shape {stored.get(name, "(absent)")} there but'
            f' {wanted.get(name, "(absent)")} here; use the config the workdir'
            ' was trained with (its config.json) or a new --workdir'
        )

  def restore(
      self, step: int, abstract_state, data_iterator=None
  ) -> Tuple[Any, Dict[str, Any]]:
    """Restores (state, meta) of `step` onto abstract_state's shapes/shardings.

    `data_iterator` (a Grain iterator) is moved to the saved position when the
    checkpoint has one for this process; the caller checks it against the step.
    """
    self.check_compatible(step, abstract_state)
    items = dict(
        state=ocp.args.StandardRestore(abstract_state),
        meta=ocp.args.JsonRestore(),
    )
    if data_iterator is not None and self.has_data_state(step):
      items['data'] = grain.checkpoint.CheckpointRestore(data_iterator)
    restored = self.manager.restore(step, args=ocp.args.Composite(**items))
    return restored.state, restored.meta

  def restore_params(
      self, step: int, abstract_params, sharding, what: str = 'this config'
  ):
    """`step`'s params, checked against abstract_params, placed with `sharding`.

    The target is built from the stored shapes, so a checkpoint written on any
    number of devices or processes restores here.
    """
    self.check_compatible(step, abstract_params, what, subtree='params')
    stored = self.manager.item_metadata(step)['state']
    target = jax.tree_util.tree_map(
        lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=sharding),
        stored,
    )
    restored = self.manager.restore(
        step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target))
    )
    return restored.state['params']

  def close(self):
    """Waits for pending saves; always call it.

    An unfinished async save is lost.
    """
    self.manager.wait_until_finished()
    self.manager.close()


def abstract(tree):
  """ShapeDtypeStructs (with shardings) of a pytree of arrays."""
  return jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, tree)


def has_checkpoints(workdir: str) -> bool:
  directory = os.path.join(os.path.abspath(workdir), 'checkpoints')
  return os.path.isdir(directory) and any(
      name.isdigit() for name in os.listdir(directory)
  )
