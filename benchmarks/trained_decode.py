"""Decoding speed of a sweep's trained models, each against a reference run.

  taskset -c 0 python -m benchmarks.trained_decode --root=runs/gettext \\
      --reference=global_general --threads=1 --repeats=3 --json=decode.json

Every workdir under --root (or those --runs names) decodes the validation
split with its best checkpoint, greedy and with its config's beam, in rounds
that alternate it with the reference run: each round times both, so a
speedup (the reference's ms per sentence / this run's) is taken per round
and reported as the median and range over rounds, per wall second and per
CPU second. Trained models stop at their own end-of-sentence, so the figure
is what each model costs as trained, output lengths included. Each row also
carries the attention window (positions attended per target step) and the
positions computed.
"""

import datetime
import json
import os
import statistics
import sys
from typing import Any, Dict, List, Optional

from absl import app
from absl import flags
import jax
import tabulate

from benchmarks import decode_speed
from benchmarks import train_speed
from nmt_jax.analysis import runs as runs_lib
from nmt_jax.config import cli_flags
from nmt_jax.system import cpu_threads
from nmt_jax.system import errors
from nmt_jax.workdir import library_logs
from nmt_jax.workdir import run_config
from nmt_jax.workdir import writers

_ROOT = flags.DEFINE_string(
    'root', None, 'Folder holding the runs (workdirs with config.json).'
)
_REFERENCE = flags.DEFINE_string(
    'reference', 'global_general', 'The run every other is timed against.'
)
_RUNS = flags.DEFINE_list(
    'runs', None, 'Runs to time (default: every workdir under --root).'
)
_MODES = flags.DEFINE_list('modes', 'greedy,beam', 'greedy and/or beam.')
_REPEATS = flags.DEFINE_integer(
    'repeats', 3, 'Timed rounds per run.', lower_bound=1
)
_NUM_SENTENCES = flags.DEFINE_integer(
    'num_sentences', None, 'Sentences (default: all).', lower_bound=1
)
_THREADS = flags.DEFINE_integer(
    'threads', None, 'Cores to use (default: all this process may use).'
)
_JSON = flags.DEFINE_string('json', None, 'Write the results here.')


def _ratios(reference: List[float], this: List[float]) -> Dict[str, float]:
  """Per-round reference / this: median, min, max."""
  ratios = [r / t for r, t in zip(reference, this)]
  return {
      'median': statistics.median(ratios),
      'min': min(ratios),
      'max': max(ratios),
  }


