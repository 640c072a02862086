"""The command lines' log policy, and what it relies on in Orbax and asyncio.

Importing nmt_jax changes nothing process-wide; `library_logs.install()`
(called by each command line at its start) does.
"""

import asyncio
import logging
import subprocess
import sys
import types

from absl import logging as absl_logging
import jax.numpy as jnp
import pytest

from nmt_jax.workdir import checkpoint
from nmt_jax.workdir import library_logs
from tests import conftest

_PROCESS_STATE = """
import importlib, logging, pkgutil, sys, threading
import nmt_jax

def state():
  loggers = ['', 'absl', 'asyncio', 'jax', 'orbax', 'tensorstore']
  return (
      sys.unraisablehook, sys.excepthook, threading.excepthook,
      [(logging.getLogger(n).level, list(logging.getLogger(n).filters))
       for n in loggers],
  )

before = state()
# Every module; of the command lines (each defines its absl flags, some of
# the same names) main, imported and not run.
for module in pkgutil.walk_packages(nmt_jax.__path__, 'nmt_jax.'):
  if module.name not in ('nmt_jax.sweep', 'nmt_jax.average'):
    importlib.import_module(module.name)
print('imports', 'same' if state() == before else 'changed')
from nmt_jax.workdir import library_logs
library_logs.install()
print('install', 'same' if state() == before else 'changed')
"""


def test_importing_nmt_jax_changes_nothing_process_wide():
  # No hook and no logger filter or level until a command line installs
  # its policy (and then it does change them: the comparison can fail).
  result = subprocess.run(
      [sys.executable, '-c', _PROCESS_STATE],
      capture_output=True,
      text=True,
      cwd=conftest.ROOT,
      env=conftest.subprocess_env(),
      check=True,
  )
  assert result.stdout.split('\n') == ['imports same', 'install changed', '']


_LATE_READ = """
import types
from nmt_jax.workdir import library_logs
if INSTALL:
  library_logs.install()
namespace = {}
exec(compile(
    'async def read(pause):\\n'
    '  try:\\n'
    '    await pause\\n'
    '  finally:\\n'
    '    raise Exception("Encountered error while reading array index")\\n',
    FILENAME, 'exec'), namespace)
pause = types.coroutine(lambda: (yield))()
left = namespace['read'](pause)
left.send(None)  # suspended, as the reads a failed restore abandons
del left  # collected: finalizing it raises
print('done')
"""


@pytest.mark.parametrize(
    'filename, install, quiet',
    [
        ('/site-packages/orbax/serialization.py', True, True),
        ('/elsewhere.py', True, False),
        ('/site-packages/orbax/serialization.py', False, False),
    ],
)
def test_reads_a_failed_restore_abandoned_stay_quiet_when_collected_late(
    filename, install, quiet
):
  # Under load they were collected after the one-line error and printed a
  # traceback each, with TensorStore's spec (a thousand lines). Quiet under
  # the command lines' policy only.
  program = _LATE_READ.replace('FILENAME', repr(filename))
  result = subprocess.run(
      [sys.executable, '-c', program.replace('INSTALL', str(install))],
      capture_output=True,
      text=True,
      cwd=conftest.ROOT,
      env=conftest.subprocess_env(),
      check=True,
  )
  assert result.stdout == 'done\n'
  noise = 'Exception ignored in: <coroutine object read'
  assert (noise not in result.stderr) == quiet, result.stderr


def test_callbacks_into_a_closed_checkpoint_loop_are_not_reported():
  # TensorStore reports each late callback of a failed save or restore as
  # unraisable: a header-less traceback per callback, after the error. This
  # is asyncio's wording and its frame's name: pinned here.
  loop = asyncio.new_event_loop()
  loop.close()
  try:
    loop.call_soon_threadsafe(print)
  except RuntimeError as e:
    closed = e
  reported = []
  hook = library_logs._unraisable_hook(reported.append)
  for error in (closed, RuntimeError('Event loop is closed'), ValueError()):
    hook(
        types.SimpleNamespace(
            exc_value=error, exc_traceback=error.__traceback__, object=None
        )
    )
  kept = [r.exc_value for r in reported]
  assert len(kept) == 2 and closed not in kept  # raised elsewhere: reported


def test_after_a_failed_save_its_writes_never_retrieved_are_not_logged(
    monkeypatch,
):
  # asyncio logs each abandoned write at exit, after the one-line error; a
  # storage error raised inside TensorStore has no Orbax frame to know it by.
  error = ValueError("RESOURCE_EXHAUSTED: writing [os_error_code='28']")
  record = logging.LogRecord(
      'asyncio',
      logging.ERROR,
      'x.py',
      1,
      'Future exception was never retrieved',
      None,
      (ValueError, error, None),
  )
  quiet = library_logs._AsyncioRecords()
  monkeypatch.setattr(library_logs, '_save_failed', False)
  assert quiet.filter(record)  # before any save failed: shown
  monkeypatch.setattr(library_logs, '_save_failed', True)
  assert not quiet.filter(record)
  record.exc_info = (TypeError, TypeError('a bug'), None)
  assert quiet.filter(record)


class _Records(logging.Handler):

  def __init__(self):
    super().__init__(logging.DEBUG)
    self.records = []

  def emit(self, record):
    self.records.append(record)


def test_orbax_logs_from_its_files_and_warns_of_saves_without_metrics(
    tmp_path,
):
  # What the policy's absl filter recognises Orbax's records by: the file
  # they come from, and the warning of a save between evaluations (no BLEU,
  # on purpose). Unfiltered here (no policy in the test process).
  records = _Records()
  logger = logging.getLogger('absl')
  # The logger's own level, restored as it was: set_verbosity(get_verbosity())
  # would pin an unset level (the root's, INFO under caplog) at WARNING for
  # every later test of this process.
  level = logger.level
  absl_logging.set_verbosity(absl_logging.INFO)
  logger.addHandler(records)
  try:
    ckpts = checkpoint.Checkpoints(str(tmp_path))
    ckpts.save(1, {'w': jnp.ones(2)}, {})
    ckpts.close()
  finally:
    logger.removeHandler(records)
    logger.setLevel(level)
  orbax = [r for r in records.records if '/orbax/' in r.pathname]
  assert any(r.levelno == logging.INFO for r in orbax)
  warnings = [r.getMessage() for r in orbax if r.levelno == logging.WARNING]
  assert any('did not provide metrics' in w for w in warnings), warnings
  # Under the policy: the INFO lines and that warning go, others stay.
  policy = library_logs._AbslRecords()
  assert not any(policy.filter(r) for r in orbax if r.levelno < 30)
  assert not any(
      policy.filter(r) for r in orbax if 'did not provide' in r.getMessage()
  )
  mine = logging.LogRecord(
      'absl', logging.INFO, '/nmt_jax/x.py', 1, 'm', (), None
  )
  assert policy.filter(mine)
