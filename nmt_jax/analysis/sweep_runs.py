"""Sweeps as a library: grids and sweep files -> runs, running them, tau sweeps.

The command line is nmt_jax/sweep.py:

  python -m nmt_jax.sweep run|aggregate|tau
"""

import contextlib
import dataclasses
import fnmatch
import itertools
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Dict, List, Sequence

from absl import logging

from nmt_jax.analysis import plots
from nmt_jax.analysis import runs as runs_lib
from nmt_jax.config import cli_flags
from nmt_jax.config import validation
from nmt_jax.system import errors
from nmt_jax.system import progress_bars
from nmt_jax.system import workdir_files
from nmt_jax.training import plateau
from nmt_jax.workdir import locks
from nmt_jax.workdir import run_config


@dataclasses.dataclass
class Run:
  name: str
  config: str  # path[:preset]
  overrides: Dict[str, object]

  def command(self, root: str, mode: str = 'train') -> List[str]:
    args = [
        sys.executable,
        '-m',
        'nmt_jax.main',
        f'--config={self.config}',
        f'--workdir={os.path.join(root, self.name)}',
    ] + ([] if mode == 'train' else [f'--mode={mode}'])
    return args + [
        f'--config.{k}={_format(v).replace("{root}", root)}'
        for k, v in self.overrides.items()
    ]


def _format(value) -> str:
  if isinstance(value, float) and math.isinf(value):
    return 'inf'
  if isinstance(value, (tuple, list)):
    return (
        '('
        + ','.join(_format(v) for v in value)
        + (',)' if len(value) == 1 else ')')
    )
  return str(value)


def parse_assignment(text: str, flag: str):
  field, sep, value = text.partition('=')
  if not sep or not field or not value:
    raise errors.ConfigError(
        f'--{flag}={text!r} is not field=value(s); e.g. '
        f'--{flag}=model.attention.num_memory=1,4,16'
    )
  return field, value


def check_overrides(runs: Sequence[Run]):
  """ConfigError naming the first override that is not a config field.

  Or the first run whose config does not validate. Checked before any run
  starts: a typo in --grid, --set or a sweep file would otherwise fail every
  run, one after the other.
  """
  configs = {}
  for run in runs:
    if run.config not in configs:
      path, _, preset = run.config.partition(':')
      try:
        configs[run.config] = cli_flags.load_config(path, preset or None)
      except errors.ConfigError as e:
        raise errors.ConfigError(f'run {run.name}: {e}') from None
    for field in run.overrides:
      node = configs[run.config]
      for part in field.split('.'):
        if not hasattr(node, 'keys') or part not in node:
          raise errors.ConfigError(
              f'run {run.name}: {field} is not a config field (from --grid,'
              ' --set or the sweep file); every field is listed in'
              ' nmt_jax/config/defaults.py'
          )
        node = node[part]
    # The values too: a run that cannot start would fail only when its turn
    # comes, after the runs before it have trained.
    try:
      validation.resolve(cli_flags.config_of_command(run.command('root')))
    except errors.ConfigError as e:
      raise errors.ConfigError(f'run {run.name}: {e}') from None


def grid_runs(
    config: str, grid: Sequence[str], common: Dict[str, object]
) -> List[Run]:
  """The product of `grid` ('field=v1,v2') over one config.

  The run names say the values.
  """
  axes = []
  for text in grid:
    field, values = parse_assignment(text, 'grid')
    axes.append([(field, v) for v in values.split(',')])
  runs = []
  for combo in itertools.product(*axes):
    name = (
        '+'.join(f'{field.split(".")[-1]}={value}' for field, value in combo)
        or 'run'
    )
    runs.append(Run(name, config, {**common, **dict(combo)}))
  return runs


