"""Sweeps: run a grid of experiments, aggregate workdirs, sweep flexible's tau.

  # A product grid over one config (runs one after another on this machine):
  python -m nmt_jax.sweep run --config=configs/memory_k64.py --root=runs/k \\
      --grid=model.attention.num_memory=1,4,16 \\
      --grid=model.attention.position_encoding=none,renorm

  # A sweep file (configs/sweeps/*.py: get_sweep(arg) -> runs); --dry_run
  # prints one command per run instead, for a cluster's job array;
  # --shard=i/n runs every n-th; --only=PATTERN,... keeps the runs whose names
  # match (shell patterns).
  python -m nmt_jax.sweep run --sweep=configs/sweeps/britz_copy.py:20 \\
      --root=runs/britz

  # Workdirs (or every workdir under a root) -> CSV and markdown table;
  # --pivot=L adds one row per model with BLEU and decoding time under each L
  # (Britz et al.'s Table 1); --by_length BLEU per source-length bin;
  # --paired_with=RUN each run against RUN by paired bootstrap resampling;
  # runs named NAME/seedN are grouped by NAME (mean ± sd over seeds), and
  # --paired_with=NAME compares the groups seed for seed, with an outcome.
  python -m nmt_jax.sweep aggregate --root=runs/britz \\
      --csv=runs/britz/results.csv --markdown=runs/britz/results.md --pivot=L

  # Flexible attention: evaluate one trained model at several tau (writes
  # <workdir>/tau_sweep.json; the config is the workdir's unless --config).
  python -m nmt_jax.sweep tau --workdir=runs/flexible --beam_size=5
  # ... with tau chosen on dev as Shu & Nakayama did, then scored on test
  python -m nmt_jax.sweep tau --workdir=runs/flexible --select_on_dev

Several `run` processes over one sweep (one per core, `taskset -c i`,
started a few seconds apart) share its runs out: each skips the runs another
live process holds (their workdir locks).

Runs that trained to their end and were evaluated are skipped, so re-running
a sweep resumes it (an interrupted run resumes from its last checkpoint); one
whose overrides changed since is run again (more steps train on). A
run fine-tuned from another (train.init_from='{root}/NAME') starts only once
that one has finished, and --shard keeps the two in one shard.
"""

import os
import signal
import sys
from typing import Dict

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from nmt_jax.analysis import runs as runs_lib
from nmt_jax.analysis import seeds
from nmt_jax.analysis import significance
from nmt_jax.analysis import sweep_runs
from nmt_jax.analysis import tau_sweep
from nmt_jax.config import cli_flags
from nmt_jax.system import compile_cache
from nmt_jax.system import errors
from nmt_jax.workdir import library_logs
from nmt_jax.workdir import run_config

