"""Which malloc serves XLA:CPU's buffers, and glibc's setting that keeps them.

XLA:CPU allocates the buffers of every execution with malloc, on its worker
threads, and frees them when it ends. glibc serves allocations this large (a
training step's temporary buffers are hundreds of MB) with fresh pages from
the kernel and gives them back when they are freed, so every step
page-faults its whole working memory again and the kernel zeroes each page:
on the Britz copy model (L = 50, one core), 78,000 page faults per training
step, 19% of its time in the kernel.

Two cures (docs/options.md, "CPU memory allocator"):
- tcmalloc or jemalloc preloaded (`LD_PRELOAD`) keep freed memory for the
  next step; both also compile faster than glibc. `describe()` names them.
- `NMT_JAX_KEEP_FREED_MEMORY=1` sets glibc itself, when `nmt_jax` is
  imported, to put every thread on the main heap, grown with brk and never
  trimmed: no page faults after the first steps either, but compilation (many
  threads allocating) measured x1.14-1.35 slower, so it is not the default.
  The heap must be the main one: the same settings with per-thread arenas
  left as they are (XLA's worker threads allocate from their own) left the
  page faults as they were (benchmarks/runs/cpu/notes.md).
"""

import ctypes
import os

# mallopt parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8

_kept = False


def keep_freed_memory() -> bool:
  """Sets glibc's malloc to reuse freed memory; True if it did.

  Call before JAX starts its backend: threads that already have an arena of
  their own keep it. Does nothing (False) without glibc.
  """
  global _kept
  if _kept:
    return True
  try:
    libc = ctypes.CDLL(None)
    mallopt = libc.mallopt
    libc.gnu_get_libc_version  # glibc only  # noqa: B018
  except (OSError, AttributeError):
    return False
  mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
  _kept = all((
      mallopt(_M_ARENA_MAX, 1),  # every thread allocates from the main heap,
      mallopt(_M_MMAP_MAX, 0),  # which grows with brk, never with mmap,
      mallopt(_M_TRIM_THRESHOLD, 2**31 - 1),  # and is not given back.
  ))
  return _kept


def configure_from_environment():
  """keep_freed_memory() if NMT_JAX_KEEP_FREED_MEMORY=1."""
  if os.environ.get('NMT_JAX_KEEP_FREED_MEMORY') == '1':
    keep_freed_memory()


def preloaded() -> str:
  """'tcmalloc' or 'jemalloc' when one is loaded in this process, else ''."""
  try:
    with open('/proc/self/maps') as f:
      maps = f.read()
  except OSError:
    return ''
  for name in ('tcmalloc', 'jemalloc'):
    if f'lib{name}' in maps:
      return name
  return ''


def describe() -> str:
  """The malloc in use: 'tcmalloc', 'jemalloc', 'glibc (kept)' or 'system'."""
  return preloaded() or ('glibc (kept)' if _kept else 'system')
