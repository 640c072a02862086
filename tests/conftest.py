"""Test setup: fast compiles and a shared persistent compilation cache.

Subprocess tests (test_cli.py) get the same settings through `subprocess_env`.
"""

import os
import subprocess
import sys
import tempfile

import jax
import pytest

from tests import forked_commands

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
# Every program stored, however quickly it compiled: a test's commands and
# the other worker compile many of the same tiny programs, most of them in
# less than JAX's default threshold of a second.
jax.config.update('jax_compilation_cache_dir', CACHE_DIR)
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)


def subprocess_env():
  env = dict(os.environ)
  env.update({
      'JAX_DISABLE_MOST_OPTIMIZATIONS': '1',
      'JAX_COMPILATION_CACHE_DIR': CACHE_DIR,
      'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '0',
      'JAX_PLATFORMS': 'cpu',
      'PYTHONUNBUFFERED': '1',
  })
  return env


def run_module(
    module,
    *args,
    check=True,
    input_text=None,
    timeout=600,
    env=None,
    fork=True,
):
  """`python -m module args` from the repository root, as a user runs it.

  With `check`, a non-zero exit is an AssertionError showing its stderr.
  `env` defaults to `subprocess_env()`; under that environment (other
  XLA_FLAGS allowed) the command runs as a fork of a process that imported
  the package once (tests/forked_commands.py), under another (or with
  `fork=False`) as a process of its own, as every command does with
  NMT_JAX_TEST_PROCESSES=1 (to tell a difference the fork makes).
  """
  return _run_python(
      ['-m', module], args, check, input_text, timeout, env, fork
  )


def run_code(code, *args, check=True, timeout=600, env=None):
  """`python -c code args` from the repository root, as run_module runs."""
  return _run_python(['-c', code], args, check, None, timeout, env, True)


def _run_python(command, args, check, input_text, timeout, env, fork):
  env = subprocess_env() if env is None else env
  fork = fork and not os.environ.get('NMT_JAX_TEST_PROCESSES')
  if fork and forked_commands.forkable(env, subprocess_env()):
    module, code = (
        (command[1], None) if command[0] == '-m' else (None, command[1])
    )
    result = forked_commands.server(ROOT, subprocess_env()).run(
        module, args, input_text=input_text, timeout=timeout, env=env, code=code
    )
  else:
    result = subprocess.run(
        [sys.executable, *command, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        input=input_text,
        timeout=timeout,
    )
  if check and result.returncode != 0:
    raise AssertionError(f'exit {result.returncode}\n{result.stderr[-3000:]}')
  return result


def run_module_lines(module, cases, timeout=600):
  """`python -m module ARGS` for each ARGS in `cases`: [CompletedProcess]."""
  return [
      run_module(module, *args, check=False, timeout=timeout) for args in cases
  ]


@pytest.fixture
def env():
  return subprocess_env()


def pytest_collection_modifyitems(items):
  """The files marked slow as a whole come first.

  The two workers take whole files (--dist loadfile); a long file taken
  last would leave one worker idle while the other finishes it.
  """

  def slow_file(item):
    marks = getattr(getattr(item, 'module', None), 'pytestmark', [])
    marks = marks if isinstance(marks, list) else [marks]
    return any(mark.name == 'slow' for mark in marks)

  items.sort(key=lambda item: not slow_file(item))
