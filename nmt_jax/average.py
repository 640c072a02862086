"""Checkpoint averaging: the mean of a workdir's last (or best) N checkpoints.

  python -m nmt_jax.average --workdir=runs/g --last=5 --output=runs/g_avg5
  python -m nmt_jax.average --workdir=runs/g --best=3 --output=runs/g_best3

The average goes into a new workdir (config.json, vocab/ and one checkpoint
holding the averaged parameters) that --mode=eval, translate and score and
train.init_from load like any other. A workdir keeps its last
train.keep_checkpoints steps and its best one: raise keep_checkpoints to
average more. Parameters are summed in float64, so the average of identical
checkpoints is that checkpoint exactly.
"""

import os
import shutil
import sys
from typing import Any, Dict, List, Optional, Sequence

from absl import app
from absl import flags
from absl import logging
import jax
import numpy as np

from nmt_jax.config import cli_flags
from nmt_jax.system import errors
from nmt_jax.system import parallel
from nmt_jax.system import progress_bars
from nmt_jax.system import workdir_files
from nmt_jax.workdir import checkpoint
from nmt_jax.workdir import folders
from nmt_jax.workdir import library_logs
from nmt_jax.workdir import locks
from nmt_jax.workdir import run_config
from nmt_jax.workdir import writers

_WORKDIR = flags.DEFINE_string('workdir', None, 'The trained workdir.')
_OUTPUT = flags.DEFINE_string(
    'output', None, 'The new workdir for the averaged checkpoint.'
)
_LAST = flags.DEFINE_integer('last', 0, 'Average the last N checkpoints.')
_BEST = flags.DEFINE_integer(
    'best', 0, 'Average the N checkpoints with the best validation BLEU.'
)


def _bleu(ckpts, step: int) -> float:
  try:
    meta = ckpts.meta(step)
  except checkpoint.DamagedCheckpoint as e:
    raise _damaged(ckpts, step, e) from None
  return meta.get('validation', {}).get('bleu', float('-inf'))


def _damaged(ckpts, step: int, error) -> errors.CheckpointError:
  return errors.CheckpointError(
      f'checkpoint {ckpts.directory}/{step} is damaged ({error}); average'
      ' checkpoints without it (a smaller --last or --best)'
  )


def _keep_checkpoints(ckpts) -> Optional[int]:
  """train.keep_checkpoints of the run (its config.json), if readable."""
  try:
    config = run_config.load_config(os.path.dirname(ckpts.directory))
  except (OSError, ValueError, errors.CheckpointError):
    return None
  return int(config.train.keep_checkpoints)


def choose_steps(ckpts, last: int = 0, best: int = 0) -> List[int]:
  """The steps to average: the newest `last` or the `best` by validation BLEU."""
  if bool(last) == bool(best) or min(last, best) < 0:
    raise errors.UserError(
        'give one of --last=N or --best=N (N >= 1) checkpoints to average'
    )
  steps = sorted(ckpts.manager.all_steps())
  wanted = last or best
  if len(steps) < wanted:
    raise errors.UserError(
        f'{ckpts.directory} holds {len(steps)} checkpoints ({steps}), fewer'
        f' than {wanted}; average fewer, or train with a higher'
        ' --config.train.keep_checkpoints'
    )
  if last:
    chosen = steps[-last:]
    keep = _keep_checkpoints(ckpts)
    if keep is not None and last > keep:
      # The newest `keep` and the best are kept: past them, an older step
      # kept only for its BLEU, not the N before the last.
      raise errors.UserError(
          f'--last={last}: the run kept its newest {keep} checkpoints (and'
          f' the best), so {chosen} are not the last {last} steps it saved;'
          f' average at most --last={keep}, or use --best=N'
      )
    return chosen
  bleu = {s: _bleu(ckpts, s) for s in steps}
  validated = [s for s in steps if bleu[s] > float('-inf')]
  if len(validated) < best:  # a step saved between validations has no BLEU
    raise errors.UserError(
        f'{ckpts.directory} holds {len(validated)} checkpoints with a'
        f' validation BLEU ({validated}), fewer than --best={best}; average'
        ' fewer, or use --last=N'
    )
  ranked = sorted(validated, key=lambda s: (bleu[s], s), reverse=True)
  chosen = sorted(ranked[:best])
  _check_best_kept(ckpts, steps, chosen, min(bleu[s] for s in chosen))
  return chosen


