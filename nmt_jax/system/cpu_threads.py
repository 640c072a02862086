"""Keeps a process, and XLA:CPU's thread pool, to a number of cores."""

import os
from typing import Optional

from nmt_jax.system import errors


def pin_threads(threads: Optional[int]):
  """Restricts this process to the first `threads` cores it may use.

  XLA:CPU sizes its thread pool from the affinity mask, so this is its
  thread count. Call before JAX starts its backend (the first device use).
  Two runs on one machine land on the same cores: place them with
  `taskset -c` instead (the mask this starts from).
  """
  if not threads:
    return
  cores = sorted(os.sched_getaffinity(0))
  if threads > len(cores):
    raise errors.ConfigError(
        f'--threads={threads} but this process may use {len(cores)} cores;'
        f' give --threads={len(cores)} or fewer'
    )
  os.sched_setaffinity(0, set(cores[:threads]))
  if threads == 1:
    # One thread runs Eigen's matrix products inline, not through the pool.
    flags = os.environ.get('XLA_FLAGS', '')
    os.environ['XLA_FLAGS'] = (
        flags + ' --xla_cpu_multi_thread_eigen=false'
    ).strip()
