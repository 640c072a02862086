"""--threads: the process's cores, and so XLA:CPU's thread pool."""

import os
import subprocess
import sys

import pytest

from tests import conftest
from tests.commands import nmt

CORES = sorted(os.sched_getaffinity(0))


@pytest.mark.skipif(len(CORES) < 2, reason='needs two cores to leave one')
def test_one_thread_keeps_the_process_and_xla_to_one_core():
  code = (
      'import os; from nmt_jax.system import cpu_threads;'
      ' cpu_threads.pin_threads(1); import jax;'
      ' jax.numpy.ones(3).block_until_ready();'
      ' print(sorted(os.sched_getaffinity(0)), os.environ["XLA_FLAGS"])'
  )
  out = subprocess.run(
      [sys.executable, '-c', code],
      cwd=conftest.ROOT,
      env=conftest.subprocess_env(),
      capture_output=True,
      text=True,
      check=True,
  ).stdout
  assert out.startswith(f'[{CORES[0]}] ')
  assert '--xla_cpu_multi_thread_eigen=false' in out


def test_more_threads_than_cores_is_one_line_and_no_workdir(tmp_path):
  workdir = tmp_path / 'w'
  result = nmt(
      '--config=configs/global_general.py:tiny',
      f'--workdir={workdir}',
      f'--threads={len(CORES) + 1}',
      check=False,
  )
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == (
      f'error: --threads={len(CORES) + 1} but this process may use'
      f' {len(CORES)} cores; give --threads={len(CORES)} or fewer'
  )
  assert not workdir.exists()