def _check_best_kept(ckpts, steps: List[int], chosen: List[int], worst: float):
  """UserError if a validation (metrics.jsonl) scored above `worst`, the
  lowest BLEU of the `chosen` checkpoints, and has no kept checkpoint: the
  chosen ones would not be the best.

  A run keeps its newest train.keep_checkpoints and its best checkpoint; a
  validation that only tied the best so far was not saved, so ties do not
  count.
  """
  records = writers.read_metrics(os.path.dirname(ckpts.directory))
  bleu = {
      r['step']: r['bleu']
      for r in records
      if r.get('split') == 'valid' and 'bleu' in r
  }
  gone = sorted(s for s in bleu if bleu[s] > worst and s not in steps)
  if gone:
    top = max(bleu[s] for s in gone)
    kept = sum(1 for s in steps if s in bleu and bleu[s] > top)
    fewer = f'--best={kept}, ' if kept else ''
    raise errors.UserError(
        f'--best={len(chosen)}: the validations at steps {gone} scored above'
        f' the chosen checkpoints {chosen} and have no kept checkpoint (a run'
        ' keeps its newest train.keep_checkpoints and its best); average'
        f' {fewer}--last=N, or train with a higher'
        ' --config.train.keep_checkpoints'
    )


def mean_tree(trees: Sequence[Any]):
  """Leafwise mean of pytrees of arrays, summed in float64, in their dtype."""

  def mean(*leaves):
    leaves = [np.asarray(x) for x in leaves]
    if not np.issubdtype(leaves[0].dtype, np.floating):
      return leaves[-1]  # counters (int) are taken from the newest
    total = np.sum([x.astype(np.float64) for x in leaves], axis=0)
    return (total / len(leaves)).astype(leaves[0].dtype)

  return jax.tree_util.tree_map(mean, *trees)


def average_checkpoints(
    workdir: str, output: str, last: int = 0, best: int = 0
) -> Dict[str, Any]:
  """Writes the average of `workdir`'s chosen checkpoints into `output`.

  Returns {'steps': the steps averaged, 'step': the step it is saved as}.
  """
  if not checkpoint.has_checkpoints(workdir):
    raise errors.CheckpointError(
        f'workdir {workdir} has no checkpoints; train it first'
    )
  if checkpoint.has_checkpoints(output) or os.path.abspath(
      output
  ) == os.path.abspath(workdir):
    raise errors.UserError(
        f'--output={output} already holds checkpoints; give a new folder'
    )
  # A prepared or interrupted workdir: its config, vocabulary and metrics
  # would be replaced or (metrics.jsonl) describe another model.
  held = [
      name
      for name in (
          workdir_files.CONFIG,
          workdir_files.VOCAB,
          workdir_files.METRICS,
      )
      if os.path.exists(os.path.join(output, name))
  ]
  if held:
    raise errors.UserError(
        f'--output={output} is a workdir already (it holds'
        f' {", ".join(held)}); give a new folder'
    )
  mesh = parallel.make_mesh()
  sharding = parallel.replicated(mesh)
  source = checkpoint.Checkpoints(workdir, create=False)
  try:
    steps = choose_steps(source, last, best)
    states, meta = [], None
    for step in progress_bars.bar(steps, desc='reading', unit='checkpoint'):
      try:
        state, meta = source.restore_tree(step, sharding)
      except checkpoint.DamagedCheckpoint as e:
        raise _damaged(source, step, e) from None
      states.append(jax.device_get(state))
  finally:
    source.close()
  state = dict(states[-1], params=mean_tree([s['params'] for s in states]))
  if states[-1].get('ema_params'):  # train.ema_decay: its averages averaged
    state['ema_params'] = mean_tree([s['ema_params'] for s in states])
  meta = {k: v for k, v in meta.items() if k != 'checksums'}
  meta.update(validation={}, averaged_from=os.path.abspath(workdir))
  meta['averaged_steps'] = steps
  created = folders.prepare(output)
  try:
    with locks.locked(output):
      for name in (workdir_files.CONFIG, workdir_files.VOCAB):
        path = os.path.join(workdir, name)
        if os.path.isdir(path):
          shutil.copytree(path, os.path.join(output, name), dirs_exist_ok=True)
        elif os.path.exists(path):
          shutil.copy(path, os.path.join(output, name))
      target = checkpoint.Checkpoints(output, keep=1)
      try:
        target.save(steps[-1], jax.device_put(state, sharding), meta)
      finally:
        target.close()
  except BaseException:
    if created:
      shutil.rmtree(output, ignore_errors=True)
      # The empty folders made for it (another average may use the others).
      folders.remove_if_empty(os.path.dirname(os.path.abspath(output)), created)
    raise
  logging.info(
      'averaged steps %s of %s into %s (step %d)',
      ', '.join(map(str, steps)),
      workdir,
      output,
      steps[-1],
  )
  return {'steps': steps, 'step': steps[-1]}


def main(argv):
  library_logs.install()
  if len(argv) > 1:
    cli_flags.fail(
        f'unexpected arguments: {" ".join(argv[1:])}; every option is a flag,'
        ' --name=value (--help lists them)'
    )
  try:
    average_checkpoints(_WORKDIR.value, _OUTPUT.value, _LAST.value, _BEST.value)
  except errors.UserError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)


if __name__ == '__main__':
  flags.mark_flags_as_required(['workdir', 'output'])
  app.run(main, flags_parser=cli_flags.parse_flags)
