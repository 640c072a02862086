"""The workdir lock: one run writes to a workdir at a time.

`<workdir>/lock` holds the host, pid, start time and command of the run that
writes there, refreshed by a heartbeat; a lock whose holder is gone is taken
over with a warning.
"""

import contextlib
import json
import os
import socket
import sys
import threading
import time
from typing import Any, Dict

from absl import logging
import jax

from nmt_jax.errors import CheckpointError

LOCK_FILE = 'lock'
# A lock whose holder runs on another host is stale when its heartbeat (the
# file's modification time, refreshed every HEARTBEAT_SECONDS) is older.
STALE_SECONDS = 600
HEARTBEAT_SECONDS = 60
_held = set()  # lock paths this process holds


@contextlib.contextmanager
def locked(workdir: str):
  """Holds `<workdir>/lock` (host, pid, command) while a run writes there.

  Only process 0 of a multi-process run takes it. A lock left by a process
  that no longer runs (same host, pid gone; or no heartbeat for
  STALE_SECONDS) is taken over with a warning; a live one is a
  CheckpointError. Re-entrant within a process.
  """
  path = os.path.abspath(os.path.join(workdir, LOCK_FILE))
  if jax.process_index() != 0 or path in _held:  # not ours, or held already
    yield
    return
  _acquire(path, workdir)
  _held.add(path)
  stop = threading.Event()
  heartbeat = threading.Thread(
      target=_heartbeat, args=(path, stop), daemon=True
  )
  heartbeat.start()
  try:
    yield
  finally:
    stop.set()
    _held.discard(path)
    with contextlib.suppress(OSError):
      os.remove(path)


def _acquire(path: str, workdir: str):
  me = {
      'host': socket.gethostname(),
      'pid': os.getpid(),
      'since': time.strftime('%Y-%m-%d %H:%M:%S'),
      'command': ' '.join(sys.argv),
  }
  for _ in range(3):
    try:
      fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
      holder = _read_lock(path)
      if not _stale(holder, path):
        raise CheckpointError(
            f'workdir {workdir} is in use by pid {holder.get("pid")} on'
            f' {holder.get("host")} since {holder.get("since")}'
            f' ({holder.get("command", "?")}); wait for it or stop it, or use'
            f' another --workdir (if no run uses it, delete {path})'
        ) from None
      logging.warning(
          'taking over the stale lock of %s (pid %s on %s since %s, no'
          ' longer running)',
          workdir,
          holder.get('pid'),
          holder.get('host'),
          holder.get('since'),
      )
      with contextlib.suppress(FileNotFoundError):
        os.remove(path)
      continue
    with os.fdopen(fd, 'w') as f:
      json.dump(me, f)
    return
  raise CheckpointError(
      f'could not lock workdir {workdir}: {path} keeps reappearing; another'
      ' run is starting there'
  )


def _read_lock(path: str) -> Dict[str, Any]:
  try:
    with open(path, encoding='utf-8') as f:
      holder = json.load(f)
    return holder if isinstance(holder, dict) else {}
  except (OSError, ValueError):
    return {}


def _stale(holder: Dict[str, Any], path: str) -> bool:
  try:
    age = time.time() - os.path.getmtime(path)
  except OSError:
    return True  # gone meanwhile
  if not holder:  # unreadable: a writer killed between create and write
    return age > 5
  if holder.get('host') == socket.gethostname():
    try:
      os.kill(int(holder['pid']), 0)
    except ProcessLookupError:
      return True
    except (PermissionError, KeyError, ValueError, TypeError):
      pass
    return False
  return age > STALE_SECONDS


def _heartbeat(path: str, stop: threading.Event):
  while not stop.wait(HEARTBEAT_SECONDS):
    with contextlib.suppress(OSError):
      os.utime(path)
