"""Compile once per argument shape, then time steady-state execution.

Decoding and the benchmarks time jitted functions over batches of a few
fixed shapes (length buckets). Compiling each shape ahead of time keeps
compilation out of the timed figures; a first, untimed execution of each
shape also keeps out one-time costs (buffer allocation, thread start-up:
~15-20% of a 1,000-sentence CPU decoding pass).
"""

import time
from typing import Any, Callable, Dict, Hashable, Iterable, Tuple

import jax


def shape_key(args) -> Hashable:
  """The shapes and dtypes of every array in `args` (a pytree)."""
  return tuple(
      (getattr(x, 'shape', None), str(getattr(x, 'dtype', type(x))))
      for x in jax.tree_util.tree_leaves(args)
  )


class ByShape:
  """Executables compiled per argument shape, called like the function."""

  def __init__(self):
    self.executables: Dict[Hashable, Any] = {}

  def __call__(self, *args):
    return self.executables[shape_key(args)](*args)


def compile_by_shape(
    jitted, calls: Iterable[Tuple], warm: bool = True
) -> Tuple[ByShape, float]:
  """Compiles `jitted` once for each distinct argument shape among `calls`.

  Returns (a function running the executable compiled for its arguments'
  shapes, seconds spent compiling). With `warm`, each executable also runs
  once on its first arguments (counted in the seconds); leave it off when the
  function donates its arguments.
  """
  start = time.perf_counter()
  run = ByShape()
  for args in calls:
    key = shape_key(args)
    if key not in run.executables:
      run.executables[key] = jitted.lower(*args).compile()
      if warm:
        jax.block_until_ready(run.executables[key](*args))
  return run, time.perf_counter() - start


def timed(run: Callable[[], Any]) -> Tuple[Any, float]:
  """(run()'s result, once ready on the host or device, wall seconds)."""
  result, seconds, _ = timed_with_cpu(run)
  return result, seconds


def timed_with_cpu(run: Callable[[], Any]) -> Tuple[Any, float, float]:
  """(run()'s result, wall seconds, CPU seconds of this process).

  The CPU seconds add up every thread (XLA's pool included): on a shared
  machine they move less than wall time when other work takes the cores.
  """
  start, cpu_start = time.perf_counter(), time.process_time()
  result = jax.block_until_ready(run())
  return result, time.perf_counter() - start, time.process_time() - cpu_start
