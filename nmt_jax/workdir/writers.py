"""Run records in the workdir: metrics.jsonl, TensorBoard events, JSON files.

metrics.jsonl has one JSON object per line with `step`, `split` ('train',
'valid', 'eval') and that record's metrics (`loss`, `bleu`, `avg_window`,
`tokens_per_sec`, ...).

Only process 0 writes; the others get a writer that does nothing.
"""

import contextlib
import json
import math
import numbers
import os
import stat
import time
from typing import Any, Callable, Dict, Optional

from absl import logging
import numpy as np
import tensorboardX

from nmt_jax.system import errors
from nmt_jax.system import workdir_files


def _jsonable(value):
  if isinstance(value, numbers.Integral):
    return int(value)
  if isinstance(value, numbers.Real):
    value = float(value)
    return value if math.isfinite(value) else str(value)  # JSON has no NaN/inf
  return value


class MetricWriter:
  """Appends one JSON object per call to metrics.jsonl.

  The scalars also go to TensorBoard.
  """

  def __init__(self, workdir: str, enabled: bool = True):
    self.enabled = enabled
    self.workdir = workdir
    self._tensorboard = None
    if not enabled:
      return
    path = os.path.join(workdir, workdir_files.METRICS)
    with _one_line_errors(path):
      self._jsonl = open(path, 'a+b')
      # A killed run's half-written last line must not swallow the next one.
      if self._jsonl.tell() and _last_byte(self._jsonl) != b'\n':
        self._jsonl.write(b'\n')
    self._tensorboard = tensorboardX.SummaryWriter(logdir=workdir)

  def write(self, step: int, split: str, metrics: Dict[str, Any]):
    if not self.enabled:
      return
    record = {'step': int(step), 'split': split, 'time': time.time()}
    record.update({k: _jsonable(v) for k, v in metrics.items()})
    with _one_line_errors(self._jsonl.name):
      self._jsonl.write((json.dumps(record) + '\n').encode('utf-8'))
      self._jsonl.flush()
    if self._tensorboard is not None:
      for key, value in metrics.items():
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
          self._tensorboard.add_scalar(f'{split}/{key}', float(value), step)

  def write_text(self, step: int, tag: str, text: str):
    if self.enabled and self._tensorboard is not None:
      self._tensorboard.add_text(tag, text, step)

  def write_figure(self, step: int, tag: str, figure):
    """A matplotlib figure as a TensorBoard image (the figure is closed)."""
    if self.enabled and self._tensorboard is not None:
      self._tensorboard.add_figure(tag, figure, step, close=True)

  def close(self):
    """Closes the files; a failure (a full disk) is a warning.

    It runs in the `finally` of a run, often after the error that ends it.
    """
    if not self.enabled:
      return
    for close in (self._jsonl.close, getattr(self._tensorboard, 'close', None)):
      try:
        if close is not None:
          close()
      except OSError as e:
        logging.warning('closing the run records: %s', e)


def _last_byte(f) -> bytes:
  f.seek(-1, os.SEEK_END)
  return f.read(1)


@contextlib.contextmanager
def _one_line_errors(path: str, tmp: Optional[str] = None):
  """An OSError writing `path` (a full disk) as one line; `tmp` removed."""
  try:
    yield
  except OSError as e:
    if tmp:
      with contextlib.suppress(OSError):
        os.remove(tmp)
    if os.path.isdir(path):  # not the disk's fault
      raise errors.WriteError(
          f'cannot write {path}: it is a directory; move it away and run the'
          ' same command again'
      ) from None
    raise errors.WriteError(
        f'cannot write {path} ({e.strerror or e}); free some space (or fix'
        ' its permissions) and run the same command again'
    ) from None


def _write_atomically(
    path: str, write: Callable[[Any], None], binary: bool = False
):
  """write(file) into a temporary file, then renamed to `path`.

  A crash never leaves half a file; a failure leaves no temporary file.
  """
  # A link is written at its target (replacing it would lose the link); a
  # device, FIFO or socket is never replaced by a regular file.
  path = os.path.realpath(path)
  _refuse_special(path, path)
  tmp = f'{path}.tmp-{os.getpid()}'
  with _one_line_errors(path, tmp):
    with open(tmp, 'wb') if binary else open(tmp, 'w', encoding='utf-8') as f:
      write(f)
    os.replace(tmp, path)


