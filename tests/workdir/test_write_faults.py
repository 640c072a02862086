"""Writing a run's files under faults: a full disk, a broken config.json,
damaged checkpoints set aside, Ctrl-C during a save.

Each case: a one-line error (or none), and nothing lost or left behind.
"""

import errno
import json
import os
import re
import shutil
import signal
import socket

import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax import average
from nmt_jax import inference
from nmt_jax import train
from nmt_jax.system import compile_cache
from nmt_jax.system import errors
from nmt_jax.training import preemption
from nmt_jax.workdir import checkpoint
from nmt_jax.workdir import locks
from nmt_jax.workdir import writers
from tests.commands import CONFIG
from tests.commands import QUICK
from tests.commands import cli_config
from tests.commands import nmt
from tests.commands import snapshot
from tests.workdir.test_faults import _copy
from tests.workdir.test_faults import _one_line_error

STEPS = (2, 4, 6)
LAST = STEPS[-1]
RUN = [
    f'--config={CONFIG}',
    *QUICK,
    f'--config.train.num_steps={LAST}',
    f'--config.train.keep_checkpoints={len(STEPS)}',
]

pytestmark = pytest.mark.slow


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """`nmt(*RUN)`'s workdir, trained in this process: checkpoints STEPS."""
  workdir = str(tmp_path_factory.mktemp('writes') / 'tiny')
  train.train_and_evaluate(cli_config(*RUN), workdir)
  return workdir


def test_a_workdir_whose_checkpoints_were_all_set_aside_is_not_retrained(
    trained, tmp_path
):
  # After "every checkpoint is damaged", the same command (or another model)
  # trained from scratch and dropped the run's metrics.jsonl.
  workdir = _copy(trained, tmp_path)
  corrupt = os.path.join(workdir, 'checkpoints', 'corrupt')
  os.makedirs(corrupt)
  for step in map(str, STEPS):
    os.rename(os.path.join(workdir, 'checkpoints', step), f'{corrupt}/{step}')
  before = snapshot(workdir)
  # In this process: the command runs train.train_and_evaluate.
  config = cli_config(*RUN, '--config.model.hidden_size=32')
  with pytest.raises(errors.CheckpointError) as error:
    train.train_and_evaluate(config, workdir)
  assert 'was set aside as damaged' in str(error.value)
  assert 'delete that folder' in str(error.value)
  assert snapshot(workdir) == before


BROKEN_CONFIG_JSON = [
    ('{"model": {', 'Expecting property name'),
    ('[]', 'not a JSON object'),
    ('{"model": 3}', 'config.json cannot be read'),
]


def _evaluate(config, workdir):
  return inference.evaluate(config, [workdir])


@pytest.mark.parametrize('text, why', BROKEN_CONFIG_JSON)
def test_a_broken_config_json_is_one_line(trained, tmp_path, text, why):
  # Training with the first as a command (one error line); the rest in this
  # process, where the commands fail (train.train_and_evaluate, and
  # inference.evaluate for --mode=eval).
  workdir = _copy(trained, tmp_path)
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    f.write(text)
  before = snapshot(workdir)
  fix = 'restore it, or use another --workdir'
  runs = [_evaluate]
  if (text, why) == BROKEN_CONFIG_JSON[0]:
    result = nmt(*RUN, f'--workdir={workdir}', check=False)
    _one_line_error(result, why, fix)
  else:
    runs.append(train.train_and_evaluate)
  for run in runs:
    with pytest.raises(errors.CheckpointError) as error:
      run(cli_config(*RUN), workdir)
    assert why in str(error.value) and fix in str(error.value)
    assert '\n' not in str(error.value)
  assert snapshot(workdir) == before
  # Without checkpoints (before the first one), training refuses it too.
  shutil.rmtree(os.path.join(workdir, 'checkpoints'))
  with pytest.raises(errors.CheckpointError, match=re.escape(why)):
    train.train_and_evaluate(cli_config(*RUN), workdir)
  with open(os.path.join(workdir, 'config.json')) as f:
    assert f.read() == text


def test_a_mistyped_workdir_leaves_no_folders(tmp_path):
  result = nmt(
      *RUN, f'--workdir={tmp_path}/typo/a/b', '--mode=eval', check=False
  )
  _one_line_error(result, 'has no checkpoints')
  assert os.listdir(tmp_path) == []


def test_a_full_disk_is_one_line_and_leaves_no_temporary_file(
    tmp_path, monkeypatch
):
  def full(*args):
    raise OSError(errno.ENOSPC, 'No space left on device')

  path = str(tmp_path / 'eval_results.json')
  writers.write_json(path, {'bleu': 1.0})
  monkeypatch.setattr(writers.os, 'replace', full)
  with pytest.raises(errors.WriteError) as e:
    writers.write_json(path, {'bleu': 2.0})
  assert str(e.value) == (
      f'cannot write {path} (No space left on device); free some space (or'
      ' fix its permissions) and run the same command again'
  )
  assert os.listdir(tmp_path) == ['eval_results.json']
  with open(path) as f:
    assert json.load(f) == {'bleu': 1.0}


