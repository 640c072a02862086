"""A workdir's Orbax checkpoints: last few steps, best by validation BLEU.

A step directory holds `state` (TrainState: step, params, optimizer state),
`meta` (JSON: config, vocabulary, validation metrics, and a CRC-32 of every
array of `state`) and `data` (the Grain training iterator's position, one file
per process). Orbax writes each step to a temporary directory and renames it
when complete, so a process killed mid-save leaves the previous checkpoints
intact.

A checkpoint that cannot be read, or whose arrays do not match their
checksums, is damaged: it is logged in one line, moved aside (never deleted)
to `checkpoints/corrupt/<step>`, and the next good one is used.
"""

import contextlib
import json
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from absl import logging
import grain
import jax
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp

from nmt_jax.data import dataset
from nmt_jax.system import parallel
from nmt_jax.system import workdir_files
from nmt_jax.system.errors import CheckpointError
from nmt_jax.workdir import integrity
from nmt_jax.workdir import kept_steps
from nmt_jax.workdir import library_logs
from nmt_jax.workdir import locks
from nmt_jax.workdir.integrity import DamagedCheckpoint

policies = ocp.checkpoint_managers


def _every_process(flags) -> np.ndarray:
  """[processes, len(flags)]: each process's flags (with several, a
  collective every process must call)."""
  flags = np.asarray(flags, np.int32)
  if jax.process_count() == 1:
    return flags[None]
  return multihost_utils.process_allgather(flags)


def _leaf_shapes(tree) -> Dict[str, Tuple[int, ...]]:
  flat = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {
      integrity.path_name(path): tuple(getattr(leaf, 'shape', ()))
      for path, leaf in flat
  }


