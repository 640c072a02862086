"""Sweeps: run a grid of experiments, aggregate workdirs into tables, sweep flexible's tau.

  # A product grid over one config (runs one after another on this machine):
  python -m nmt_jax.sweep run --config=configs/memory_k64.py --root=runs/k \
      --grid=model.attention.num_memory=1,4,16 --grid=model.attention.position_encoding=none,renorm

  # A sweep file (configs/sweeps/*.py: get_sweep(arg) -> runs); --dry_run prints one
  # command per run instead, for a cluster's job array; --shard=i/n runs every n-th;
  # --only=PATTERN,... keeps the runs whose names match (shell patterns).
  python -m nmt_jax.sweep run --sweep=configs/sweeps/britz_copy.py:20 --root=runs/britz

  # Workdirs (or every workdir under a root) -> CSV and markdown table; --pivot=L adds
  # one row per model with BLEU and decoding time under each L (Britz et al.'s Table 1).
  python -m nmt_jax.sweep aggregate --root=runs/britz --csv=runs/britz/results.csv \
      --markdown=runs/britz/results.md --pivot=L

  # Flexible attention: evaluate one trained model at several tau (writes <workdir>/tau_sweep.json).
  python -m nmt_jax.sweep tau --config=configs/flexible.py:chunk --workdir=runs/flexible

Runs whose workdir already has eval_results.json are skipped, so re-running a sweep
resumes it (an interrupted run resumes from its last checkpoint).
"""

import dataclasses
import fnmatch
import importlib.util
import itertools
import math
import os
import shlex
import subprocess
import sys
import time
from typing import Dict, List, Sequence

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from nmt_jax import errors
from nmt_jax import inspect as nmt_inspect
from nmt_jax import writers

COMMANDS = ('run', 'aggregate', 'tau')
SHU_TAUS = (0.3, 0.5, 0.8, 1.0, 1.2, 1.4, 1.6, 5.0, 8.0, math.inf)

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'run: the config of a --grid sweep; tau: the config of the trained workdir.',
    lock_config=True)
_SWEEP = flags.DEFINE_string('sweep', None, 'run: a sweep file (get_sweep(arg)), path[:arg].')
_GRID = flags.DEFINE_multi_string(
    'grid', [], 'run: field=v1,v2,... (repeat the flag for a product over several fields).')
_SET = flags.DEFINE_multi_string('set', [], 'run: field=value applied to every run of the sweep.')
_ROOT = flags.DEFINE_string('root', None, 'run: parent of the runs\' workdirs; aggregate: '
                            'every workdir below it.')
_ONLY = flags.DEFINE_list('only', None, 'run: only the runs whose names match one of these '
                         'shell patterns (e.g. --only=L100/no_attention,L100/memory_k64*).')
_DRY_RUN = flags.DEFINE_bool('dry_run', False, 'run: print the commands instead of running them.')
_SHARD = flags.DEFINE_string('shard', '0/1', 'run: i/n runs runs i, i+n, i+2n, ...')
_MODE = flags.DEFINE_enum('mode', 'train', ['train', 'eval'], 'run: train (skips evaluated runs) '
                          'or eval (evaluates every trained run again, e.g. to time decoding on '
                          'a quiet machine; skips untrained ones).')
_WORKDIRS = flags.DEFINE_list('workdirs', None, 'aggregate: workdirs (else --root); tau: -')
_WORKDIR = flags.DEFINE_string('workdir', None, 'tau: the trained workdir.')
_CSV = flags.DEFINE_string('csv', None, 'aggregate: write the table as CSV here.')
_MARKDOWN = flags.DEFINE_string('markdown', None, 'aggregate: write a markdown table here.')
_PIVOT = flags.DEFINE_string('pivot', None, 'aggregate: also a table with one row per model and '
                             'the --pivot_values under each value of this column (e.g. L: the '
                             'layout of Britz et al.\'s Table 1).')
_PIVOT_VALUES = flags.DEFINE_list('pivot_values', ['bleu', 'decode_s'], 'aggregate: the columns '
                                  'shown under each value of --pivot.')
_PLOTS = flags.DEFINE_string('plots', None, 'aggregate: write the standard plots (PNG) into '
                             'this directory (see write_plots).')
