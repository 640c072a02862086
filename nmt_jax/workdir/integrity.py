"""What makes a checkpoint damaged, and reading one quietly.

Every array of a saved state has a CRC-32 in the step's meta (`checksums`);
`verify` compares a restored state with them. `reading()` turns any failure
to read a step (Orbax, TensorStore, JSON) into DamagedCheckpoint.
"""

import contextlib
import errno
import json
import os
import re
from typing import Dict, Optional
import zlib

import jax
import numpy as np

from nmt_jax.system.errors import CheckpointError


class DamagedCheckpoint(Exception):
  """A checkpoint whose files cannot be read or do not verify."""


def path_name(path) -> str:
  """A key path as a name such as 'opt_state/1/0/count'.

  Works for a live tree (attributes, tuples) and Orbax metadata (dicts) alike.
  """
  parts = []
  for key in path:
    for attribute in ('key', 'name', 'idx'):
      if hasattr(key, attribute):
        parts.append(str(getattr(key, attribute)))
        break
  return '/'.join(parts)


def _host_value(leaf) -> np.ndarray:
  """The full value of a (replicated) array, read from this process."""
  if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
    leaf = leaf.addressable_shards[0].data  # replicated: any shard is all
  return np.asarray(leaf)


def checksums(tree) -> Dict[str, str]:
  """'path' -> 'dtype shape crc32' of every array leaf of a tree."""
  sums = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    value = np.ascontiguousarray(_host_value(leaf))
    crc = zlib.crc32(value.view(np.uint8).reshape(-1) if value.size else b'')
    sums[path_name(path)] = f'{value.dtype} {value.shape} {crc:08x}'
  return sums


def verify(tree, expected: Optional[Dict[str, str]], prefix: str = ''):
  """Raises DamagedCheckpoint naming the first array that differs."""
  if not expected:  # saved before checksums were recorded
    return
  for name, value in checksums(tree).items():
    want = expected.get(prefix + name)
    if want is not None and want != value:
      raise DamagedCheckpoint(
          f'array {prefix + name} does not match its checksum'
      )


def one_line(error: BaseException) -> str:
  """The gist of a (possibly multi-line) exception, for a log line."""
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  text = (lines[0] if lines else '').split('. See full TensorStore')[0]
  return f'{type(error).__name__}: {text}'[:300]


@contextlib.contextmanager
def reading():
  """Turns any failure to read a step into DamagedCheckpoint.

  CheckpointError (a readable checkpoint that does not fit this config) and
  interrupts pass through. The reads a failed one abandons fail later in
  Orbax's event loop; the command lines keep them off the terminal
  (library_logs).
  """
  try:
    yield
  except (CheckpointError, DamagedCheckpoint):
    raise
  except Exception as e:  # whatever Orbax, TensorStore or JSON raise
    if isinstance(e, MemoryError) or 'RESOURCE_EXHAUSTED' in str(e):
      # Not the checkpoint's fault: it must not be set aside.
      raise CheckpointError(
          f'out of memory while restoring a checkpoint ({one_line(e)});'
          ' free memory (other processes on the device) and run the same'
          ' command again'
      ) from None
    if storage_failed(e):
      # Not the checkpoint's fault either: the same read may work next time.
      raise CheckpointError(
          f'cannot read a checkpoint ({one_line(e)}); fix the storage or its'
          ' permissions and run the same command again (nothing was set'
          ' aside)'
      ) from None
    raise DamagedCheckpoint(one_line(e)) from e


# Permission denied, an I/O error, a stale NFS handle, a timeout, a full or
# read-only disk: errno values a TensorStore error names as os_error_code.
_STORAGE_ERRNOS = (errno.EPERM, errno.EACCES, errno.EIO, errno.ESTALE)
_STORAGE_ERRNOS += (errno.ETIMEDOUT, errno.ENOSPC, errno.EDQUOT, errno.EROFS)
_STORAGE_STATUS = ('PERMISSION_DENIED', 'UNAVAILABLE', 'DEADLINE_EXCEEDED')


def _causes(error: Optional[BaseException]):
  """`error` and the exceptions that caused it, outermost first."""
  while error is not None:
    yield error
    error = error.__cause__ or error.__context__


def _storage_error(error: BaseException) -> bool:
  if isinstance(error, OSError) and error.errno in _STORAGE_ERRNOS:
    return True
  text = str(error)
  codes = re.findall(r"os_error_code='?(\d+)", text)
  return any(status in text for status in _STORAGE_STATUS) or any(
      int(code) in _STORAGE_ERRNOS for code in codes
  )


def storage_failed(error: BaseException) -> bool:
  """Whether `error` (or what caused it) is the storage's, not the data's."""
  return any(_storage_error(e) for e in _causes(error))


def failed_writing(error: Optional[BaseException]) -> bool:
  """Whether a save failed in the storage (any OSError, in TensorStore's
  words too), not in nmt_jax or Orbax."""
  return any(
      isinstance(e, OSError)
      or _storage_error(e)
      or 'os_error_code' in str(e)
      or 'RESOURCE_EXHAUSTED' in str(e)
      for e in _causes(error)
  )


def unreadable_metrics(directory: str) -> str:
  """Which step's metrics file (its validation BLEU) is not JSON, and the fix."""
  for name in sorted(os.listdir(directory)):
    path = os.path.join(directory, name, 'metrics', 'metrics')
    try:
      with open(path) as f:
        json.load(f)
    except FileNotFoundError:
      continue
    except (OSError, ValueError):
      return (
          f"{path} is damaged; write the step's validation BLEU back into it"
          ' as {"bleu": B} (its meta holds it), or move the step away'
      )
  return 'move the damaged step away'