def test_a_half_written_metrics_line_does_not_swallow_the_next(tmp_path):
  # A killed run's last line; --mode=eval appends without rewriting the file.
  with open(tmp_path / 'metrics.jsonl', 'w') as f:
    f.write('{"step": 2, "split": "train", "loss": 1.0}\n{"step": 4, "spl')
  writer = writers.MetricWriter(str(tmp_path))
  writer.write(4, 'eval', {'bleu': 50.0})
  writer.close()
  records = writers.read_metrics(str(tmp_path))
  assert [(r['step'], r['split']) for r in records] == [
      (2, 'train'),
      (4, 'eval'),
  ]


def test_a_failed_save_is_named_by_its_own_step(tmp_path, monkeypatch):
  # Saves are asynchronous: the failure of step 2's surfaced in step 4's
  # save, and the error named step 4.
  # (What it tells the command lines' log policy would outlast the test.)
  monkeypatch.setattr(checkpoint.library_logs, 'save_failed', lambda: None)
  ckpts = checkpoint.Checkpoints(str(tmp_path))
  state = {'w': jnp.ones((2, 3))}
  try:
    ckpts.save(2, state, {})

    def full():
      raise OSError(errno.ENOSPC, 'No space left on device')

    monkeypatch.setattr(ckpts.manager, 'wait_until_finished', full)
    with pytest.raises(errors.CheckpointError, match=r'failed \(step 2\)'):
      ckpts.save(4, state, {})
  finally:
    monkeypatch.undo()
    ckpts.close()


def test_ctrl_c_during_a_save_waits_for_it(monkeypatch):
  monkeypatch.setattr(preemption, '_interrupts', [])
  previous = signal.signal(signal.SIGINT, preemption._interrupt)
  try:
    finished = []
    with pytest.raises(KeyboardInterrupt):
      with preemption.uninterrupted():
        os.kill(os.getpid(), signal.SIGINT)
        finished.append('the save')
    assert finished == ['the save']
    with pytest.raises(KeyboardInterrupt):  # outside: at once
      os.kill(os.getpid(), signal.SIGINT)
      finished.append('never')
    assert finished == ['the save']
    # A second Ctrl-C stops a save that hangs (on its storage) at once.
    with pytest.raises(KeyboardInterrupt):
      with preemption.uninterrupted():
        os.kill(os.getpid(), signal.SIGINT)
        finished.append('the first waits')
        os.kill(os.getpid(), signal.SIGINT)
        finished.append('never')
    assert finished == ['the save', 'the first waits']
    with preemption.uninterrupted():  # nothing left pending
      finished.append('a later save')
  finally:
    signal.signal(signal.SIGINT, previous)


def test_an_empty_lock_file_just_made_is_a_run_starting(tmp_path):
  # The lock of a run between creating its lock file and writing it.
  (tmp_path / locks.LOCK_FILE).write_text('')
  with pytest.raises(
      errors.CheckpointError,
      match='is being locked by another run that is starting',
  ):
    with locks.locked(str(tmp_path)):
      pass


def test_the_compilation_cache_drops_empty_entries_and_unwritable_folders(
    tmp_path, monkeypatch
):
  updates = {}
  monkeypatch.setattr(
      compile_cache.jax.config, 'update', lambda k, v: updates.update({k: v})
  )
  monkeypatch.delenv('JAX_COMPILATION_CACHE_DIR', raising=False)
  monkeypatch.setenv(compile_cache.ENV, str(tmp_path))
  # A full disk or a kill leaves empty entries JAX would never replace.
  (tmp_path / 'jit_step-1a2b-cache').write_bytes(b'')
  (tmp_path / 'jit_step-1a2b-atime').write_bytes(b'')
  (tmp_path / 'jit_step-3c4d-cache').write_bytes(b'compiled')
  assert compile_cache.configure() == str(tmp_path)
  assert sorted(os.listdir(tmp_path)) == [
      'jit_step-1a2b-atime',
      'jit_step-3c4d-cache',
  ]
  assert updates['jax_compilation_cache_dir'] == str(tmp_path)

  def read_only(*args, **kwargs):
    raise PermissionError(errno.EACCES, 'Permission denied')

  updates.clear()
  monkeypatch.setattr(compile_cache.tempfile, 'TemporaryFile', read_only)
  assert compile_cache.configure() is None
  assert not updates


