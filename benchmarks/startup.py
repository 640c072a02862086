"""Time to the first training step and the first translation, cold and warm.

`bench startup` runs the command lines a user runs, each in a new process,
first with an empty persistent compilation cache (cold), then again with
the cache the cold run filled (warm):

  train       `--mode=train` in a new workdir for `steps` steps, logging
              every step: seconds to the first step's log line and to the
              last one (by then every length bucket it met is compiled),
              and to the end of the process (validation and the final
              evaluation included);
  translate   `--mode=translate` of one sentence from the cold training
              run's workdir (a cache of its own): seconds to the first
              translated line on stdout, and to the end of the process.

Each process is timed from its start (Python and JAX imports included) by
the wall clock, with its CPU time from the operating system; `imports_s` is
the floor, `python -c 'import nmt_jax.main'` (imports, nothing compiled).
The cache files a warm run adds are counted: 0 means it compiled nothing it
could store.
"""

import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

from nmt_jax import data
from nmt_jax.system import compile_cache
from nmt_jax.system import errors

# The progress line nmt_jax/train.py logs after a step ('step 3/20 | loss ...').
_STEP_LINE = re.compile(r'\] step (\d+)/\d+ \|')


def _cpu_seconds_of_children() -> float:
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def _timed_process(
    command: Sequence[str],
    env: Dict[str, str],
    log_path: str,
    watch: str,
    matches,
    stdin_text: str = '',
) -> Dict[str, float]:
  """Runs `command`; seconds from its start to each mark, its end, CPU s.

  `watch` ('stdout' or 'stderr') is read line by line as it comes;
  `matches(line)` names the marks a line reaches (the first time counts).
  Everything the process writes is kept in `log_path`.
  """
  cpu_before = _cpu_seconds_of_children()
  start = time.perf_counter()
  marks = {}
  with open(log_path, 'w') as log:
    other = {'stderr' if watch == 'stdout' else 'stdout': log}
    process = subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.PIPE,
        text=True,
        **{watch: subprocess.PIPE},
        **other,
    )
    process.stdin.write(stdin_text)
    process.stdin.close()
    for line in getattr(process, watch):
      seconds = time.perf_counter() - start
      log.write(line)
      for mark in matches(line):
        marks.setdefault(mark, seconds)
    code = process.wait()
  marks['total_s'] = time.perf_counter() - start
  marks['cpu_s'] = _cpu_seconds_of_children() - cpu_before
  if code != 0:
    with open(log_path) as f:
      lines = [line.strip() for line in f if line.strip()]
    said = next(
        (line for line in reversed(lines) if line.startswith('error:')),
        lines[-1] if lines else 'no output',
    )
    raise errors.UserError(
        f'{os.path.basename(log_path)[:-4]} run failed (exit {code}): {said}'
        f' (its output is in {log_path})'
    )
  return marks


def first_source(config) -> str:
  """The first validation source of generated data (the copy tasks)."""
  if config.data.name not in data.embedded.NAMES:
    raise errors.ConfigError(
        f'data.name={config.data.name}: give --sentence=..., a source sentence'
        ' in its vocabulary, to translate'
    )
  return data.load_task(config.data, config.seed).eval.source_text[0]


def _files(directory: str) -> int:
  return sum(len(names) for _, _, names in os.walk(directory))


def _one_repeat(
    config_args: List[str], sentence: str, steps: int, folder: str
) -> Dict[str, Dict[str, float]]:
  """Cold and warm figures of one repetition, each in a new cache."""
  main = [sys.executable, '-m', 'nmt_jax.main', *config_args]
  env = {
      k: v for k, v in os.environ.items() if k != 'JAX_COMPILATION_CACHE_DIR'
  }
  env['PYTHONUNBUFFERED'] = '1'  # lines arrive when they are written

  def train_marks(line):
    match = _STEP_LINE.search(line)
    if not match:
      return []
    step = int(match.group(1))
    return ['first_step_s'] * (step == 1) + ['last_step_s'] * (step == steps)

  train_args = [
      f'--config.train.num_steps={steps}',
      '--config.train.log_every=1',
      f'--config.train.checkpoint_every={steps}',
  ]
  figures = {'cold': {}, 'warm': {}}
  # The floor: Python and the imports of `nmt_jax.main`, nothing compiled.
  for phase in figures:
    figures[phase]['imports_s'] = _timed_process(
        [sys.executable, '-c', 'import nmt_jax.main'],
        env,
        os.path.join(folder, f'imports_{phase}.log'),
        'stdout',
        lambda line: [],
    )['total_s']
  for command, watch, matches, stdin_text in (
      ('train', 'stderr', train_marks, ''),
      ('translate', 'stdout', lambda line: ['first_line_s'], sentence + '\n'),
  ):
    cache = os.path.join(folder, f'cache_{command}')
    env[compile_cache.ENV] = cache
    for phase in ('cold', 'warm'):
      workdir = os.path.join(
          folder, f'run_{phase}' if command == 'train' else 'run_cold'
      )
      args = [f'--workdir={workdir}', f'--mode={command}']
      if command == 'train':
        args += train_args
      before = _files(cache) if os.path.isdir(cache) else 0
      marks = _timed_process(
          main + args,
          env,
          os.path.join(folder, f'{command}_{phase}.log'),
          watch,
          matches,
          stdin_text,
      )
      marks['cache_files_added'] = _files(cache) - before
      figures[phase].update({f'{command}_{k}': v for k, v in marks.items()})
  return figures


def bench_startup(
    config_args: List[str],
    sentence: str,
    steps: int,
    repeats: int,
    keep: Optional[str] = None,
) -> Dict[str, Any]:
  """Medians over `repeats` cold/warm pairs of the processes' timings.

  `config_args`: the --config flags of `python -m nmt_jax.main`; `sentence`:
  the source to translate. With `keep`, the workdirs, caches and logs stay
  there instead of in a temporary directory (which a failed run keeps too,
  for its logs).
  """
  if steps < 1:
    raise errors.ConfigError(f'--steps={steps}: give at least 1 step')
  root = keep or tempfile.mkdtemp(prefix='nmt_jax_startup_')
  runs = []
  for r in range(repeats):
    folder = os.path.join(root, f'r{r + 1}')
    if os.path.exists(folder):
      raise errors.ConfigError(
          f'{folder} exists; give --startup_dir a new or empty directory'
      )
    os.makedirs(folder)
    runs.append(_one_repeat(config_args, sentence, steps, folder))
  if keep is None:
    shutil.rmtree(root, ignore_errors=True)
  result = {'steps': steps, 'repeats': repeats}
  for phase in ('cold', 'warm'):
    keys = runs[0][phase]
    result[phase] = {
        k: statistics.median(run[phase][k] for run in runs) for k in keys
    }
    result[phase + '_runs'] = [run[phase] for run in runs]
  return result
