"""Test setup: fast compiles and a shared persistent compilation cache.

Subprocess tests (test_cli.py) get the same settings through `subprocess_env`.
"""

import json
import os
import subprocess
import sys
import tempfile

import jax
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE_DIR = os.path.join(tempfile.gettempdir(), 'nmt_jax_test_xla_cache')

# XLA's older CPU fusion code generator: a third less compile time for the
# tiny test models (21 -> 14 CPU-seconds for a tiny training run with a cold
# cache). Set before JAX starts its CPU backend; subprocesses inherit it.
os.environ['XLA_FLAGS'] = ' '.join(
    [os.environ.get('XLA_FLAGS', ''), '--xla_cpu_use_fusion_emitters=false']
).strip()
# Halves compile times of the tiny test models (5.7 s -> 2.4 s for a small LSTM
# step); numerics stay deterministic.
jax.config.update('jax_disable_most_optimizations', True)
jax.config.update('jax_compilation_cache_dir', CACHE_DIR)
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.5)


def subprocess_env():
  env = dict(os.environ)
  env.update({
      'JAX_DISABLE_MOST_OPTIMIZATIONS': '1',
      'JAX_COMPILATION_CACHE_DIR': CACHE_DIR,
      'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '0.5',
      'JAX_PLATFORMS': 'cpu',
      'PYTHONUNBUFFERED': '1',
  })
  return env


def run_module(
    module, *args, check=True, input_text=None, timeout=600, env=None
):
  """`python -m module args` from the repository root, as a user runs it.

  With `check`, a non-zero exit is an AssertionError showing its stderr.
  `env` defaults to `subprocess_env()`.
  """
  result = subprocess.run(
      [sys.executable, '-m', module, *args],
      cwd=ROOT,
      env=env or subprocess_env(),
      capture_output=True,
      text=True,
      input=input_text,
      timeout=timeout,
  )
  if check and result.returncode != 0:
    raise AssertionError(f'exit {result.returncode}\n{result.stderr[-3000:]}')
  return result


# `python -m MODULE ARGS` for each ARGS, as run_module_lines describes.
_FORKING_DRIVER = """
import importlib, json, os, runpy, sys
module, preload, cases, out = sys.argv[1:]
for name in json.loads(preload):
  importlib.import_module(name)
for i, args in enumerate(json.loads(cases)):
  pid = os.fork()
  if pid:
    _, status = os.waitpid(pid, 0)
    with open(f'{out}/{i}.status', 'w') as f:
      f.write(str(os.waitstatus_to_exitcode(status)))
    continue
  for fd, name in ((0, os.devnull), (1, f'{out}/{i}.out'), (2, f'{out}/{i}.err')):
    os.dup2(os.open(name, os.O_RDWR | os.O_CREAT), fd)
  sys.argv = [module, *args]
  runpy.run_module(module, run_name='__main__', alter_sys=True)
  sys.exit(0)
"""


def run_module_lines(module, cases, preload=('nmt_jax.train',), timeout=600):
  """`python -m module ARGS` for each ARGS in `cases`: [CompletedProcess].

  For command lines that stop at their edge (a flag mistake, bad input): one
  process imports `preload` once (JAX, Flax and the package take about two
  seconds), then runs each command line in a forked child, with its own
  stdout and stderr, as the interpreter runs `python -m` (the module itself is
  imported afresh in each child, so its flags are defined there).
  """
  with tempfile.TemporaryDirectory() as out:
    driver = subprocess.run(
        [
            sys.executable,
            '-c',
            _FORKING_DRIVER,
            module,
            json.dumps(list(preload)),
            json.dumps([list(args) for args in cases]),
            out,
        ],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert driver.returncode == 0, driver.stderr[-3000:]
    read = lambda i, name: open(os.path.join(out, f'{i}.{name}')).read()
    return [
        subprocess.CompletedProcess(
            [module, *args],
            int(read(i, 'status')),
            read(i, 'out'),
            read(i, 'err'),
        )
        for i, args in enumerate(cases)
    ]


@pytest.fixture
def env():
  return subprocess_env()