_TAUS = flags.DEFINE_list('taus', [str(t) for t in SHU_TAUS], 'tau: thresholds (inf = no pruning).')
_BEAM = flags.DEFINE_integer('beam_size', 1, 'tau: beam size of the decoding at each tau.')


@dataclasses.dataclass
class Run:
  name: str
  config: str                        # path[:preset]
  overrides: Dict[str, object]

  def command(self, root: str, mode: str = 'train') -> List[str]:
    args = [sys.executable, '-m', 'nmt_jax.main', f'--config={self.config}',
            f'--workdir={os.path.join(root, self.name)}'] + (
                [] if mode == 'train' else [f'--mode={mode}'])
    return args + [f'--config.{k}={_format(v).replace("{root}", root)}'
                   for k, v in self.overrides.items()]


def _format(value) -> str:
  if isinstance(value, float) and math.isinf(value):
    return 'inf'
  if isinstance(value, (tuple, list)):
    return '(' + ','.join(_format(v) for v in value) + (',)' if len(value) == 1 else ')')
  return str(value)


def _parse_assignment(text: str, flag: str):
  field, sep, value = text.partition('=')
  if not sep or not field or not value:
    raise errors.ConfigError(f'--{flag}={text!r} is not field=value(s); e.g. '
                             f'--{flag}=model.attention.num_memory=1,4,16')
  return field, value


def grid_runs(config: str, grid: Sequence[str], common: Dict[str, object]) -> List[Run]:
  """The product of `grid` ('field=v1,v2') over one config; names say the values."""
  axes = []
  for text in grid:
    field, values = _parse_assignment(text, 'grid')
    axes.append([(field, v) for v in values.split(',')])
  runs = []
  for combo in itertools.product(*axes):
    name = '+'.join(f'{field.split(".")[-1]}={value}' for field, value in combo) or 'run'
    runs.append(Run(name, config, {**common, **dict(combo)}))
  return runs