def load_sweep(spec: str, common: Dict[str, object]) -> List[Run]:
  """Runs of a sweep file `path[:arg]`.

  The file's get_sweep(arg) returns [{'name', 'config', 'overrides'}]. A
  relative config path in the file is relative to the sweep file.
  """
  path, _, arg = spec.partition(':')
  if not os.path.isfile(path):
    raise errors.ConfigError(
        f'sweep file {path} does not exist; e.g. '
        '--sweep=configs/sweeps/britz_copy.py:20'
    )
  module = cli_flags.load_python_file(
      path,
      f'sweep file {path}',
      'a .py file with get_sweep(arg) (see configs/sweeps/)',
      'nmt_jax_sweep_file',
  )
  get_sweep = getattr(module, 'get_sweep', None)
  if not callable(get_sweep):
    raise errors.ConfigError(
        f'sweep file {path} has no get_sweep(); define get_sweep(arg=None)'
        " returning a list of {'name', 'config', 'overrides'} (see"
        ' configs/sweeps/)'
    )
  here = os.path.dirname(path)
  runs = []
  given = f'the argument {arg!r}' if arg else 'no argument'
  try:
    entries = get_sweep(arg or None)
  except (ValueError, TypeError, KeyError) as e:
    raise errors.ConfigError(
        f'sweep file {path} does not run with {given}: {e}'
    ) from None
  except Exception as e:  # pylint: disable=broad-except
    raise errors.ConfigError(
        f'sweep file {path}: get_sweep({arg or ""}) failed with'
        f' {type(e).__name__}: {e}'
    ) from None
  if not isinstance(entries, (list, tuple)):
    raise errors.ConfigError(
        f'sweep file {path}: get_sweep() returned a {type(entries).__name__},'
        " not a list of {'name', 'config', 'overrides'}"
    )
  for number, entry in enumerate(entries, 1):
    _check_entry(path, number, entry)
    config_path, colon, preset = entry['config'].partition(':')
    config_path = os.path.relpath(
        os.path.normpath(os.path.join(here, config_path))
    )
    runs.append(
        Run(
            entry['name'],
            config_path + colon + preset,
            {**entry.get('overrides', {}), **common},
        )
    )
  names = [r.name for r in runs]
  if len(set(names)) != len(names):
    raise errors.ConfigError(
        f'sweep file {path} names two runs alike: {sorted(names)}'
    )
  return runs


def _check_entry(path: str, number: int, entry):
  """ConfigError unless the sweep file's run `number` is a well-formed run."""
  where = f'sweep file {path}, run {number}'
  if not isinstance(entry, dict):
    raise errors.ConfigError(
        f"{where} is a {type(entry).__name__}, not a dict with 'name',"
        " 'config' and 'overrides'"
    )
  for key in ('name', 'config'):
    if not isinstance(entry.get(key), str) or not entry[key]:
      raise errors.ConfigError(
          f"{where} needs '{key}', a non-empty string (it has"
          f' {entry.get(key)!r})'
      )
  if not isinstance(entry.get('overrides', {}), dict):
    raise errors.ConfigError(
        f"{where} ({entry['name']}): 'overrides' is a"
        f" {type(entry['overrides']).__name__}; give a dict of"
        " {'field.path': value}"
    )
  check_run_name(entry['name'], where)


def check_run_name(name: str, where: str):
  """ConfigError when a run's workdir would not lie inside --root."""
  parts = name.replace('\\', '/').split('/')
  if os.path.isabs(name) or any(p in ('', '.', '..') for p in parts):
    raise errors.ConfigError(
        f'{where}: run name {name!r} would put its workdir outside --root'
        " (or be --root itself); use relative names like 'global/seed1'"
        " without '..', '.', empty parts or a leading '/'"
    )


def select_runs(runs: Sequence[Run], patterns: Sequence[str]) -> List[Run]:
  """The runs whose names match one of the shell `patterns`.

  A pattern matching none is an error.
  """
  for pattern in patterns:
    if not any(fnmatch.fnmatchcase(run.name, pattern) for run in runs):
      raise errors.ConfigError(
          f'--only={pattern!r} matches no run; the runs are '
          f'{", ".join(run.name for run in runs[:6])}'
          f'{", ..." if len(runs) > 6 else ""}'
      )
  return [
      run
      for run in runs
      if any(fnmatch.fnmatchcase(run.name, p) for p in patterns)
  ]


def parse_shard(text: str):
  try:
    index, count = (int(x) for x in text.split('/'))
    if not 0 <= index < count:
      raise ValueError
  except ValueError:
    raise errors.ConfigError(
        f'--shard={text!r} must be i/n with 0 <= i < n, e.g. 0/2'
    ) from None
  return index, count


def shard(runs: Sequence[Run], text: str) -> List[Run]:
  """Shard i/n (`text`) of the runs: every n-th group from the i-th.

  A run fine-tuned from another of the sweep (train.init_from=
  '{root}/NAME') is in that run's group: a job array never starts it apart.
  """
  index, count = parse_shard(text)
  by_name = {run.name: run for run in runs}

  def group(run):
    name, seen = run.name, set()
    while (parent := _parent(by_name[name])) in by_name and name not in seen:
      seen.add(name)
      name = parent
    return name

  groups = list(dict.fromkeys(group(run) for run in runs))
  chosen = set(groups[index::count])
  return [run for run in runs if group(run) in chosen]