_CONFIG = config_flags.DEFINE_config_file(
    'config',
    None,
    'run: the config of a --grid sweep; tau: the config of the trained'
    ' workdir (default: its config.json).',
    lock_config=True,
)
_SWEEP = flags.DEFINE_string(
    'sweep', None, 'run: a sweep file (get_sweep(arg)), path[:arg].'
)
_GRID = flags.DEFINE_multi_string(
    'grid',
    [],
    'run: field=v1,v2,... (repeat the flag for a product over several fields).',
)
_SET = flags.DEFINE_multi_string(
    'set', [], 'run: field=value applied to every run of the sweep.'
)
_ROOT = flags.DEFINE_string(
    'root',
    None,
    "run: parent of the runs' workdirs; aggregate: every workdir below it.",
)
_ONLY = flags.DEFINE_list(
    'only',
    None,
    'run: only the runs whose names match one of these '
    'shell patterns (e.g. --only=L100/no_attention,L100/memory_k64*).',
)
_DRY_RUN = flags.DEFINE_bool(
    'dry_run', False, 'run: print the commands instead of running them.'
)
_SHARD = flags.DEFINE_string(
    'shard', '0/1', 'run: i/n runs runs i, i+n, i+2n, ...'
)
_MODE = flags.DEFINE_enum(
    'mode',
    'train',
    ['train', 'eval'],
    'run: train (skips evaluated runs) '
    'or eval (evaluates every trained run again, e.g. to time decoding on '
    'a quiet machine; skips untrained ones).',
)
_WORKDIRS = flags.DEFINE_list(
    'workdirs', None, 'aggregate: workdirs (else --root); tau: -'
)
_WORKDIR = flags.DEFINE_string('workdir', None, 'tau: the trained workdir.')
_CSV = flags.DEFINE_string(
    'csv', None, 'aggregate: write the table as CSV here.'
)
_MARKDOWN = flags.DEFINE_string(
    'markdown', None, 'aggregate: write a markdown table here.'
)
_PIVOT = flags.DEFINE_string(
    'pivot',
    None,
    'aggregate: also a table with one row per model and '
    'the --pivot_values under each value of this column (e.g. L: the '
    "layout of Britz et al.'s Table 1).",
)
_PIVOT_VALUES = flags.DEFINE_list(
    'pivot_values',
    ['bleu', 'decode_s'],
    'aggregate: the columns shown under each value of --pivot.',
)
_PLOTS = flags.DEFINE_string(
    'plots',
    None,
    'aggregate: write the standard plots (PNG) into '
    'this directory (see write_plots).',
)
_BY_LENGTH = flags.DEFINE_bool(
    'by_length',
    False,
    'aggregate: also a table of BLEU per source-length bin (10 tokens) of'
    ' each evaluation.',
)
_PAIRED_WITH = flags.DEFINE_string(
    'paired_with',
    None,
    'aggregate: also test each evaluated run against this one (its name'
    ' under --root, or a workdir) by paired bootstrap resampling of test'
    ' BLEU; a group of seeds (runs NAME/seedN: give NAME) is compared to'
    ' every other group seed for seed (nmt_jax/analysis/seeds.py).',
)
_LEVEL_MARGIN = flags.DEFINE_float(
    'level_margin',
    seeds.LEVEL_MARGIN,
    'aggregate: a seed comparison is "level" when its 95% interval lies'
    ' within +-this many BLEU.',
)
_TAUS = flags.DEFINE_list(
    'taus',
    [str(t) for t in tau_sweep.SHU_TAUS],
    'tau: thresholds (inf = no pruning).',
)
_BEAM = flags.DEFINE_integer(
    'beam_size', 1, 'tau: beam size of the decoding at each tau.'
)
_SELECT_ON_DEV = flags.DEFINE_bool(
    'select_on_dev',
    False,
    "tau: Shu & Nakayama's protocol: every tau on the validation split, the"
    ' largest window reduction within 0.5 BLEU of tau = inf chosen, then'
    ' it and inf scored on test (tau_sweep.json: selections).',
)


def _common_overrides() -> Dict[str, object]:
  return dict(sweep_runs.parse_assignment(text, 'set') for text in _SET.value)


def run_runs():
  """`run`: a grid over one config, or a sweep file, run one after another."""
  if not _ROOT.value:
    raise errors.ConfigError(
        "run needs --root=DIR, the parent of the runs' workdirs"
    )
  if os.path.exists(_ROOT.value) and not os.path.isdir(_ROOT.value):
    raise errors.ConfigError(
        f'--root={_ROOT.value} is a file; give a folder for the runs'
        ' (it is made if it does not exist)'
    )
  given_config = _CONFIG.value is not None or bool(_GRID.value)
  if bool(_SWEEP.value) == bool(_CONFIG.value is not None and _GRID.value):
    raise errors.ConfigError(
        'run needs either --sweep=FILE[:arg] or --config=FILE with '
        '--grid=field=v1,v2 (not both)'
    )
  if _SWEEP.value and given_config:  # they would be dropped silently
    raise errors.ConfigError(
        '--sweep=FILE names its own configs and grid; drop --config and'
        ' --grid (override fields of every run with --set=field=value)'
    )
  if _SWEEP.value:
    runs = sweep_runs.load_sweep(_SWEEP.value, _common_overrides())
  else:
    flag = flags.FLAGS['config']
    overrides = dict(config_flags.get_override_values(flag))
    runs = sweep_runs.grid_runs(
        config_flags.get_config_filename(flag),
        _GRID.value,
        {**overrides, **_common_overrides()},
    )
  if _ONLY.value:
    runs = sweep_runs.select_runs(runs, _ONLY.value)
  runs = sweep_runs.shard(runs, _SHARD.value)
  sweep_runs.check_overrides(runs)
  failed = sweep_runs.run_sweep(runs, _ROOT.value, _DRY_RUN.value, _MODE.value)
  if failed:
    print(
        f'error: {len(failed)} of {len(runs)} runs failed:'
        f' {", ".join(failed)} (logs in {_ROOT.value}/logs/; re-run the'
        ' same command to retry them)',
        file=sys.stderr,
    )
    sys.exit(1)


def _check_writable(flag: str, path: str):
  """A table's output file can be written: checked before reading the runs."""
  try:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    open(path, 'a', encoding='utf-8').close()
  except OSError as e:
    raise errors.UserError(
        f'--{flag}={path} cannot be written ({e.strerror}); give a'
        ' writable file path'
    ) from None