def load_sweep(spec: str, common: Dict[str, object]) -> List[Run]:
  """Runs of a sweep file `path[:arg]`: get_sweep(arg) -> [{'name', 'config', 'overrides'}].

  A relative config path in the file is relative to the sweep file.
  """
  path, _, arg = spec.partition(':')
  if not os.path.isfile(path):
    raise errors.ConfigError(f'sweep file {path} does not exist; e.g. '
                             '--sweep=configs/sweeps/britz_copy.py:20')
  module_spec = importlib.util.spec_from_file_location('nmt_jax_sweep_file', path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  here = os.path.dirname(path)
  runs = []
  for entry in module.get_sweep(arg or None):
    config_path, colon, preset = entry['config'].partition(':')
    config_path = os.path.relpath(os.path.normpath(os.path.join(here, config_path)))
    runs.append(Run(entry['name'], config_path + colon + preset,
                    {**entry.get('overrides', {}), **common}))
  names = [r.name for r in runs]
  if len(set(names)) != len(names):
    raise errors.ConfigError(f'sweep file {path} names two runs alike: {sorted(names)}')
  return runs


def select_runs(runs: Sequence[Run], patterns: Sequence[str]) -> List[Run]:
  """The runs whose names match one of the shell `patterns`; a pattern matching none is an error."""
  for pattern in patterns:
    if not any(fnmatch.fnmatchcase(run.name, pattern) for run in runs):
      raise errors.ConfigError(f'--only={pattern!r} matches no run; the runs are '
                               f'{", ".join(run.name for run in runs[:6])}'
                               f'{", ..." if len(runs) > 6 else ""}')
  return [run for run in runs if any(fnmatch.fnmatchcase(run.name, p) for p in patterns)]


def parse_shard(text: str):
  try:
    index, count = (int(x) for x in text.split('/'))
    if not 0 <= index < count:
      raise ValueError
  except ValueError:
    raise errors.ConfigError(f'--shard={text!r} must be i/n with 0 <= i < n, e.g. 0/2') from None
  return index, count


def run_sweep(runs: Sequence[Run], root: str, dry_run: bool = False,
              mode: str = 'train') -> List[str]:
  """Trains each run unless its workdir is evaluated (mode 'eval': evaluates each trained run);
  -> names of failed runs."""
  failed = []
  for i, run in enumerate(runs):
    command = run.command(root, mode)
    if dry_run:
      print(' '.join(shlex.quote(a) for a in command))
      continue
    workdir = os.path.join(root, run.name)
    if mode == 'train' and os.path.exists(os.path.join(workdir, 'eval_results.json')):
      logging.info('[%d/%d] %s: done before, skipped', i + 1, len(runs), run.name)
      continue
    if mode == 'eval' and not os.path.exists(os.path.join(workdir, 'eval_results.json')):
      logging.info('[%d/%d] %s: not trained (and evaluated) yet, skipped', i + 1, len(runs),
                   run.name)
      continue
    log_path = os.path.join(root, 'logs', run.name + ('.log' if mode == 'train' else f'.{mode}.log'))
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    logging.info('[%d/%d] %s: %s (log %s)', i + 1, len(runs), run.name,
                 ' '.join(shlex.quote(a) for a in command[1:]), log_path)
    start = time.time()
    with open(log_path, 'a', encoding='utf-8') as log:
      code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
    if code:
      failed.append(run.name)
      logging.error('[%d/%d] %s failed (exit %d) after %.0f s; see %s', i + 1, len(runs),
                    run.name, code, time.time() - start, log_path)
    else:
      logging.info('[%d/%d] %s finished in %.0f s', i + 1, len(runs), run.name,
                   time.time() - start)
  return failed


def tau_sweep(config, workdir: str, taus: Sequence[float], beam_size: int) -> List[Dict]:
  """Evaluates the workdir's best checkpoint at each tau; writes <workdir>/tau_sweep.json.

  Rows of an earlier sweep of the same checkpoint are kept (a tau evaluated again is
  replaced), so a second call with other taus adds points to the curve.
  """
  from nmt_jax import train  # pylint: disable=g-import-not-at-top  (imports JAX)
  if config.model.attention.kind != 'flexible':
    raise errors.ConfigError(f'tau applies to flexible attention, the config has '
                             f'model.attention.kind={config.model.attention.kind!r}; give the '
                             'config the workdir was trained with (e.g. configs/flexible.py)')
  config, task, _, mesh, params, step = train.restore_for_inference(config, workdir)
  split = task.test_or_eval
  rows = []
  for tau in taus:
    tau_config = config.copy_and_resolve_references()
    tau_config.model.attention.tau = tau
    evaluator = train.Evaluator(tau_config, train.create_model(tau_config, task), task, mesh)
    result, _ = evaluator.evaluate(params, split, beam_size)
    row = {'tau': tau, 'checkpoint_step': step, 'beam_size': beam_size,
           'split': 'test' if task.test is not None else 'validation',
           **{k: result[k] for k in ('bleu', 'avg_window', 'avg_window_fraction',
                                     'decode_ms_per_sentence', 'num_sentences')}}
    rows.append(row)
    logging.info('tau %s: BLEU %.2f | avg window %.2f (%.1f%% of the source) | %.2f ms/sentence',
                 tau, row['bleu'], row['avg_window'], 100 * row['avg_window_fraction'],
                 row['decode_ms_per_sentence'])
  path = os.path.join(workdir, 'tau_sweep.json')
  earlier = nmt_inspect.load_run(workdir).tau_sweep or []
  taus = {float(row['tau']) for row in rows}
  rows += [row for row in earlier
           if row['checkpoint_step'] == step and float(row['tau']) not in taus]
  rows.sort(key=lambda row: float(row['tau']))
  writers.write_json(path, {'rows': rows})
  return rows


def write_plots(workdirs: Sequence[str], rows: Sequence[Dict], directory: str,
                root=None) -> List[str]:
  """learning_curves.png; memory runs: bleu_vs_K.png and decode_s_vs_K.png (one line per L
  and position encoding, the other models as horizontal lines);
  runs with a tau sweep: tau_tradeoff.png (the other runs as points). -> paths written."""
  os.makedirs(directory, exist_ok=True)
  runs = [nmt_inspect.load_run(w) for w in workdirs]
  if root:
    for run in runs:   # legends name runs by their path under the root ('L20/memory_k4')
      run.label = os.path.relpath(run.workdir, root)
  written = []

  def save(figure, name):
    path = os.path.join(directory, name)
    figure.savefig(path, dpi=110)
    written.append(path)

  save(nmt_inspect.plot_learning_curves(runs), 'learning_curves.png')
  memory = [r for r in rows if r['attention'] == 'memory']
  if memory:   # the other models of the same lengths as horizontal lines
    lengths = {r['L'] for r in memory}
    others = [r for r in rows if r['attention'] != 'memory' and r['L'] in lengths]
    for y in ('bleu', 'decode_s'):
      save(nmt_inspect.plot_results(memory, 'K', y, ('L', 'PE'), logx=True, baselines=others),
           f'{y}_vs_K.png')
  swept = [r for r in runs if r.tau_sweep]
  if swept:
    save(nmt_inspect.plot_tau_tradeoff(swept, [r for r in runs if not r.tau_sweep]),
         'tau_tradeoff.png')
  return written


def _common_overrides() -> Dict[str, object]:
  return dict(_parse_assignment(text, 'set') for text in _SET.value)


def main(argv):
  if len(argv) != 2 or argv[1] not in COMMANDS:
    raise app.UsageError(f'give one command: {" | ".join(COMMANDS)} (see the module docstring)')
  command = argv[1]
  try:
    if command == 'run':
      if not _ROOT.value:
        raise errors.ConfigError('run needs --root=DIR, the parent of the runs\' workdirs')
      if bool(_SWEEP.value) == bool(_CONFIG.value is not None and _GRID.value):
        raise errors.ConfigError('run needs either --sweep=FILE[:arg] or --config=FILE with '
                                 '--grid=field=v1,v2 (not both)')
      if _SWEEP.value:
        runs = load_sweep(_SWEEP.value, _common_overrides())
      else:
        flag = flags.FLAGS['config']
        config_arg = config_flags.get_config_filename(flag)
        overrides = {k: v for k, v in config_flags.get_override_values(flag).items()}
        runs = grid_runs(config_arg, _GRID.value, {**overrides, **_common_overrides()})
      if _ONLY.value:
        runs = select_runs(runs, _ONLY.value)
      index, count = parse_shard(_SHARD.value)
      runs = runs[index::count]
      failed = run_sweep(runs, _ROOT.value, _DRY_RUN.value, _MODE.value)
      if failed:
        print(f'error: {len(failed)} of {len(runs)} runs failed: {", ".join(failed)} '
              f'(logs in {_ROOT.value}/logs/; re-run the same command to retry them)',
              file=sys.stderr)
        sys.exit(1)
    elif command == 'aggregate':
      known = [c for c, _ in nmt_inspect.COLUMNS]
      for name in ([_PIVOT.value] + _PIVOT_VALUES.value) if _PIVOT.value else []:
        if name not in known:
          raise errors.ConfigError(f'--pivot/--pivot_values: {name!r} is not a column; use one '
                                   f'of {", ".join(known)}')
      workdirs = _WORKDIRS.value or (nmt_inspect.find_workdirs(_ROOT.value) if _ROOT.value else [])
      if not workdirs:
        raise errors.ConfigError('aggregate found no workdirs: give --workdirs=A,B or --root=DIR '
                                 'holding workdirs (directories with config.json)')
      rows = nmt_inspect.results_table(workdirs, root=_ROOT.value)
      if _CSV.value:
        nmt_inspect.write_csv(rows, _CSV.value)
      table = nmt_inspect.markdown_table(rows)
      if _PIVOT.value:
        try:
          table += '\n\n' + nmt_inspect.pivot_table(rows, _PIVOT.value, _PIVOT_VALUES.value)
        except ValueError as e:
          raise errors.ConfigError(str(e)) from None
      if _MARKDOWN.value:
        with open(_MARKDOWN.value, 'w', encoding='utf-8') as f:
          f.write(table + '\n')
      if _PLOTS.value:
        for path in write_plots(workdirs, rows, _PLOTS.value, _ROOT.value):
          logging.info('wrote %s', path)
      print(table)
    else:
      if _CONFIG.value is None or not _WORKDIR.value:
        raise errors.ConfigError('tau needs --config=FILE (as trained) and --workdir=DIR')
      try:
        taus = [float(t) for t in _TAUS.value]
      except ValueError:
        raise errors.ConfigError(f'--taus={",".join(_TAUS.value)} must be numbers '
                                 '(inf = no pruning)') from None
      tau_sweep(_CONFIG.value, _WORKDIR.value, taus, _BEAM.value)
  except errors.UserError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)


if __name__ == '__main__':
  app.run(main)