def _changed_fields(run: Run, workdir: str, root: str) -> List[str]:
  """The run's overrides whose values its workdir's config.json does not hold."""
  with open(os.path.join(workdir, workdir_files.CONFIG), encoding='utf-8') as f:
    stored = json.load(f)
  changed = []
  for field, value in run.overrides.items():
    node = stored
    for part in field.split('.'):
      node = node.get(part, KeyError) if isinstance(node, dict) else KeyError
    given = _format(value).replace('{root}', root)
    if node is KeyError or not _same_value(given, node):
      changed.append(field)
  return changed


def _same_value(given: str, stored) -> bool:
  """Whether the override text `given` means the config.json value `stored`."""
  if isinstance(stored, bool):
    return given.lower() == str(stored).lower()
  if isinstance(stored, (int, float)):
    try:
      return float(given) == float(stored)
    except ValueError:
      return False
  if isinstance(stored, list):
    stored = _format(tuple(stored))
  return given.replace(' ', '') == str(stored).replace(' ', '')


def _parent(run: Run):
  """The name of the run of the sweep this one is fine-tuned from, or None."""
  source = str(run.overrides.get('train.init_from', ''))
  return source[len('{root}/') :] if source.startswith('{root}/') else None


def training_finished(workdir: str) -> bool:
  """Trained to its end (train.num_steps, or stopped early), evaluated after.

  eval_results.json alone does not say so: --mode=eval writes it for any
  checkpoint of a run that may still be training.
  """
  directory = os.path.join(workdir, workdir_files.CHECKPOINTS)
  try:
    last = max(int(name) for name in os.listdir(directory) if name.isdigit())
    evaluated = os.path.getmtime(
        os.path.join(workdir, workdir_files.EVAL_RESULTS)
    )
    if evaluated < os.path.getmtime(os.path.join(directory, str(last))):
      return False
    train_config = run_config.load_config(workdir).train
  # No checkpoint, no results, or no readable config.json.
  except (OSError, ValueError, errors.CheckpointError):
    return False
  if last >= train_config.num_steps:
    return True
  # Stopped early: its validations up to `last` say so, as a resume replays.
  return plateau.resume(train_config, workdir, last, 1.0).stopped


class SweepInterrupted(Exception):
  """SIGINT or SIGTERM stopped the sweep and the run it was running."""

  def __init__(self, message: str, status: int):
    super().__init__(message)
    self.status = status


def _run_passing_signals(command: List[str], log):
  """(exit status, the signal that stopped it or 0) of a run.

  The run has a session of its own and gets the SIGINT or SIGTERM sent to the
  sweep, once (a terminal's Ctrl-C reaches the sweep only): it saves a
  checkpoint and stops, and the sweep stops after it. Without this a SIGTERM
  (docker stop, a cluster's preemption) killed the sweep and left the run
  training on, holding its workdir.
  """
  process = subprocess.Popen(
      command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
  )
  received = []

  def pass_on(signum, frame):
    del frame
    received.append(signum)
    with contextlib.suppress(ProcessLookupError):
      process.send_signal(signum)

  kept = {s: signal.signal(s, pass_on) for s in (signal.SIGINT, signal.SIGTERM)}
  try:
    code = process.wait()
  finally:
    for number, handler in kept.items():
      signal.signal(number, handler)
  return code, (received[0] if received else 0)


