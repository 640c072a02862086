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
from jax.experimental import multihost_utils
import numpy as np

from nmt_jax.system import workdir_files
from nmt_jax.system.errors import CheckpointError

LOCK_FILE = workdir_files.LOCK
# A lock whose holder runs on another host is stale when its heartbeat (the
# file's modification time, refreshed every HEARTBEAT_SECONDS) is older.
STALE_SECONDS = 600
HEARTBEAT_SECONDS = 60
_held = set()  # lock paths this process holds


@contextlib.contextmanager
def locked(workdir: str):
  """Holds `<workdir>/lock` (host, pid, command) while a run writes there.

  Only process 0 of a multi-process run takes it, and every process learns
  whether it did: a refusal stops them all with one error line. A lock left
  by a process that no longer runs (same host, pid gone; or no heartbeat for
  STALE_SECONDS) is taken over with a warning; a live one is a
  CheckpointError. Re-entrant within a process.
  """
  path = os.path.abspath(os.path.join(workdir, LOCK_FILE))
  if path in _held:  # held already (every process records it)
    yield
    return
  lead = jax.process_index() == 0
  refused = None
  if lead:
    try:
      _acquire(path, workdir)
    except CheckpointError as e:
      refused = e
  if jax.process_count() > 1:
    # A collective: without it the other processes would run on into the
    # next one and fail there with a timeout.
    locked_by_lead = multihost_utils.broadcast_one_to_all(
        np.int32(refused is None)
    )
    if not lead and not int(locked_by_lead):
      raise CheckpointError(
          f'workdir {workdir} is in use by another run (process 0 says which);'
          ' wait for it or stop it, or use another --workdir'
      )
  if refused is not None:
    raise refused
  _held.add(path)
  stop = threading.Event()
  if lead:
    heartbeat = threading.Thread(
        target=_heartbeat, args=(path, stop), daemon=True
    )
    heartbeat.start()
  try:
    yield
  finally:
    stop.set()
    _held.discard(path)
    if lead and _owned(path):  # not a lock another run took over meanwhile
      with contextlib.suppress(OSError):
        os.remove(path)


def in_use_by_another(workdir: str) -> bool:
  """Whether a live run other than this process holds the workdir's lock."""
  path = os.path.abspath(os.path.join(workdir, LOCK_FILE))
  if path in _held or not os.path.exists(path):
    return False
  return not _stale(_read_lock(path), path)


def _acquire(path: str, workdir: str):
  me = {
      'host': socket.gethostname(),
      'pid': os.getpid(),
      'since': time.strftime('%Y-%m-%d %H:%M:%S'),
      'command': ' '.join(sys.argv),
      # Which process that pid is: pids are reused (a restarted container
      # runs its command as pid 1 again, a rebooted host counts anew).
      'boot_id': _boot_id(),
      'started': _start_ticks(os.getpid()),
  }
  for _ in range(3):
    try:
      fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
      if os.path.isdir(path):
        raise CheckpointError(
            f'{path} is a directory, where a run keeps the lock file of'
            f' workdir {workdir}; move it away and run the same command again'
        ) from None
      holder = _read_lock(path)
      if not _stale(holder, path):
        if holder.get('pid') is None:
          raise CheckpointError(
              f'workdir {workdir} is being locked by another run that is'
              f' starting ({path} is not written yet); wait for it, or use'
              f' another --workdir (if no run uses it, delete {path})'
          ) from None
        raise CheckpointError(
            f'workdir {workdir} is in use by pid {holder.get("pid")} on'
            f' {holder.get("host")} since {holder.get("since")}'
            f' ({holder.get("command", "?")}); wait for it or stop it, or use'
            f' another --workdir (if no run uses it, delete {path})'
        ) from None
      if not _take_over(path, holder):
        continue
      if _NOT_A_LOCK in holder:
        logging.warning(
            'taking over the lock of %s: it held %r, not a lock a run writes',
            workdir,
            holder[_NOT_A_LOCK],
        )
      else:
        logging.warning(
            'taking over the stale lock of %s (pid %s on %s since %s, no'
            ' longer running)',
            workdir,
            holder.get('pid'),
            holder.get('host'),
            holder.get('since'),
        )
      continue
    with os.fdopen(fd, 'w') as f:
      json.dump(me, f)
    return
  raise CheckpointError(
      f'could not lock workdir {workdir}: {path} keeps reappearing; another'
      ' run is starting there'
  )


def _take_over(path: str, stale: Dict[str, Any]) -> bool:
  """Removes the lock file if it still holds `stale`; True if it did.

  Atomically: another run may have taken the stale lock over and written its
  own between our reading and removing it. The file is renamed away first
  (only one run can), and put back if it is not the one judged stale.
  """
  aside = f'{path}.stale-{socket.gethostname()}-{os.getpid()}'
  try:
    os.rename(path, aside)
  except FileNotFoundError:  # another run removed it first
    return False
  if _read_lock(aside) == stale:
    os.remove(aside)
    return True
  with contextlib.suppress(OSError):  # a newer run's lock: give it back
    os.link(aside, path)
  os.remove(aside)
  return False


def _owned(path: str) -> bool:
  holder = _read_lock(path)
  return holder.get('pid') == os.getpid() and (
      holder.get('host') == socket.gethostname()
  )


# What _read_lock returns for a lock file holding something no run writes.
_NOT_A_LOCK = 'not_a_lock'


def _read_lock(path: str) -> Dict[str, Any]:
  """The lock's holder; {} while it is empty (being written) or unreadable."""
  try:
    with open(path, 'rb') as f:
      text = f.read()
  except OSError:
    return {}
  try:
    holder = json.loads(text)
  except ValueError:
    holder = None
  if isinstance(holder, dict):
    return holder
  # A run writes its lock in one call: anything else is not a lock.
  return {_NOT_A_LOCK: text[:60].decode(errors='replace')} if text else {}


def _stale(holder: Dict[str, Any], path: str) -> bool:
  try:
    age = time.time() - os.path.getmtime(path)
  except OSError:
    return True  # gone meanwhile
  if not holder:  # empty: a writer killed between create and write
    return age > 5
  if _NOT_A_LOCK in holder:
    return True
  if holder.get('host') == socket.gethostname():
    try:
      pid = int(holder['pid'])
    except (KeyError, ValueError, TypeError):
      return False
    try:
      os.kill(pid, 0)
    except ProcessLookupError:
      return True
    except PermissionError:  # alive, another user's
      pass
    if pid == os.getpid():  # not held by this process (_held): pid reused
      return True
    if holder.get('boot_id') and holder['boot_id'] != _boot_id():
      return True
    started = holder.get('started')
    return started is not None and started != _start_ticks(pid)
  return age > STALE_SECONDS


def _boot_id():
  """This boot of the (Linux) kernel, or None."""
  try:
    with open('/proc/sys/kernel/random/boot_id', encoding='ascii') as f:
      return f.read().strip()
  except OSError:
    return None


def _start_ticks(pid: int):
  """When process `pid` started, in clock ticks since boot (Linux), or None."""
  try:
    with open(f'/proc/{pid}/stat', encoding='ascii', errors='replace') as f:
      # Field 22; the command (field 2, in parentheses) may hold spaces.
      return int(f.read().rsplit(')', 1)[1].split()[19])
  except (OSError, IndexError, ValueError):
    return None


def _heartbeat(path: str, stop: threading.Event):
  while not stop.wait(HEARTBEAT_SECONDS):
    with contextlib.suppress(OSError):
      os.utime(path)
