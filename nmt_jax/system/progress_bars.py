"""Progress of the jobs that run longer than a few seconds, on stderr only.

One rule for every such job (--mode=prepare's vocabulary and encoding,
decoding and scoring in eval/translate/score and validation, checkpoint
averaging, the runs of a sweep):

- stderr is a terminal: a tqdm bar (count/total, rate, time left), erased
  when the job is done;
- stderr is not a terminal (a log file, a cluster job, a test's captured
  output): no bar, but one absl log line with count/total, rate and time left
  every LOG_SECONDS, the first after LOG_SECONDS, so a job shorter than that
  leaves nothing in the log;
- the environment variable NMT_JAX_PROGRESS=on forces the bar (on stderr
  even when it is not a terminal), =off turns both off.

Stdout is never written: translate and score print their results there.
"""

import os
import sys
import time
from typing import Callable, Iterable, Optional, TextIO

from absl import logging
import jax
import tqdm

ENV = 'NMT_JAX_PROGRESS'
LOG_SECONDS = 30.0


def kind(stream: Optional[TextIO] = None) -> str:
  """'bar', 'log' or 'off': what `bar` shows on `stream` (stderr)."""
  setting = os.environ.get(ENV, '').strip().lower()
  if setting in ('off', '0'):
    return 'off'
  if setting in ('on', '1'):
    return 'bar'
  stream = sys.stderr if stream is None else stream
  return 'bar' if _isatty(stream) else 'log'


def _isatty(stream) -> bool:
  try:
    return bool(stream.isatty())
  except (AttributeError, ValueError):  # no such method, or a closed stream
    return False


def bar(
    iterable: Optional[Iterable] = None,
    total: Optional[int] = None,
    desc: str = '',
    unit: str = 'it',
    stream: Optional[TextIO] = None,
    clock: Callable[[], float] = time.monotonic,
):
  """Wraps `iterable` (or counts `update(n)` calls) in the rule's progress.

  Use it as tqdm: iterate it, or `update(n)` it inside a `with`.
  """
  stream = sys.stderr if stream is None else stream
  if total is None and hasattr(iterable, '__len__'):
    total = len(iterable)
  shown = kind(stream)
  if shown == 'bar':
    return tqdm.tqdm(
        iterable,
        total=total,
        desc=desc,
        unit=unit,
        file=stream,
        leave=False,
        dynamic_ncols=True,
    )
  return LogLines(iterable, total, desc, unit, clock, shown == 'log')


def wait_each(outputs, desc: str, unit: str = 'batch'):
  """Waits for each of `outputs` (dispatched device work) in turn, shown.

  JAX returns before the device finishes: a bar over the dispatching loop
  would fill at once. Waiting in dispatch order counts finished work.
  """
  for out in bar(outputs, desc=desc, unit=unit):
    jax.block_until_ready(out)
  return outputs


class LogLines:
  """A count logged every LOG_SECONDS (the rule's stand-in for a bar)."""

  def __init__(self, iterable, total, desc, unit, clock, enabled=True):
    self.iterable, self.total, self.desc, self.unit = (
        iterable,
        total,
        desc,
        unit,
    )
    self.n = 0
    self._clock = clock
    self._enabled = enabled
    self._start = self._last = clock()

  def __iter__(self):
    for item in self.iterable:
      yield item
      self.update(1)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  def close(self):
    pass

  def update(self, n: int = 1):
    self.n += n
    if not self._enabled:
      return
    now = self._clock()
    if now - self._last >= LOG_SECONDS:
      self._last = now
      logging.info('%s', self.line(now - self._start))

  def line(self, elapsed: float) -> str:
    """E.g. 'decoding: 12/40 batch (30%), 0.40 batch/s, 1m10s left'."""
    rate = self.n / max(elapsed, 1e-9)
    if not self.total:
      return f'{self.desc}: {self.n} {self.unit}, {rate:.3g} {self.unit}/s'
    left = (self.total - self.n) / rate if rate else float('inf')
    return (
        f'{self.desc}: {self.n}/{self.total} {self.unit}'
        f' ({100 * self.n / self.total:.0f}%), {rate:.3g} {self.unit}/s,'
        f' {duration(left)} left'
    )


def duration(seconds: float) -> str:
  """E.g. '1h02m', '3m05s', '0m42s' ('?' for an unknown time)."""
  if not seconds < float('inf'):  # inf or NaN
    return '?'
  seconds = int(seconds)
  if seconds >= 3600:
    return f'{seconds // 3600}h{seconds % 3600 // 60:02d}m'
  return f'{seconds // 60}m{seconds % 60:02d}s'