def run_sweep(
    runs: Sequence[Run], root: str, dry_run: bool = False, mode: str = 'train'
) -> List[str]:
  """Trains each run not finished before -> names of failed runs.

  With mode 'eval', evaluates each trained run instead. A run whose workdir
  another live process holds is skipped: sweep processes started a few
  seconds apart over the same runs (one per core) take them in turn.
  """
  failed = []
  for i, run in enumerate(progress_bars.bar(runs, desc='sweep', unit='run')):
    command = run.command(root, mode)
    if dry_run:
      print(' '.join(shlex.quote(a) for a in command))
      continue
    workdir = os.path.join(root, run.name)
    if locks.in_use_by_another(workdir):
      # Another sweep process (on another core or machine) runs it: several
      # processes over one sweep share its runs out as a queue.
      logging.info(
          '[%d/%d] %s: another process is running it (its lock), skipped',
          i + 1,
          len(runs),
          run.name,
      )
      continue
    if mode == 'train' and training_finished(workdir):
      changed = _changed_fields(run, workdir, root)
      if not changed:
        logging.info(
            '[%d/%d] %s: done before, skipped', i + 1, len(runs), run.name
        )
        continue
      # Training decides: more steps resume, another model is refused.
      logging.info(
          '[%d/%d] %s: done before with other %s; running it again',
          i + 1,
          len(runs),
          run.name,
          ', '.join(changed),
      )
    parent = _parent(run)
    if mode == 'train' and parent:
      if locks.in_use_by_another(os.path.join(root, parent)):
        # The process training the parent goes on to this run.
        logging.info(
            '[%d/%d] %s: skipped: another process is training %s, which it'
            ' is fine-tuned from',
            i + 1,
            len(runs),
            run.name,
            parent,
        )
        continue
      if not training_finished(os.path.join(root, parent)):
        failed.append(run.name)
        logging.error(
            '[%d/%d] %s: not started: it is fine-tuned from %s, which has'
            ' not finished training',
            i + 1,
            len(runs),
            run.name,
            parent,
        )
        continue
    if mode == 'eval' and not os.path.exists(
        os.path.join(workdir, workdir_files.EVAL_RESULTS)
    ):
      logging.info(
          '[%d/%d] %s: not trained (and evaluated) yet, skipped',
          i + 1,
          len(runs),
          run.name,
      )
      continue
    log_path = os.path.join(
        root, 'logs', run.name + ('.log' if mode == 'train' else f'.{mode}.log')
    )
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    logging.info(
        '[%d/%d] %s: %s (log %s)',
        i + 1,
        len(runs),
        run.name,
        ' '.join(shlex.quote(a) for a in command[1:]),
        log_path,
    )
    start = time.time()
    with open(log_path, 'a', encoding='utf-8') as log:
      code, stopped_by = _run_passing_signals(command, log)
    if stopped_by:
      raise SweepInterrupted(
          f'{signal.Signals(stopped_by).name} during {run.name} (exit'
          f' {code}; its log {log_path}); run the same command again to go on',
          128 + stopped_by,
      )
    if code:
      failed.append(run.name)
      logging.error(
          '[%d/%d] %s failed (exit %d) after %.0f s; see %s',
          i + 1,
          len(runs),
          run.name,
          code,
          time.time() - start,
          log_path,
      )
    else:
      logging.info(
          '[%d/%d] %s finished in %.0f s',
          i + 1,
          len(runs),
          run.name,
          time.time() - start,
      )
  return failed


def write_plots(
    workdirs: Sequence[str], rows: Sequence[Dict], directory: str, root=None
) -> List[str]:
  """Writes plots of the workdirs to `directory` -> paths written.

  learning_curves.png; memory runs: bleu_vs_K.png and decode_s_vs_K.png (one
  line per L and position encoding, the other models as horizontal lines);
  runs with a tau sweep: tau_tradeoff.png (the other runs as points).
  """
  os.makedirs(directory, exist_ok=True)
  runs = [runs_lib.load_run(w) for w in workdirs]
  if root:
    for (
        run
    ) in (
        runs
    ):  # legends name runs by their path under the root ('L20/memory_k4')
      run.label = os.path.relpath(run.workdir, root)
  written = []

  def save(figure, name):
    path = os.path.join(directory, name)
    figure.savefig(path, dpi=110)
    written.append(path)

  save(plots.plot_learning_curves(runs), 'learning_curves.png')
  # the kinds with K memory slots
  memory = [r for r in rows if r['K'] is not None]
  if memory:  # the other models of the same lengths as horizontal lines
    lengths = {r['L'] for r in memory}
    others = [r for r in rows if r['K'] is None and r['L'] in lengths]
    for y in ('bleu', 'decode_s'):
      save(
          plots.plot_results(
              memory, 'K', y, ('L', 'PE'), logx=True, baselines=others
          ),
          f'{y}_vs_K.png',
      )
  swept = [r for r in runs if r.tau_sweep]
  if swept:
    references = [r for r in runs if not r.tau_sweep]
    save(plots.plot_tau_tradeoff(swept, references), 'tau_tradeoff.png')
    save(
        plots.plot_tau_tradeoff(swept, references, measure='computed'),
        'tau_tradeoff_computed.png',
    )
  return written
