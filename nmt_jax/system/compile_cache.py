"""JAX's persistent compilation cache for the command lines.

A run compiles one training step per length bucket and one decoder per batch
shape; on CPU that is most of a minute for the Britz copy model. With the
cache on, a resumed run, `--mode=eval|translate|score` and the runs of a
sweep load what an earlier run compiled for the same shapes, model, JAX
version and device instead of compiling it again.

NMT_JAX_COMPILATION_CACHE names the cache directory (default
~/.cache/nmt_jax/xla) or turns it `off`. JAX's own JAX_COMPILATION_CACHE_DIR
and JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS, when set, are left to JAX.
A multi-process run uses the cache only when NMT_JAX_COMPILATION_CACHE names
a directory explicitly (whether concurrent writers on a shared file system
are safe depends on the file system). `bench`
never uses it: it measures compilation.
"""

import os
import tempfile
from typing import Optional

from absl import logging
import jax

ENV = 'NMT_JAX_COMPILATION_CACHE'
DEFAULT = os.path.join('~', '.cache', 'nmt_jax', 'xla')
# Programs that compile faster than this are not worth a file each.
MIN_COMPILE_SECONDS = 0.5


def configure() -> Optional[str]:
  """Turns the cache on as NMT_JAX_COMPILATION_CACHE says -> its directory.

  Call it before anything compiles (after jax.distributed.initialize).
  Returns None when the cache is off.
  """
  if os.environ.get('JAX_COMPILATION_CACHE_DIR'):
    return os.environ['JAX_COMPILATION_CACHE_DIR']
  setting = os.environ.get(ENV, '').strip()
  if setting.lower() in ('off', '0', 'false', 'no'):
    return None
  if not setting and jax.process_count() > 1:
    return None
  directory = os.path.expanduser(setting or DEFAULT)
  try:
    os.makedirs(directory, exist_ok=True)
    # Else JAX warns at every program it cannot write (two lines each).
    with tempfile.TemporaryFile(dir=directory):
      pass
  except OSError as e:
    logging.warning(
        'compilation cache off: cannot write to %s (%s); set %s to a writable'
        ' directory or to off',
        directory,
        e.strerror,
        ENV,
    )
    return None
  _remove_empty_entries(directory)
  jax.config.update('jax_compilation_cache_dir', directory)
  if not os.environ.get('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS'):
    jax.config.update(
        'jax_persistent_cache_min_compile_time_secs', MIN_COMPILE_SECONDS
    )
  return directory


def _remove_empty_entries(directory: str):
  """Removes the empty entries a full disk left.

  JAX creates an entry's file, then writes it, and never replaces one: an
  empty entry would fail to load (a warning, and a compilation) in every
  later run. (One cut short by a kill stays: delete the folder.)
  """
  with os.scandir(directory) as entries:
    for entry in entries:
      try:
        if entry.name.endswith('-cache') and entry.stat().st_size == 0:
          os.remove(entry.path)
      except OSError:  # another process removed or is writing it
        pass
