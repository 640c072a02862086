"""SIGTERM, what a preempted machine receives: stop at a step with a checkpoint.

A preempted Cloud TPU or GCE VM gets SIGTERM about 30 s before it is
stopped; SLURM sends SIGTERM at the end of a job's time (or on scancel) and
SIGKILL after KillWait (30 s by default). The training loop asks
`reached(step)` after every step; once SIGTERM has arrived it saves a
checkpoint of that step and stops (errors.Preempted), and the same command
resumes. If that does not happen within `grace_seconds` (a long validation
pass is running), the main thread is interrupted like Ctrl-C: the
checkpoints in flight are finished and the run stops at the last one.

In a multi-process run every process must save the same step: JAX's
coordination service (jax.distributed) receives the signal and
`reached_preemption_sync_point` agrees on the step. Outside the training loop
(the final evaluation, --mode=eval|translate|score) nothing would ask it, so
there SIGTERM stops the process like Ctrl-C, as in a one-process run.
"""

import _thread
import contextlib
import signal
import threading

from absl import logging
import jax
from jax.experimental import multihost_utils

_interrupts = []  # the signals that raised KeyboardInterrupt
# Inside `uninterrupted()`: its depth, and whether an interrupt waits for it.
_deferred = {'depth': 0, 'pending': False}


def _interrupt(signum, frame):
  """KeyboardInterrupt, remembered.

  Raised inside a garbage-collector callback or a __del__ (XLA's run at any
  allocation), Python prints it as 'Exception ignored' and drops it: the
  training loop then raises it again (`raise_if_interrupted`). Inside
  `uninterrupted()` the first one is raised when the block ends, a second
  at once.
  """
  del frame
  _interrupts.append(signum)
  if _deferred['depth'] and not _deferred['pending']:
    _deferred['pending'] = True
    logging.warning(
        'interrupted: stopping once the checkpoint being saved is complete'
        ' (interrupt again to stop at once)'
    )
    return
  raise KeyboardInterrupt


@contextlib.contextmanager
def uninterrupted():
  """Ctrl-C (or SIGTERM as Ctrl-C) raises once the block is done.

  Around a checkpoint save: cut inside Orbax's save, it left the step's
  temporary folder and hundreds of tracebacks from its threads. A second
  Ctrl-C still stops at once (a save hanging on its storage).
  """
  _deferred['depth'] += 1
  try:
    yield
  finally:
    _deferred['depth'] -= 1
    pending = _deferred['pending'] and not _deferred['depth']
    if pending:
      _deferred['pending'] = False
  if pending:
    raise KeyboardInterrupt


def interrupt_on_sigint():
  """Ctrl-C raises KeyboardInterrupt (remembered) in the main thread.

  Also where the process started with SIGINT ignored, as a non-interactive
  shell starts `cmd &` (launch/multi_gpu.sh, tpu_pod.sh's `stop`).
  """
  signal.signal(signal.SIGINT, _interrupt)


def interrupt_on_sigterm():
  """SIGTERM raises KeyboardInterrupt in the main thread, like Ctrl-C."""
  signal.signal(signal.SIGTERM, _interrupt)


def raise_if_interrupted():
  """KeyboardInterrupt if one was raised before (and maybe dropped)."""
  if _interrupts:
    raise KeyboardInterrupt


class Preemption:
  """Context manager: SIGTERM sets a flag instead of killing the process."""

  def __init__(self, grace_seconds: float):
    self.grace_seconds = grace_seconds
    self.requested = False
    self._previous = None
    self._watchdog = None

  def __enter__(self):
    if jax.process_count() == 1:
      self._previous = signal.signal(signal.SIGTERM, self._handle)
    return self

  def __exit__(self, *exc):
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)
    elif jax.process_count() > 1:  # no sync point asks JAX's service any more
      interrupt_on_sigterm()
    if self._watchdog is not None:
      self._watchdog.cancel()
    return False

  def _handle(self, signum, frame):
    del signum, frame
    if self.requested:
      return
    self.requested = True
    logging.warning(
        'SIGTERM: saving a checkpoint after this step, then stopping'
        ' (at most %g s)',
        self.grace_seconds,
    )
    self._watchdog = threading.Timer(self.grace_seconds, _thread.interrupt_main)
    self._watchdog.daemon = True
    self._watchdog.start()

  def reached(self, step: int) -> bool:
    """Whether to save and stop after `step` (the same step on all processes)."""
    if jax.process_count() == 1:
      return self.requested
    try:
      return multihost_utils.reached_preemption_sync_point(step)
    except RuntimeError:  # the preemption service is off
      return False