class Checkpoints:
  """The checkpoints of `<workdir>/checkpoints`."""

  def __init__(
      self,
      workdir: str,
      keep: int = 2,
      create: bool = True,
      keep_every: int = 0,
  ):
    self.directory = os.path.join(
        os.path.abspath(workdir), workdir_files.CHECKPOINTS
    )
    # Keep the newest `keep` (resume never goes back in time), the best by
    # BLEU and, with `keep_every`, every step that is a multiple of it.
    keeping = [
        policies.LatestN(keep),
        policies.BestN(
            get_metric_fn=lambda m: m['bleu'],
            reverse=False,
            n=1,
            keep_checkpoints_without_metrics=False,
        ),
    ]
    if keep_every:
      keeping.append(policies.EveryNSteps(keep_every))
    # A resume never deletes what an earlier keep_every kept.
    self._workdir, self._keep_every = workdir, keep_every
    self._kept = (
        kept_steps.read(workdir, self.directory, keep_every)
        if create
        else set()
    )
    if self._kept:
      keeping.append(policies.CustomSteps(sorted(self._kept)))
    options = ocp.CheckpointManagerOptions(
        create=create,
        enable_async_checkpointing=True,
        preservation_policy=policies.AnyPreservationPolicy(keeping),
        best_fn=lambda m: m['bleu'],
        best_mode='max',
    )
    self._saving = None  # the step of the asynchronous save in flight
    try:
      self.manager = ocp.CheckpointManager(
          self.directory,
          options=options,
          item_handlers={
              'state': ocp.StandardCheckpointHandler(),
              'meta': ocp.JsonCheckpointHandler(),
              'data': grain.checkpoint.CheckpointHandler(),
          },
      )
    except ValueError as e:  # it reads every step's metrics (BLEU) file
      raise CheckpointError(
          f'cannot read the checkpoints in {self.directory}'
          f' ({integrity.one_line(e)}):'
          f' {integrity.unreadable_metrics(self.directory)}'
      ) from None

  def latest_step(self) -> Optional[int]:
    return self.manager.latest_step()

  def best_step(self) -> Optional[int]:
    """The step with the best validation BLEU, else the latest."""
    best = self.manager.best_step()
    return best if best is not None else self.latest_step()

  def best_bleu(self) -> Optional[float]:
    """Validation BLEU of the best checkpoint (None: none has one)."""
    best = self.manager.best_step()
    if best is None:
      return None
    try:
      return self.meta(best).get('validation', {}).get('bleu')
    except DamagedCheckpoint:  # set aside when restored; any BLEU beats it
      return None

  def save(
      self,
      step: int,
      state,
      meta: Dict[str, Any],
      bleu: Optional[float] = None,
      data_iterator=None,
  ):
    """Starts an asynchronous save; `bleu` ranks it for the best checkpoint.

    The arrays' checksums go into `meta`, computed before the save starts.
    """
    meta = dict(meta, checksums=integrity.checksums(state))
    items = dict(
        state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)
    )
    if data_iterator is not None:
      items['data'] = grain.checkpoint.CheckpointSave(data_iterator)
    # The save in flight fails here, not in the new one's name.
    with self._writing(self._saving):
      self.manager.wait_until_finished()
    self._saving = step
    with self._writing(step):
      self.manager.save(
          step,
          args=ocp.args.Composite(**items),
          metrics=None if bleu is None else {'bleu': float(bleu)},
          force=True,
      )
    if self._keep_every and step % self._keep_every == 0:
      self._kept.add(step)
      kept_steps.write(self._workdir, self._kept)

  @contextlib.contextmanager
  def _writing(self, step):
    """A failed save (disk full, storage gone) as one CheckpointError line.

    Orbax writes into a temporary directory: the earlier checkpoints stay.
    """
    try:
      yield
    except Exception as e:  # OSError, or Orbax's wrapping of one
      if not integrity.failed_writing(e):
        raise  # not the storage's: a bug, with its traceback
      # Its other writes fail in Orbax's threads and event loop after this.
      library_logs.save_failed()
      raise CheckpointError(
          f'saving a checkpoint in {self.directory}'
          f' failed{"" if step is None else f" (step {step})"}:'
          f' {integrity.one_line(e)}; free space or fix the storage, then run'
          ' the same command again to resume from the last complete checkpoint'
      ) from None

  def _data_state_file(self, step: int) -> str:
    name = f'process_{jax.process_index()}-of-{jax.process_count()}.json'
    return os.path.join(self.directory, str(step), 'data', name)

  def has_data_state(self, step: int) -> bool:
    """Whether `step` holds this process's data-iterator state.

    It must have been saved with the same process count.
    """
    return os.path.isfile(self._data_state_file(step))

  def _agree_data_state_readable(self, step: int, restore_data: bool):
    """Raises DamagedCheckpoint on every process if one cannot read its own
    data-iterator state of `step`.

    Each process reads its own file, and Orbax's restore ends in a barrier
    of all processes: one that failed before it would leave the others
    waiting there.
    """
    path, problem = self._data_state_file(step), ''
    if restore_data:
      name = os.path.basename(path)
      try:
        with open(path) as f:
          if not isinstance(json.load(f), dict):
            problem = f'{name} is not a JSON object'
      except (OSError, ValueError) as e:
        problem = f'{name}: {integrity.one_line(e)}'
    failed = np.flatnonzero(_every_process([bool(problem)])[:, 0])
    if failed.size and not problem:
      problem = f'process {failed[0]} cannot read its data-iterator state'
    if problem:
      raise DamagedCheckpoint(problem)

  def meta(self, step: int) -> Dict[str, Any]:
    """`step`'s meta JSON; raises DamagedCheckpoint if it cannot be read."""
    with integrity.reading():
      meta = self.manager.restore(
          step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())
      ).meta
      if not isinstance(meta, dict):
        raise DamagedCheckpoint(f'meta is {type(meta).__name__}, not a dict')
    return meta

  def check_compatible(
      self,
      step: int,
      abstract_state,
      what: str = 'this config',
      subtree: Optional[str] = None,
  ):
    """Raises CheckpointError naming the first array whose shape differs."""
    metadata = self.manager.item_metadata(step)['state']
    stored = _leaf_shapes(metadata)
    if not stored:  # not another model's: no metadata read
      raise DamagedCheckpoint(
          'its state has no array metadata (state/_METADATA missing or empty)'
      )
    if subtree:
      stored = _leaf_shapes(metadata[subtree])
    wanted = _leaf_shapes(abstract_state)
    for name in sorted(set(stored) | set(wanted)):
      if stored.get(name) != wanted.get(name):
        # The model fields are checked before (run_config.check_identity).
        which = (
            ' (the optimizer state: train.optimizer, train.weight_decay,'
            ' train.clip_norm and train.plateau_decay must be as the run was'
            ' started with)'
            if name.startswith('opt_state')
            else ' (train.ema_decay: on or off as the run was started with)'
            if name.startswith('ema_params')
            else ''
        )
        raise CheckpointError(
            f'checkpoint {self.directory}/{step} does not match {what}: {name}'
            f' has shape {stored.get(name, "(absent)")} there but'
            f' {wanted.get(name, "(absent)")} here{which}; use the config the'
            ' workdir was trained with (its config.json) or a new --workdir'
        )

  def restore(
      self, step: int, abstract_state, data_iterator=None
  ) -> Tuple[Any, Dict[str, Any]]:
    """Restores (state, meta) of `step` onto abstract_state's shapes/shardings.

    `data_iterator` (a Grain iterator) is moved to the saved position when the
    checkpoint has one for this process; the caller checks it against the step.
    Raises DamagedCheckpoint if the step cannot be read or does not verify,
    CheckpointError if it does not fit `abstract_state`.
    """
    with integrity.reading():
      self.check_compatible(step, abstract_state)
      items = dict(
          state=ocp.args.StandardRestore(abstract_state),
          meta=ocp.args.JsonRestore(),
      )
      restore_data = data_iterator is not None and self.has_data_state(step)
      self._agree_data_state_readable(step, restore_data)
      if restore_data:
        items['data'] = grain.checkpoint.CheckpointRestore(data_iterator)
      restored = self.manager.restore(step, args=ocp.args.Composite(**items))
      integrity.verify(restored.state, restored.meta.get('checksums'))
    return restored.state, restored.meta

  def restore_tree(self, step: int, sharding) -> Tuple[Any, Dict[str, Any]]:
    """(state as stored: nested dicts of arrays, meta) of `step`, verified.

    The arrays are placed with `sharding`; the target is built from the
    stored shapes, so a checkpoint written on any number of devices or
    processes restores here. Raises DamagedCheckpoint as `restore`.
    """
    with integrity.reading():
      stored = self.manager.item_metadata(step)['state']
      target = jax.tree_util.tree_map(
          lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=sharding),
          stored,
      )
      restored = self.manager.restore(
          step,
          args=ocp.args.Composite(
              state=ocp.args.StandardRestore(target),
              meta=ocp.args.JsonRestore(),
          ),
      )
      integrity.verify(restored.state, restored.meta.get('checksums'))
    return restored.state, restored.meta

  def restore_params(
      self, step: int, abstract_params, sharding, what: str = 'this config'
  ) -> Tuple[Any, Dict[str, Any]]:
    """(params, meta) of `step` (its EMA when kept), checked.

    Checked against abstract_params.
    The params are placed with `sharding` (see restore_tree). Raises as
    `restore`.
    """
    with integrity.reading():
      self.check_compatible(step, abstract_params, what, subtree='params')
    state, meta = self.restore_tree(step, sharding)
    # A run with train.ema_decay is evaluated with the average it kept.
    return state.get('ema_params') or state['params'], meta

  def first_good(
      self,
      restore_fn: Callable[[int], Any],
      best: bool = False,
      only: Optional[int] = None,
  ):
    """restore_fn(step) of the newest (or best) step that is not damaged.

    With `only`, that step alone is tried (no fallback to another one).

    Each damaged step is logged and moved to checkpoints/corrupt/ (or, in a
    read-only workdir or one another run holds the lock of, skipped).
    Returns (step, restore_fn(step)), or (None, None) when no step is left.
    With several processes they agree: a step one of them cannot read (its
    own data-iterator file, damage only it sees) is damaged for all, or they
    would train from different steps; a CheckpointError on one (out of
    memory, the storage refusing a read) stops all.
    """
    skipped = set()
    while True:
      steps = [
          s
          for s in self.manager.all_steps()
          if s not in skipped and only in (None, s)
      ]
      if not steps:
        return None, None
      step = self._best_of(steps) if best else max(steps)
      result, reason, fatal = None, None, None
      try:
        result = restore_fn(step)
      except DamagedCheckpoint as e:
        reason = str(e)
      except CheckpointError as e:
        fatal = e
      # Looked at before any process sets the step aside.
      gone = reason is not None and not os.path.isdir(
          os.path.join(self.directory, str(step))
      )
      verdicts = _every_process([reason is not None, gone, fatal is not None])
      stopped = np.flatnonzero(verdicts[:, 2])
      if fatal is not None:
        raise fatal
      if stopped.size:  # the others would wait for it in the next collective
        raise CheckpointError(
            f'process {stopped[0]} could not read checkpoint {step}; its log'
            ' says why'
        )
      failed = np.flatnonzero(verdicts[:, 0])
      if failed.size and reason is None:
        reason = f'process {failed[0]} could not read it'
      gone = bool(verdicts[:, 1].any())
      if reason is None:
        return step, result
      skipped.add(step)
      if gone:
        # Rotated away by the run writing there while read, not damaged
        # (translate may read a workdir that is training).
        self.manager.reload()
        continue
      self._set_aside(step, reason)

  def _best_of(self, steps) -> int:
    """The best of `steps` by validation BLEU, else the newest.

    The manager's best when it is among them; else (its best was skipped
    but stays, in a read-only workdir) the best BLEU left, the newest of a tie.
    """
    best = self.manager.best_step()
    if best in steps:
      return best
    scored = []
    for step in steps:
      bleu = (self.manager.metrics(step) or {}).get('bleu')
      if bleu is not None:
        scored.append((bleu, step))
    return max(scored)[1] if scored else max(steps)

  def _set_aside(self, step: int, reason: str):
    source = os.path.join(self.directory, str(step))
    corrupt = os.path.join(self.directory, workdir_files.CORRUPT)
    target, n = os.path.join(corrupt, str(step)), 1
    while os.path.exists(target):
      target, n = os.path.join(corrupt, f'{step}-{n}'), n + 1
    if jax.process_index() == 0 and locks.in_use_by_another(
        os.path.dirname(self.directory)
    ):
      # Only the run writing there moves its files: the step may be one its
      # rotation is deleting right now (translate reads a training workdir).
      moved = 'left in place (a run is using the workdir)'
    elif jax.process_index() == 0:
      try:
        os.makedirs(corrupt, exist_ok=True)
        os.rename(source, target)
        moved = f'moved to {target}'
      except OSError as e:
        moved = f'left in place ({e.strerror})'
    else:
      moved = 'set aside by process 0'
    logging.warning(
        'checkpoint %s is damaged (%s); %s; trying the previous one',
        source,
        reason,
        moved,
    )
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices(f'set_aside_{step}')
    self.manager.reload()

  def close(self):
    """Waits for pending saves; always call it.

    An unfinished async save is lost.
    """
    with self._writing(self._saving):
      self.manager.wait_until_finished()
      self.manager.close()