def aggregate():
  """`aggregate`: workdirs -> a CSV and markdown table, a pivot, plots."""
  known = [c for c, _ in runs_lib.COLUMNS]
  pivot = [_PIVOT.value] + _PIVOT_VALUES.value if _PIVOT.value else []
  for name in pivot:
    if name not in known:
      raise errors.ConfigError(
          f'--pivot/--pivot_values: {name!r} is not a column; use one '
          f'of {", ".join(known)}'
      )
  if _ROOT.value and not os.path.isdir(_ROOT.value):
    raise errors.ConfigError(
        f'--root={_ROOT.value} is not a directory; give the folder that holds'
        ' the runs (their workdirs)'
    )
  workdirs = _WORKDIRS.value or (
      runs_lib.find_workdirs(_ROOT.value) if _ROOT.value else []
  )
  if not workdirs:
    raise errors.ConfigError(
        'aggregate found no workdirs: give --workdirs=A,B or --root=DIR '
        'holding workdirs (directories with config.json)'
    )
  for flag, path in (('csv', _CSV.value), ('markdown', _MARKDOWN.value)):
    if path:
      _check_writable(flag, path)
  try:
    rows = runs_lib.results_table(workdirs, root=_ROOT.value)
  except FileNotFoundError as e:  # a --workdirs entry that is none
    raise errors.UserError(str(e)) from None
  if _CSV.value:
    runs_lib.write_csv(rows, _CSV.value)
  table = runs_lib.markdown_table(rows)
  if _PIVOT.value:
    try:
      table += '\n\n' + runs_lib.pivot_table(
          rows, _PIVOT.value, _PIVOT_VALUES.value
      )
    except ValueError as e:
      raise errors.ConfigError(str(e)) from None
  if _BY_LENGTH.value:
    table += '\n\nBLEU by source length (tokens; sentences):\n\n'
    table += runs_lib.length_table(workdirs, _ROOT.value)
  reference = _PAIRED_WITH.value
  if reference and not seeds.is_group(reference, rows):
    table += '\n\n' + significance.table_against(
        workdirs, reference, _ROOT.value
    )
    reference = None
  seed_table = seeds.table(rows, workdirs, reference, _LEVEL_MARGIN.value)
  if seed_table:
    table += '\n\n' + seed_table
  if _MARKDOWN.value:
    with open(_MARKDOWN.value, 'w', encoding='utf-8') as f:
      f.write(table + '\n')
  if _PLOTS.value:
    for path in sweep_runs.write_plots(
        workdirs, rows, _PLOTS.value, _ROOT.value
    ):
      logging.info('wrote %s', path)
  print(table)


def tau():
  """`tau`: one trained flexible-attention model evaluated at several tau."""
  if not _WORKDIR.value:
    raise errors.ConfigError('tau needs --workdir=DIR (a trained run)')
  config = _CONFIG.value
  if config is None:  # the config the workdir was trained with
    try:
      config = run_config.load_config(_WORKDIR.value)
    except OSError:
      raise errors.ConfigError(
          f'--workdir={_WORKDIR.value} holds no config.json; give a trained'
          ' workdir, or --config=FILE as it was trained'
      ) from None
  try:
    taus = [float(t) for t in _TAUS.value]
  except ValueError:
    raise errors.ConfigError(
        f'--taus={",".join(_TAUS.value)} must be numbers (inf = no pruning)'
    ) from None
  if _SELECT_ON_DEV.value:
    tau_sweep.select_on_dev(config, _WORKDIR.value, taus, _BEAM.value)
  else:
    tau_sweep.tau_sweep(config, _WORKDIR.value, taus, _BEAM.value)


COMMANDS = {'run': run_runs, 'aggregate': aggregate, 'tau': tau}


def main(argv):
  library_logs.install()
  cli_flags.check_command(argv, COMMANDS, 'python -m nmt_jax.sweep')
  # As main: a shell script's `&` job starts with SIGINT ignored.
  signal.signal(signal.SIGINT, signal.default_int_handler)
  compile_cache.configure()  # tau sweeps decode in this process
  try:
    COMMANDS[argv[1]]()
  except errors.UserError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
  except sweep_runs.SweepInterrupted as e:
    print(f'error: stopped by {e}', file=sys.stderr)
    sys.exit(e.status)
  except KeyboardInterrupt:
    print('error: interrupted; run the same command again', file=sys.stderr)
    sys.exit(130)


if __name__ == '__main__':
  __doc__ += cli_flags.config_help()  # what --help prints
  app.run(main, flags_parser=cli_flags.parse_flags)