def pair_figures(timed: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
  """Per label (greedy, beamK): this run's figures and its per-round speedups.

  `timed` is time_alternating's result for {'this', 'reference'}.
  """
  figures = {}
  for label, this in timed['this'].items():
    reference = timed['reference'].get(label)
    if not isinstance(this, dict) or not isinstance(reference, dict):
      continue
    figures[label] = {
        'ms_per_sentence': this['ms_per_sentence'],
        'reference_ms_per_sentence': reference['ms_per_sentence'],
        'speedup': _ratios(
            reference['ms_per_sentence_runs'], this['ms_per_sentence_runs']
        ),
        'speedup_per_cpu_s': _ratios(
            reference['cpu_ms_per_sentence_runs'],
            this['cpu_ms_per_sentence_runs'],
        ),
        'avg_window': this['avg_window'],
        'avg_window_fraction': this['avg_window_fraction'],
        'avg_computed': this['avg_computed'],
        'ms_per_sentence_runs': this['ms_per_sentence_runs'],
        'reference_ms_per_sentence_runs': reference['ms_per_sentence_runs'],
    }
  return figures


def _workdirs(root: str, names: Optional[List[str]]) -> Dict[str, str]:
  """{run name: workdir}: the runs under `root` (with a checkpoint)."""
  if not os.path.isdir(root):
    raise errors.ConfigError(
        f'--root={root} is not a directory; give the folder holding the runs'
    )
  found = {
      os.path.relpath(w, root): w
      for w in runs_lib.find_workdirs(root)
      if os.path.isdir(os.path.join(w, 'checkpoints'))
      and os.listdir(os.path.join(w, 'checkpoints'))
  }
  if names is None:
    return found
  missing = [n for n in names if n not in found]
  if missing:
    raise errors.ConfigError(
        f'--runs: {", ".join(missing)} has no trained workdir under {root};'
        f' runs with checkpoints there: {", ".join(sorted(found)) or "none"}'
    )
  return {n: found[n] for n in names}


def bench(
    root: str,
    reference: str,
    names: Optional[List[str]],
    modes: List[str],
    repeats: int,
    num_sentences: Optional[int],
) -> Dict[str, Any]:
  """Times every run against `reference`; returns the JSON's 'runs' part."""
  workdirs = _workdirs(root, names)
  if reference not in workdirs:
    workdirs.update(_workdirs(root, [reference]))

  def decode_bench(name):
    config = run_config.load_config(workdirs[name])
    return decode_speed.DecodeBench(config, workdirs[name], num_sentences)

  reference_bench = decode_bench(reference)
  results = {}
  for name in sorted(workdirs):
    if name == reference:
      continue
    timed = decode_speed.time_alternating(
        {'this': decode_bench(name), 'reference': reference_bench},
        modes,
        repeats,
    )
    results[name] = pair_figures(timed)
    print(
        f'{name}: '
        + ', '.join(
            f'{label} x{f["speedup"]["median"]:.2f}'
            for label, f in results[name].items()
        ),
        flush=True,
    )
  return results


def table(runs: Dict[str, Any]) -> str:
  rows = []
  for name, labels in runs.items():
    for label, f in labels.items():
      s, c = f['speedup'], f['speedup_per_cpu_s']
      rows.append([
          name,
          label,
          f'{f["ms_per_sentence"]:.2f}',
          f'{f["reference_ms_per_sentence"]:.2f}',
          f'x{s["median"]:.2f} [{s["min"]:.2f}-{s["max"]:.2f}]',
          f'x{c["median"]:.2f} [{c["min"]:.2f}-{c["max"]:.2f}]',
          f'{f["avg_window"]:.1f}',
          f'{f["avg_computed"]:.1f}',
      ])
  return tabulate.tabulate(
      rows,
      headers=[
          'run',
          'search',
          'ms/sent',
          'reference ms',
          'speedup (wall)',
          'per CPU s',
          'window',
          'computed',
      ],
      tablefmt='github',
  )


def main(argv):
  library_logs.install()
  if len(argv) > 1:
    cli_flags.fail(f'trained_decode takes no argument {argv[1]!r}')
  if not _ROOT.value:
    cli_flags.fail("trained_decode needs --root=DIR (the sweep's runs)")
  if not set(_MODES.value) <= {'greedy', 'beam'} or not _MODES.value:
    cli_flags.fail('--modes takes greedy and/or beam, comma-separated')
  try:
    if _JSON.value:
      writers.check_writable(_JSON.value, 'json')
    cpu_threads.pin_threads(_THREADS.value)  # before JAX starts its backend
    runs = bench(
        _ROOT.value,
        _REFERENCE.value,
        _RUNS.value,
        _MODES.value,
        _REPEATS.value,
        _NUM_SENTENCES.value,
    )
  except errors.UserError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
  print(table(runs))
  if _JSON.value:
    result = {
        'benchmark': 'trained_decode',
        'root': _ROOT.value,
        'reference': _REFERENCE.value,
        'repeats': _REPEATS.value,
        'threads': _THREADS.value or len(os.sched_getaffinity(0)),
        'platform': jax.default_backend(),
        'cpu': train_speed.cpu_name(),
        'jax': jax.__version__,
        'date': datetime.date.today().isoformat(),
        'runs': runs,
    }
    writers.write_text(_JSON.value, json.dumps(result, indent=2) + '\n')


if __name__ == '__main__':
  app.run(main, flags_parser=cli_flags.parse_flags)
