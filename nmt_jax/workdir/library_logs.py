"""What the libraries behind a workdir print, as the command lines show it.

Importing nmt_jax changes nothing in the process: no hook, no logger filter.
A command line calls `install()` once at its start, and from then on the
terminal shows nmt_jax's lines and one line per fault:

- JAX's and Orbax's INFO lines go (JAX's are about its own start, e.g. that a
  machine without a TPU has no TPU backend; Orbax logs dozens per save), and
  Orbax's warning that a save between evaluations has no metrics (on
  purpose: they have no BLEU);
- the tracebacks Orbax logs with its errors, those of the reads and writes a
  failed restore or save abandons (they fail later in Orbax's threads and
  event loop, after nmt_jax's one-line error) and tensorboardX's writer
  thread failing on a full disk go to debug level (`--verbosity=1` shows
  them), each with its first line.

The records are recognised by where they come from (a file of Orbax's or
tensorboardX's) and by asyncio's and TensorStore's messages:
tests/workdir/test_library_logs.py fails when a new version of them changes
what this module relies on.
"""

import inspect
import logging as std_logging
import sys
import threading
import traceback
from typing import Optional

from absl import logging

from nmt_jax.workdir import integrity

# Set once a save failed in the storage: the writes it abandoned fail in
# Orbax's threads until the process ends.
_save_failed = False


def save_failed():
  """Called after a save failed in the storage (checkpoint.Checkpoints)."""
  global _save_failed
  _save_failed = True


def _from(error: Optional[BaseException], folder: str) -> bool:
  """Whether `error` was raised in a file under a `folder` directory."""
  frames = traceback.extract_tb(error.__traceback__) if error else []
  return any(f'/{folder}/' in frame.filename for frame in frames)


def _abandoned(error: Optional[BaseException]) -> bool:
  """A read or write a failed restore or save left behind."""
  if _from(error, 'orbax'):
    return True
  if _save_failed and (
      integrity.failed_writing(error) or 'Event loop is closed' in str(error)
  ):
    return True
  return False


def _closed_loop_callback(value, trace) -> bool:
  """A TensorStore callback into an event loop Orbax closed.

  The reads and writes a failed restore or save abandoned finish later, and
  each callback reports this as unraisable, whatever the timing.
  """
  return (
      isinstance(value, RuntimeError)
      and str(value) == 'Event loop is closed'
      and any(
          frame.name == 'call_soon_threadsafe'
          for frame in traceback.extract_tb(trace)
      )
  )


def _debug(what: str, error: BaseException):
  logging.debug('%s: %s: %s', what, type(error).__name__, error)


class _AbslRecords(std_logging.Filter):
  """Orbax's INFO lines and metrics warning dropped, its tracebacks debug."""

  def filter(self, record):
    if '/orbax/' not in record.pathname:
      return True
    if record.levelno < std_logging.WARNING:
      return False
    if 'did not provide metrics' in record.getMessage():
      return False
    if record.exc_info:
      _debug('Orbax', record.exc_info[1])
      record.exc_info, record.exc_text = None, None
    return True


class _AsyncioRecords(std_logging.Filter):
  """asyncio's report of a task a failed restore or save abandoned."""

  def filter(self, record):
    error = record.exc_info[1] if record.exc_info else None
    never_retrieved = 'exception was never retrieved' in record.getMessage()
    if (never_retrieved or _save_failed) and _abandoned(error):
      _debug('abandoned checkpoint read or write', error)
      return False
    return True


def _unraisable_hook(report):
  def hook(unraisable):
    value = unraisable.exc_value
    if (
        inspect.iscoroutine(unraisable.object) and _abandoned(value)
    ) or _closed_loop_callback(value, unraisable.exc_traceback):
      _debug('abandoned checkpoint read or write', value)
    else:
      report(unraisable)

  return hook


def _thread_hook(report):
  def hook(args):
    value = args.exc_value
    if isinstance(value, OSError) and _from(value, 'tensorboardX'):
      # metrics.jsonl and the checkpoints report the same failure as the
      # run's error.
      logging.warning('TensorBoard events not written: %s', value)
    elif _save_failed and _abandoned(value):
      _debug('abandoned checkpoint write', value)
    else:
      report(args)

  return hook


_installed = False


def install():
  """The command lines' terminal: see the module docstring. Idempotent."""
  global _installed
  if _installed:
    return
  _installed = True
  std_logging.getLogger('jax').setLevel(std_logging.WARNING)
  std_logging.getLogger('absl').addFilter(_AbslRecords())
  std_logging.getLogger('asyncio').addFilter(_AsyncioRecords())
  sys.unraisablehook = _unraisable_hook(sys.unraisablehook)
  threading.excepthook = _thread_hook(threading.excepthook)