def _kind(path: str) -> str:
  mode = os.stat(path).st_mode
  for test, kind in (
      (stat.S_ISFIFO, 'a FIFO'),
      (stat.S_ISCHR, 'a character device'),
      (stat.S_ISBLK, 'a block device'),
      (stat.S_ISSOCK, 'a socket'),
  ):
    if test(mode):
      return kind
  return 'not a regular file'


def _refuse_special(path: str, shown: str, flag: Optional[str] = None):
  """WriteError when `path` exists and is neither a regular file nor a folder."""
  if os.path.exists(path) and not (os.path.isfile(path) or os.path.isdir(path)):
    name = f'--{flag}={shown}' if flag else shown
    raise errors.WriteError(
        f'{name} is {_kind(path)}, and this file is written whole (a'
        ' temporary file renamed over it); give the path of a regular file'
    )


def write_json(path: str, obj: Dict[str, Any]):
  """Writes JSON atomically (temporary file, then rename)."""

  def write(f):
    json.dump(obj, f, indent=2, sort_keys=True, default=_jsonable)
    f.write('\n')

  _write_atomically(path, write)


def check_writable(path: str, flag: str) -> str:
  """The real path of the file `--flag=path` names, checked before the work.

  A symbolic link is written at its target (replacing the link would lose
  it); a FIFO or a device (/dev/stdout) must be writable itself. Raises
  errors.UserError (one line) when the file cannot be written.
  """
  target = os.path.realpath(path)
  folder = os.path.dirname(target)
  if not os.path.isdir(folder):
    raise errors.UserError(
        f'--{flag}={path}: folder {folder} does not exist; create it first'
    )
  special = os.path.exists(target) and not os.path.isfile(target)
  writable = (
      os.access(target, os.W_OK) if special else os.access(folder, os.W_OK)
  )
  if os.path.isdir(target):
    raise errors.UserError(
        f'--{flag}={path} is a directory; give the path of a file (in it,'
        ' or elsewhere)'
    )
  if not writable:
    raise errors.UserError(
        f'--{flag}={path} cannot be written; give a writable file path'
    )
  return target


def check_regular_file(path: str, flag: str) -> str:
  """check_writable for a file written whole (write_npz, write_json): an
  existing device, FIFO or socket there is refused, never replaced."""
  target = check_writable(path, flag)
  _refuse_special(target, path, flag)
  return target


def write_text(path: str, text: str):
  """Writes a text file atomically (temporary file, then rename)."""
  _write_atomically(path, lambda f: f.write(text))


def write_npz(path: str, arrays: Dict[str, Any]):
  """Writes NumPy arrays by name (np.savez) atomically."""
  _write_atomically(path, lambda f: np.savez(f, **arrays), binary=True)


def read_metrics(workdir: str):
  """The records of <workdir>/metrics.jsonl, in order.

  A line that is not a JSON object (the half-written last line of a killed
  run) is skipped; no file (a workdir of nmt_jax.average, or one whose file
  was removed) has no records.
  """
  path = os.path.join(workdir, workdir_files.METRICS)
  records = []
  if not os.path.isfile(path):
    return records
  with open(path, encoding='utf-8', errors='replace') as f:
    for line in f:
      try:
        record = json.loads(line)
      except ValueError:
        continue
      if isinstance(record, dict):
        records.append(record)
  return records


def truncate_metrics(workdir: str, step: int):
  """Drops the records after `step` from metrics.jsonl (a resumed run).

  The steps after the checkpoint a run resumes from are trained again and
  recorded again; their first records (and a half-written last line) go.
  The file is rewritten atomically.
  """
  path = os.path.join(workdir, workdir_files.METRICS)
  if not os.path.isfile(path):
    return
  kept = [
      r
      for r in read_metrics(workdir)
      if isinstance(r.get('step'), int) and r['step'] <= step
  ]
  _write_atomically(
      path, lambda f: f.write(''.join(json.dumps(r) + '\n' for r in kept))
  )
