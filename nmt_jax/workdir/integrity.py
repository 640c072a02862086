"""What makes a checkpoint damaged, and reading one quietly.

Every array of a saved state has a CRC-32 in the step's meta (`checksums`);
`verify` compares a restored state with them. `reading()` turns any failure
to read a step (Orbax, TensorStore, JSON) into DamagedCheckpoint, and keeps
the tracebacks of the reads a failed restore abandons out of the log.
"""

import contextlib
import errno
import gc
import inspect
import json
import logging as std_logging
import os
import re
import sys
import threading
import time
import traceback
from typing import Dict, Optional
import zlib

from absl import logging
import jax
import numpy as np

from nmt_jax.system.errors import CheckpointError


class DamagedCheckpoint(Exception):
  """A checkpoint whose files cannot be read or do not verify."""


def _abandoned_read(error: Optional[BaseException]) -> bool:
  """Whether `error` was raised inside Orbax (a read a failed restore left)."""
  frames = traceback.extract_tb(error.__traceback__) if error else []
  return any('/orbax/' in frame.filename for frame in frames)


class _AbandonedReadsFilter(std_logging.Filter):
  """Drops asyncio's report of the reads a failed restore abandoned.

  The restore's own error (DamagedCheckpoint) is logged in one line.
  """

  everything = False  # after a failed save: any record of Orbax's

  def filter(self, record):
    if 'exception was never retrieved' not in record.getMessage() and not (
        self.everything
    ):
      return True
    error = record.exc_info[1] if record.exc_info else None
    # After a failed save, its abandoned writes' storage errors too (raised
    # in TensorStore: no Python frame of Orbax's in them).
    return not (
        _abandoned_read(error) or (self.everything and failed_writing(error))
    )


def _closed_loop_callback(value, trace) -> bool:
  """A TensorStore callback into an event loop Orbax closed.

  The reads and writes a failed restore or save abandoned finish later, and
  each callback reports this as unraisable (a traceback without a header),
  whatever the timing.
  """
  frames = traceback.extract_tb(trace)
  return (
      isinstance(value, RuntimeError)
      and str(value) == 'Event loop is closed'
      and any(frame.name == 'call_soon_threadsafe' for frame in frames)
  )


def _quiet_abandoned_reads(unraisable, report=sys.unraisablehook):
  """sys.unraisablehook: the abandoned reads' coroutines, finalized.

  They may be collected at any time after the restore failed, as late as
  the interpreter's exit (after the one-line error), so this stays for the
  whole process; any other unraisable exception is reported as before.
  """
  if inspect.iscoroutine(unraisable.object) and _abandoned_read(
      unraisable.exc_value
  ):
    logging.debug('abandoned checkpoint read: %s', unraisable.exc_value)
  elif _closed_loop_callback(unraisable.exc_value, unraisable.exc_traceback):
    logging.debug('abandoned checkpoint callback: %s', unraisable.exc_value)
  else:
    report(unraisable)


class _OrbaxTracebacksFilter(std_logging.Filter):
  """Orbax's error log lines without their tracebacks.

  A failed save or restore logs each of its threads' failures with the
  whole stack; nmt_jax's one-line error says what failed and what to do.
  """

  def filter(self, record):
    if record.exc_info and '/orbax/' in record.pathname:
      record.exc_info, record.exc_text = None, None
    return True


std_logging.getLogger('asyncio').addFilter(_AbandonedReadsFilter())
std_logging.getLogger('absl').addFilter(_OrbaxTracebacksFilter())
sys.unraisablehook = _quiet_abandoned_reads


def quiet_orbax_for_good():
  """Keeps the writes a failed save abandoned out of the log, from now on.

  They fail in Orbax's threads and event loop until the process ends, each
  with a traceback after the save's one-line error.
  """
  if _AbandonedReadsFilter.everything:  # installed already
    return
  report_thread = threading.excepthook

  def thread_hook(args):
    # Any of its threads meeting the closed loop, not only callbacks.
    if _abandoned_read(args.exc_value) or 'Event loop is closed' in str(
        args.exc_value
    ):
      logging.debug('abandoned checkpoint write: %s', args.exc_value)
    else:
      report_thread(args)

  threading.excepthook = thread_hook
  _AbandonedReadsFilter.everything = True


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
  interrupts pass through.
  """
  # A failed read abandons Orbax's other reads: their coroutines, collected,
  # and TensorStore's callbacks into the closed event loop would each print
  # a traceback. The one line of DamagedCheckpoint says it all.
  # (_quiet_abandoned_reads quiets the coroutines collected later.)
  hooks = sys.unraisablehook, sys.excepthook
  sys.unraisablehook, sys.excepthook = _quiet_unraisable, _quiet_exception
  failed = False
  try:
    yield
  except (CheckpointError, DamagedCheckpoint):
    raise
  except Exception as e:  # whatever Orbax, TensorStore or JSON raise
    failed = True
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
  finally:
    if failed:
      time.sleep(0.5)  # the abandoned reads finish (and fail) meanwhile
    gc.collect()
    sys.unraisablehook, sys.excepthook = hooks


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


def _quiet_unraisable(unraisable):
  logging.debug('while reading a checkpoint: %s', unraisable.exc_value)


def _quiet_exception(kind, value, trace):
  del trace
  logging.debug('while reading a checkpoint: %s: %s', kind.__name__, value)
