"""Run records in the workdir: metrics.jsonl, TensorBoard events, JSON files.

metrics.jsonl has one JSON object per line with `step`, `split` ('train',
'valid', 'eval') and that record's metrics (`loss`, `bleu`, `avg_window`,
`tokens_per_sec`, ...).

Only process 0 writes; the others get a writer that does nothing.
"""

import json
import logging as std_logging
import math
import numbers
import os
import time
from typing import Any, Dict

import tensorboardX

from nmt_jax import errors


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
    self._jsonl = open(
        os.path.join(workdir, 'metrics.jsonl'), 'a', encoding='utf-8'
    )
    self._tensorboard = tensorboardX.SummaryWriter(logdir=workdir)

  def write(self, step: int, split: str, metrics: Dict[str, Any]):
    if not self.enabled:
      return
    record = {'step': int(step), 'split': split, 'time': time.time()}
    record.update({k: _jsonable(v) for k, v in metrics.items()})
    self._jsonl.write(json.dumps(record) + '\n')
    self._jsonl.flush()
    if self._tensorboard is not None:
      for key, value in metrics.items():
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
          self._tensorboard.add_scalar(f'{split}/{key}', float(value), step)

  def write_text(self, step: int, tag: str, text: str):
    if self.enabled and self._tensorboard is not None:
      self._tensorboard.add_text(tag, text, step)

  def close(self):
    if not self.enabled:
      return
    self._jsonl.close()
    if self._tensorboard is not None:
      self._tensorboard.close()


def write_json(path: str, obj: Dict[str, Any]):
  """Writes JSON atomically (temporary file, then rename).

  A crash never leaves half a file.
  """
  tmp = f'{path}.tmp-{os.getpid()}'
  with open(tmp, 'w', encoding='utf-8') as f:
    json.dump(obj, f, indent=2, sort_keys=True, default=_jsonable)
    f.write('\n')
  os.replace(tmp, path)


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
  if not writable or os.path.isdir(target):
    raise errors.UserError(
        f'--{flag}={path} cannot be written; give a writable file path'
    )
  return target


def write_text(path: str, text: str):
  """Writes a text file atomically (temporary file, then rename)."""
  tmp = f'{path}.tmp-{os.getpid()}'
  with open(tmp, 'w', encoding='utf-8') as f:
    f.write(text)
  os.replace(tmp, path)


def read_metrics(workdir: str):
  """The records of <workdir>/metrics.jsonl, in order.

  A line that is not a JSON object (the half-written last line of a killed
  run) is skipped; no file (a workdir of nmt_jax.average, or one whose file
  was removed) has no records.
  """
  path = os.path.join(workdir, 'metrics.jsonl')
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
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.isfile(path):
    return
  kept = [
      r
      for r in read_metrics(workdir)
      if isinstance(r.get('step'), int) and r['step'] <= step
  ]
  tmp = f'{path}.tmp-{os.getpid()}'
  with open(tmp, 'w', encoding='utf-8') as f:
    f.write(''.join(json.dumps(r) + '\n' for r in kept))
  os.replace(tmp, path)


class QuietLibraries:
  """A logging filter dropping INFO records from Orbax's files.

  Orbax logs dozens of them per save; its warnings are kept.
  """

  def filter(self, record):
    return (
        record.levelno >= std_logging.WARNING
        or '/orbax/' not in record.pathname
    )