def test_a_reader_leaves_damage_to_the_run_holding_the_workdir(
    trained, tmp_path
):
  # translate reads a workdir that is training without its lock: a step it
  # finds damaged may be one the run's rotation is deleting. Only the run
  # holding the lock moves its files.
  workdir = _copy(trained, tmp_path)
  parent = os.getppid()  # alive, and not this process
  with open(os.path.join(workdir, locks.LOCK_FILE), 'w') as f:
    json.dump(
        {
            'host': socket.gethostname(),
            'pid': parent,
            'boot_id': locks._boot_id(),
            'started': locks._start_ticks(parent),
        },
        f,
    )
  ckpts = checkpoint.Checkpoints(workdir, create=False)

  def restore(step):
    if step == LAST:
      raise checkpoint.DamagedCheckpoint('half deleted')
    return step

  try:
    assert ckpts.first_good(restore) == (LAST - 2, LAST - 2)
  finally:
    ckpts.close()
  steps = os.listdir(os.path.join(workdir, 'checkpoints'))
  assert sorted(map(int, steps)) == list(STEPS)
  os.remove(os.path.join(workdir, locks.LOCK_FILE))  # no run: moved aside
  ckpts = checkpoint.Checkpoints(workdir, create=False)
  try:
    assert ckpts.first_good(restore) == (LAST - 2, LAST - 2)
  finally:
    ckpts.close()
  assert checkpoint.set_aside_steps(workdir) == [str(LAST)]


def test_a_failure_on_one_process_while_restoring_stops_every_process(
    trained, tmp_path, monkeypatch
):
  # Out of memory or a storage error on one host only: the others waited in
  # the next collective until the coordination service gave up.
  workdir = _copy(trained, tmp_path)
  ckpts = checkpoint.Checkpoints(workdir, create=False)
  monkeypatch.setattr(  # process 1 of 2 failed (its row of the allgather)
      checkpoint,
      '_every_process',
      lambda flags: np.stack([np.asarray(flags, np.int32), [0, 0, 1]]),
  )
  try:
    with pytest.raises(
        errors.CheckpointError,
        match=f'process 1 could not read checkpoint {LAST}',
    ):
      ckpts.first_good(lambda step: step)
  finally:
    ckpts.close()


def test_a_save_that_fails_outside_the_storage_keeps_its_traceback(tmp_path):
  # (Not "free space or fix the storage": a bug, where it happened.)
  ckpts = checkpoint.Checkpoints(str(tmp_path))
  with pytest.raises(TypeError, match='not JSON serializable'):
    try:
      ckpts.save(2, {'w': jnp.ones(2)}, {'bad': object()})
    finally:
      ckpts.close()  # the save is asynchronous: it fails here


def test_a_failed_average_removes_only_its_own_output(
    trained, tmp_path, monkeypatch
):
  # Two averages into a new folder avg/ at once: the one that failed removed
  # avg/ (made by it), with the other's finished output in it.
  workdir = _copy(trained, tmp_path)
  other = tmp_path / 'avg' / 'a'

  def full(*args, **kwargs):
    other.mkdir()  # the other average finished meanwhile
    (other / 'config.json').write_text('{}')
    raise errors.CheckpointError('saving a checkpoint failed (step 6): full')

  monkeypatch.setattr(checkpoint.Checkpoints, 'save', full)
  with pytest.raises(errors.CheckpointError):
    average.average_checkpoints(workdir, str(tmp_path / 'avg' / 'b'), last=2)
  assert os.listdir(tmp_path / 'avg') == ['a']
  assert os.listdir(other) == ['config.json']


def test_averaging_reads_past_a_broken_config_json(trained, tmp_path):
  # Only train.keep_checkpoints is read there, "if readable".
  workdir = _copy(trained, tmp_path)
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    f.write('{"model": ')
  ckpts = checkpoint.Checkpoints(workdir, create=False)
  try:
    assert average._keep_checkpoints(ckpts) is None
    assert average.choose_steps(ckpts, last=2) == [LAST - 2, LAST]
  finally:
    ckpts.close()


def test_a_damaged_bleu_file_of_a_step_is_one_line(trained, tmp_path):
  # Orbax reads every step's metrics/metrics when it opens the checkpoints.
  workdir = _copy(trained, tmp_path)
  path = os.path.join(workdir, 'checkpoints', '4', 'metrics', 'metrics')
  with open(path, 'w') as f:
    f.write('{"bleu": ')
  before = snapshot(workdir)
  result = nmt(*RUN, f'--workdir={workdir}', check=False)
  _one_line_error(result, f'{path} is damaged', '{"bleu": B}')
  # --mode=eval, in this process.
  with pytest.raises(errors.CheckpointError) as error:
    _evaluate(cli_config(*RUN), workdir)
  assert f'{path} is damaged' in str(error.value)
  assert '{"bleu": B}' in str(error.value) and '\n' not in str(error.value)
  assert snapshot(workdir) == before