def abstract(tree):
  """ShapeDtypeStructs (with shardings) of a pytree of arrays."""
  return jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, tree)


def set_aside_steps(workdir: str) -> List[str]:
  """The checkpoints first_good moved to checkpoints/corrupt/ as damaged."""
  directory = os.path.join(
      workdir, workdir_files.CHECKPOINTS, workdir_files.CORRUPT
  )
  return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


def has_checkpoints(workdir: str) -> bool:
  directory = os.path.join(os.path.abspath(workdir), workdir_files.CHECKPOINTS)
  return os.path.isdir(directory) and any(
      name.isdigit() for name in os.listdir(directory)
  )


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


def best_params(
    workdir: str,
    abstract_params,
    mesh,
    what: str,
    task=None,
    step: Optional[int] = None,
):
  """(params, step) of the workdir's best good checkpoint, or of `step`.

  Damaged checkpoints are set aside (checkpoint.Checkpoints.first_good); a
  named `step` that is missing or damaged is an error, never another step.
  With a `task`, its vocabularies are checked first.
  """
  ckpts = Checkpoints(workdir, create=False)
  wanted = step
  try:
    if wanted is not None and wanted not in ckpts.manager.all_steps():
      kept = ', '.join(map(str, sorted(ckpts.manager.all_steps()))) or 'none'
      raise CheckpointError(
          f'workdir {workdir} has no checkpoint of step {wanted} (kept:'
          f' {kept}); name a kept step in decode.step, or keep more in'
          ' training with train.keep_every'
      )

    def restore(step):
      if task is not None:
        check_vocab(ckpts.meta(step), task, f'workdir {workdir}')
      return ckpts.restore_params(
          step, abstract_params, parallel.replicated(mesh), what
      )[0]

    step, params = ckpts.first_good(restore, best=True, only=wanted)
  finally:
    ckpts.close()
  if step is None and wanted is not None:
    raise CheckpointError(
        f'checkpoint {wanted} of {workdir} is damaged (moved to'
        f' {ckpts.directory}/corrupt/); name another kept step in decode.step'
    )
  if step is None:
    raise CheckpointError(
        f'every checkpoint of {workdir} is damaged (moved to'
        f' {ckpts.directory}/corrupt/); train again'
    )
  return params, step
