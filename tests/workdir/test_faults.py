"""Every workdir survives every fault: damage, two writers, SIGTERM, bad numbers.

Each case asserts the exit status, a one-line message without a traceback,
and that the files that existed before are unchanged (a damaged checkpoint:
moved aside intact). Where the process is not what a case is about, it runs
what the command runs in this process (train.train_and_evaluate,
inference.score, train.prepare): the error and the files are the same.
"""

import gc
import glob
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from nmt_jax import average
from nmt_jax import inference
from nmt_jax import train
from nmt_jax.analysis import runs
from nmt_jax.config import cli_flags
from nmt_jax.config import defaults
from nmt_jax.config import validation
from nmt_jax.system import errors
from nmt_jax.training import preemption
from nmt_jax.training import progress as progress_lib
from nmt_jax.workdir import checkpoint
from nmt_jax.workdir import integrity
from nmt_jax.workdir import locks
from nmt_jax.workdir import writers
from tests import conftest
from tests.commands import QUICK
from tests.commands import cli_config
from tests.commands import final_params
from tests.commands import nmt
from tests.commands import snapshot
from tests.commands import wait_until
from tests.conftest import ROOT

CONFIG = 'configs/global_general.py:tiny'
# Checkpoints 2, 4, ..., 20: one good one under nine damaged each its own
# way (test_damaged_checkpoints_are_set_aside_and_training_resumes).
STEPS = tuple(range(2, 21, 2))
RUN = [
    f'--config={CONFIG}',
    *QUICK,
    f'--config.train.num_steps={STEPS[-1]}',
    f'--config.train.keep_checkpoints={len(STEPS)}',
]
LAST = STEPS[-1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """`nmt(*RUN)`'s workdir, trained in this process: checkpoints STEPS."""
  workdir = str(tmp_path_factory.mktemp('faults') / 'tiny')
  train.train_and_evaluate(cli_config(*RUN), workdir)
  names = os.listdir(os.path.join(workdir, 'checkpoints'))
  assert sorted(int(n) for n in names if n.isdigit()) == list(STEPS)
  return workdir


def _copy(trained, tmp_path, name='w'):
  workdir = str(tmp_path / name)
  shutil.copytree(trained, workdir)
  return workdir


def _one_line_error(result, *fragments, status=2):
  assert result.returncode == status, result.stderr[-3000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith('error: '), result.stderr[-3000:]
  for fragment in fragments:
    assert fragment in last, last
  assert 'Traceback' not in result.stderr, result.stderr[-3000:]


def _data_files(step_dir):
  return sorted(glob.glob(f'{step_dir}/state/ocdbt.process_0/d/*'))


def _truncate(step_dir):
  for path in _data_files(step_dir):
    os.truncate(path, os.path.getsize(path) // 2)


def _garble(step_dir):
  for path in _data_files(step_dir):
    with open(path, 'r+b') as f:
      f.seek(min(100, os.path.getsize(path) // 2))
      f.write(bytes(range(50)))


def _flip_one_byte(step_dir):
  # One bit in the middle of every data file: any one of them that holds a
  # live value is a wrong number after restoring.
  for path in _data_files(step_dir):
    with open(path, 'r+b') as f:
      f.seek(os.path.getsize(path) // 2)
      byte = f.read(1)
      f.seek(-1, os.SEEK_CUR)
      f.write(bytes([byte[0] ^ 1]))


def _delete_state(step_dir):
  shutil.rmtree(os.path.join(step_dir, 'state'))


def _delete_meta(step_dir):
  shutil.rmtree(os.path.join(step_dir, 'meta'))


def _delete_state_metadata(step_dir):
  # Orbax then reads an empty tree: damage, not another model.
  os.remove(os.path.join(step_dir, 'state', '_METADATA'))


def _bad_meta_json(step_dir):
  with open(os.path.join(step_dir, 'meta', 'metadata'), 'w') as f:
    f.write('{"step": 6, ')


def _iterator_elsewhere(step_dir):
  # Readable, but its data iterator is not at its step.
  with open(os.path.join(step_dir, 'data', 'process_0-of-1.json'), 'w') as f:
    f.write('{"next_index": 5}')


def _data_state_not_json(step_dir):
  # Its checksums pass; its data state is cut short.
  with open(os.path.join(step_dir, 'data', 'process_0-of-1.json'), 'w') as f:
    f.write('{"next_ind')


# Newest first, one way each: every one found damaged in turn, so the run
# also falls back many times in a row.
DAMAGES = {
    20: _delete_state_metadata,
    18: _delete_meta,
    16: _iterator_elsewhere,
    14: _truncate,
    12: _flip_one_byte,
    10: _garble,
    8: _delete_state,
    6: _bad_meta_json,
    4: _data_state_not_json,
}


def test_damaged_checkpoints_are_set_aside_and_training_resumes(
    trained, tmp_path
):
  """Each damaged step is set aside intact and training resumes at 2.

  Also: an empty step folder (99) is not a checkpoint (set aside, not the
  last step num_steps must reach), and step 2 has no data state for this
  process count (as if saved by another number of processes): the stream
  starts at its step.
  """
  workdir = _copy(trained, tmp_path)
  checkpoints = os.path.join(workdir, 'checkpoints')
  for step, damage in DAMAGES.items():
    damage(os.path.join(checkpoints, str(step)))
  os.makedirs(os.path.join(checkpoints, '99'))
  os.remove(os.path.join(checkpoints, '2', 'data', 'process_0-of-1.json'))
  damaged = {s: snapshot(os.path.join(checkpoints, str(s))) for s in DAMAGES}
  good = snapshot(os.path.join(checkpoints, '2'))

  result = nmt(*RUN, f'--workdir={workdir}', check=False)

  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  warnings = [x for x in result.stderr.splitlines() if 'is damaged' in x]
  assert len(warnings) == 1 + len(DAMAGES), warnings
  for warning, step in zip(warnings, [99, *DAMAGES]):
    assert f'{checkpoints}/{step} is damaged' in warning, warnings
  assert f'{checkpoints}/4 is damaged (process_0-of-1.json: ' in warnings[-1]
  assert 'resuming from step 2' in result.stderr
  corrupt = os.path.join(checkpoints, 'corrupt')
  assert sorted(os.listdir(corrupt)) == sorted(map(str, [99, *DAMAGES]))
  for step, files in damaged.items():
    assert snapshot(os.path.join(corrupt, str(step))) == files
  assert snapshot(os.path.join(checkpoints, '2')) == good
  for step in DAMAGES:  # trained again
    assert os.path.isdir(os.path.join(checkpoints, str(step)))


def test_eval_takes_over_a_stale_lock_and_falls_back_from_a_damaged_best(
    trained, tmp_path
):
  workdir = _copy(trained, tmp_path)
  dead = subprocess.Popen([sys.executable, '-c', 'pass'])
  dead.wait()
  with open(os.path.join(workdir, locks.LOCK_FILE), 'w') as f:
    json.dump({'host': socket.gethostname(), 'pid': dead.pid}, f)
  with open(os.path.join(workdir, 'eval_results.json')) as f:
    best = json.load(f)['checkpoint_step']
  _truncate(os.path.join(workdir, 'checkpoints', str(best)))
  result = nmt(*RUN, f'--workdir={workdir}', '--mode=eval', check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  assert 'taking over the stale lock' in result.stderr
  assert not os.path.exists(os.path.join(workdir, locks.LOCK_FILE))
  with open(os.path.join(workdir, 'eval_results.json')) as f:
    assert json.load(f)['checkpoint_step'] != best
  assert os.path.isdir(
      os.path.join(workdir, 'checkpoints', 'corrupt', str(best))
  )


def test_every_checkpoint_damaged_is_one_error(trained, tmp_path):
  # In this process, where the command fails.
  workdir = _copy(trained, tmp_path)
  # A workdir of two checkpoints (each failed read takes a while), both
  # damaged.
  for step in STEPS[2:]:
    shutil.rmtree(os.path.join(workdir, 'checkpoints', str(step)))
  for step in STEPS[:2]:
    _delete_meta(os.path.join(workdir, 'checkpoints', str(step)))
  with pytest.raises(errors.CheckpointError) as error:
    train.train_and_evaluate(cli_config(*RUN), workdir)
  message = str(error.value)
  assert 'every checkpoint of' in message and 'is damaged' in message
  assert '\n' not in message
  assert sorted(
      os.listdir(os.path.join(workdir, 'checkpoints', 'corrupt'))
  ) == ['2', '4']


# ------------------------------------------------------------- two writers


def test_second_writer_is_refused(trained, tmp_path):
  workdir = _copy(trained, tmp_path)
  # A damaged best checkpoint: eval must not set it aside (restore) before it
  # finds the workdir in use.
  ckpts = checkpoint.Checkpoints(workdir, create=False)
  best = ckpts.best_step()
  ckpts.close()
  _flip_one_byte(os.path.join(workdir, 'checkpoints', str(best)))
  holder = {
      'host': socket.gethostname(),
      'pid': os.getpid(),  # alive: this test
      'since': '2026-01-01 00:00:00',
      'command': 'python -m nmt_jax.main (the first run)',
  }
  with open(os.path.join(workdir, locks.LOCK_FILE), 'w') as f:
    json.dump(holder, f)
  before = snapshot(workdir)
  for mode in ('train', 'eval'):
    result = nmt(*RUN, f'--workdir={workdir}', f'--mode={mode}', check=False)
    _one_line_error(result, f'is in use by pid {os.getpid()}', 'the first run')
  assert snapshot(workdir) == before


def test_a_lock_whose_pid_now_names_another_process_is_stale(tmp_path):
  """A restarted container runs its command as the same pid again, and a
  pid is reused: alive is not enough, it must be the process that locked."""
  path = str(tmp_path / locks.LOCK_FILE)
  open(path, 'w').close()
  host = socket.gethostname()
  parent = os.getppid()  # alive, and not this process
  started = locks._start_ticks(parent)
  assert started is not None
  holder = {'host': host, 'pid': parent, 'boot_id': locks._boot_id()}
  assert not locks._stale(dict(holder, started=started), path)
  assert not locks._stale(holder, path)  # a lock written before 'started'
  assert locks._stale(dict(holder, started=started + 1), path)
  assert locks._stale(dict(holder, started=started, boot_id='other'), path)
  assert locks._stale({'host': host, 'pid': os.getpid()}, path)


def test_a_stale_lock_taken_over_by_another_run_meanwhile_is_left_to_it(
    tmp_path, monkeypatch
):
  # Two runs find the same stale lock; the first takes it over and writes its
  # own before the second acts on what it read: the second must be refused,
  # not delete the first's lock (both would then write the workdir).
  path = tmp_path / locks.LOCK_FILE
  path.write_text(json.dumps({'host': socket.gethostname(), 'pid': 2**22 + 7}))
  # The first run: alive, another process than this one.
  live = {'host': socket.gethostname(), 'pid': os.getppid(), 'since': 'now'}
  stale = locks._stale
  calls = []

  def first_run_takes_it_over_meanwhile(holder, where):
    calls.append(holder)
    if len(calls) == 1:
      path.write_text(json.dumps(live))
      return True  # what the second run read was stale
    return stale(holder, where)

  monkeypatch.setattr(locks, '_stale', first_run_takes_it_over_meanwhile)
  with pytest.raises(errors.CheckpointError, match='is in use by pid'):
    with locks.locked(str(tmp_path)):
      pass
  assert json.loads(path.read_text()) == live
  assert os.listdir(tmp_path) == [locks.LOCK_FILE]
  # Releasing removes only its own lock: one another run took over stays.
  monkeypatch.setattr(locks, '_stale', stale)
  path.unlink()
  with locks.locked(str(tmp_path)):
    path.write_text(json.dumps(dict(live, pid=os.getpid() + 1)))
  assert path.exists()


def test_two_runs_at_once_one_is_refused(tmp_path):
  # The first run: this process, holding the new workdir's lock as
  # train.train_and_evaluate does (its pid, start time and boot id).
  workdir = str(tmp_path / 'w')
  os.makedirs(workdir)
  with locks.locked(workdir):
    before = snapshot(workdir)
    second = nmt(*RUN, f'--workdir={workdir}', check=False)
    _one_line_error(second, 'is in use by pid', str(os.getpid()))
    assert snapshot(workdir) == before


# ------------------------------------------------------------ model identity


def test_another_kind_on_a_workdir_is_refused(trained, tmp_path):
  workdir = _copy(trained, tmp_path)
  before = snapshot(workdir)
  local = ['--config=configs/local_m.py:tiny', *QUICK]
  # As a command reading the workdir (translate; eval restores the same way,
  # restore.restore_for_inference).
  result = nmt(
      *local,
      f'--workdir={workdir}',
      '--mode=translate',
      check=False,
      input_text='4 5 6\n',
  )
  why = "model.attention.kind: 'global' there, 'local_m' here"
  _one_line_error(result, 'holds another model', why)
  # Training it, in this process (train.train_and_evaluate checks first).
  with pytest.raises(errors.CheckpointError) as error:
    train.train_and_evaluate(cli_config(*local), workdir)
  assert 'holds another model' in str(error.value) and why in str(error.value)
  assert snapshot(workdir) == before


# ------------------------------------------------------------------ SIGTERM


SIGTERM_STEPS = 300
SIGTERM_RUN = [
    f'--config={CONFIG}',
    *QUICK,
    f'--config.train.num_steps={SIGTERM_STEPS}',
    '--config.train.checkpoint_every=1000',
    '--config.train.eval_every=1000',
    '--config.train.log_every=1',
    '--config.train.keep_checkpoints=2',
]


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory):
  """The final parameters of `nmt(*SIGTERM_RUN)`, trained in this process.

  Saves do not change the numbers: the run to compare with saves at its end.
  """
  workdir = str(tmp_path_factory.mktemp('sigterm') / 'straight')
  train.train_and_evaluate(cli_config(*SIGTERM_RUN), workdir)
  return final_params(workdir, SIGTERM_STEPS)


# checkpoint_every 1: the signal lands during a save (saving every step makes
# a step ~5x slower). Either run is stopped well before its end.
@pytest.mark.parametrize('checkpoint_every', [1000, 1])
def test_sigterm_saves_a_checkpoint_and_resumes_exactly(
    uninterrupted, tmp_path, checkpoint_every
):
  args = [
      *SIGTERM_RUN,
      f'--config.train.checkpoint_every={checkpoint_every}',
  ]
  stopped = str(tmp_path / 'stopped')
  process = subprocess.Popen(
      [sys.executable, '-m', 'nmt_jax.main', *args, f'--workdir={stopped}'],
      cwd=ROOT,
      env=conftest.subprocess_env(),
      stdout=subprocess.DEVNULL,
      stderr=subprocess.PIPE,
      text=True,
  )
  metrics = os.path.join(stopped, 'metrics.jsonl')
  wait_until(
      lambda: os.path.exists(metrics) and os.path.getsize(metrics) > 500,
      [process],
  )
  process.send_signal(signal.SIGTERM)
  _, stderr = process.communicate(timeout=120)
  assert process.returncode == 143, stderr[-3000:]
  assert 'Traceback' not in stderr
  last = stderr.strip().splitlines()[-1]
  assert last.startswith('stopped by SIGTERM after step') and 'resume' in last
  step = int(last.split('after step ')[1].split(',')[0])
  assert 0 < step < SIGTERM_STEPS
  assert str(step) in os.listdir(os.path.join(stopped, 'checkpoints'))

  # Resumed in this process (what the same command runs), saving only at its
  # end: saving every step would take ~5x as long, and saves do not change
  # the numbers.
  train.train_and_evaluate(cli_config(*SIGTERM_RUN), stopped)
  resumed = final_params(stopped, SIGTERM_STEPS)
  assert resumed.keys() == uninterrupted.keys()
  for key, value in uninterrupted.items():
    np.testing.assert_array_equal(value, resumed[key], err_msg=key)
  # The resumed run recorded each step once.
  steps = [
      r['step'] for r in writers.read_metrics(stopped) if r['split'] == 'train'
  ]
  assert steps == sorted(set(steps)) and steps[-1] == SIGTERM_STEPS


# ----------------------------------------------------------- bad numbers


def _set(config, field, value):
  *parents, leaf = field.split('.')
  node = config
  for part in parents:
    node = node[part]
  node[leaf] = value


def _float_fields():
  config = defaults.get_config()
  fields = []
  for field in (
      list(validation.POSITIVE)
      + list(validation.NON_NEGATIVE)
      + list(validation.FINITE)
      + ['model.attention.sigma', 'model.attention.tau']
  ):
    node = config
    for part in field.split('.'):
      node = node[part]
    if isinstance(node, float):
      fields.append(field)
  return fields


@pytest.mark.parametrize('field', _float_fields())
@pytest.mark.parametrize('value', [math.nan, math.inf, -math.inf])
def test_nan_and_inf_are_refused_in_every_float_field(field, value):
  config = defaults.get_config()
  config.model.attention.kind = 'flexible'
  _set(config, field, value)
  if field == 'model.attention.tau' and value == math.inf:
    validation.resolve(config)  # inf: the untruncated model
    return
  with pytest.raises(errors.ConfigError, match=field.replace('.', r'\.')) as e:
    validation.resolve(config)
  assert '\n' not in str(e.value)


@pytest.mark.parametrize('seed', [-1, 2**64])
def test_seed_out_of_range_is_refused(seed):
  config = defaults.get_config()
  config.seed = seed
  with pytest.raises(errors.ConfigError, match='seed'):
    validation.resolve(config)


def test_divergence_stops_with_the_last_good_checkpoint(trained, tmp_path):
  # In this process (as a command, one error line: test_cli.py's
  # test_nan_loss_stops_and_keeps_the_last_good_checkpoint).
  workdir = _copy(trained, tmp_path)
  before = snapshot(os.path.join(workdir, 'checkpoints'))
  config = cli_config(
      *RUN,
      '--config.train.learning_rate=1e30',
      f'--config.train.num_steps={LAST + 40}',
      '--config.train.checkpoint_every=1000',
      # No validation either: one of the diverging weights that happened to
      # score a better BLEU than the tiny trained model would be saved.
      '--config.train.eval_every=1000',
  )
  with pytest.raises(errors.TrainingError) as error:
    train.train_and_evaluate(config, workdir)
  message = str(error.value)
  assert 'training loss became' in message and '\n' not in message
  assert f'the last checkpoint (step {LAST})' in message
  assert snapshot(os.path.join(workdir, 'checkpoints')) == before


# ------------------------------------------------------- ordinary mistakes


def test_num_steps_below_the_last_checkpoint(trained, tmp_path):
  # In this process, where the command fails.
  workdir = _copy(trained, tmp_path)
  before = snapshot(workdir)
  for override, fragments in [
      (
          '--config.train.num_steps=3',
          [
              'train.num_steps=3 is below the last checkpoint',
              'raise --config.train.num_steps',
          ],
      ),
      # With train.num_epochs (which sets num_steps) the advice names it.
      (
          '--config.train.num_epochs=0.001',
          ['train.num_steps=1 is below', 'raise --config.train.num_epochs'],
      ),
  ]:
    with pytest.raises(errors.UserError) as error:
      train.train_and_evaluate(cli_config(*RUN, override), workdir)
    for fragment in fragments:
      assert fragment in str(error.value), error.value
    assert '\n' not in str(error.value)
    assert snapshot(workdir) == before


def test_failure_before_training_leaves_no_empty_workdir(tmp_path):
  # (As a command: test_beam_wider_than_the_vocabulary_fails_before_training.)
  workdir = str(tmp_path / 'new')
  config = cli_config(*RUN, '--config.data.name=text:/nonexistent/x')
  with pytest.raises(errors.UserError, match='expected /nonexistent/x.train'):
    train.train_and_evaluate(config, workdir)
  assert not os.path.exists(workdir)


def test_metrics_reader_skips_a_half_written_last_line(trained, tmp_path):
  workdir = _copy(trained, tmp_path)
  with open(os.path.join(workdir, 'metrics.jsonl'), 'a') as f:
    f.write(f'{{"step": {LAST + 1}, "split": "tra')
  records = runs.load_run(workdir).metrics
  assert records and all(r['step'] <= LAST for r in records)


def test_translate_input_and_output_errors_come_before_decoding(
    trained, tmp_path
):
  before = snapshot(trained)
  result = nmt(
      f'--config={CONFIG}',
      f'--workdir={trained}',
      '--mode=translate',
      f'--input={tmp_path}/nonexistent.txt',
      check=False,
  )
  _one_line_error(result, 'nonexistent.txt does not exist')
  result = nmt(
      f'--config={CONFIG}',
      f'--workdir={trained}',
      '--mode=translate',
      f'--output={tmp_path}/missing/out.txt',
      check=False,
      input_text='a b\n',
  )
  _one_line_error(result, 'missing does not exist; create it first')
  assert snapshot(trained) == before


def test_translate_keeps_line_numbers_and_blank_lines(trained, tmp_path):
  # Longer than data.max_length (8): decoded in a batch of its own, as eval
  # does with long test lines (translate and score refused them).
  long_line = ' '.join(['a', 'b', 'c'] * 4)
  out = nmt(
      f'--config={CONFIG}',
      f'--workdir={trained}',
      '--mode=translate',
      # U+2028 and a lone CR are whitespace inside a line, not line ends:
      # the last line is the one before it. (stdin is read as bytes.)
      input_text=f'a b\n\n{long_line}\nc d\na b c\na\u2028b\rc\n',
  )
  lines = out.stdout.split('\n')
  assert len(lines) == 7 and lines[1] == '' and lines[-1] == ''
  assert lines[5] == lines[4]
  # Scored in this process (what --mode=score prints).
  scored = inference.score(
      cli_config(f'--config={CONFIG}'),
      [trained],
      [(1, 'a b', 'a b'), (2, long_line, long_line)],
  )
  # The sum, the mean and one log-probability per token: 12 and EOS.
  assert [len(line.split()) for line in scored] == [2 + 3, 2 + 13]
  # A token outside the vocabulary is named by its line (in this process).
  with pytest.raises(errors.UserError) as error:
    inference.translate(
        cli_config(f'--config={CONFIG}'),
        [trained],
        ['a b', '', '', '', 'z z'],
    )
  assert "token 'z' on line 5" in str(error.value)
  assert '\n' not in str(error.value)


@pytest.mark.parametrize(
    'text, message',
    [
        ('def get_config(:\n', 'line 1: syntax error'),
        ('import no_such_module\n', "No module named 'no_such_module'"),
        ('x = 1\n', 'has no get_config()'),
        ('', 'has no get_config()'),
        (
            'def get_config(arg=None):\n  return {"a": 1}\n',
            'returned a dict, not an ml_collections.ConfigDict',
        ),
        (
            'def get_config(arg=None):\n  return None\n',
            'returned a NoneType, not an ml_collections.ConfigDict',
        ),
        (
            'def get_config(arg=None):\n  raise RuntimeError("oops")\n',
            'get_config failed: RuntimeError: oops',
        ),
        # A misspelt field is refused with the nearest, as on the command
        # line, not trained on with the default.
        (
            (
                'from nmt_jax.config import defaults\n'
                'def get_config(arg=None):\n'
                '  c = defaults.get_config(arg)\n'
                '  c.model.hiden_size = 64\n'
                '  return c\n'
            ),
            (
                'sets model.hiden_size, which is not a config field; did you'
                ' mean model.hidden_size?'
            ),
        ),
        (
            (
                'from nmt_jax.config import defaults\n'
                'def get_config(arg=None):\n'
                '  c = defaults.get_config(arg)\n'
                '  c.model.attention.numm_memory = 4\n'
                '  return c\n'
            ),
            'did you mean model.attention.num_memory?',
        ),
    ],
)
def test_broken_config_files_are_one_line(tmp_path, text, message):
  path = tmp_path / 'broken.py'
  path.write_text(text)
  with pytest.raises(errors.ConfigError) as error:
    cli_flags.load_config(str(path))
  assert message in str(error.value) and '\n' not in str(error.value)


def test_a_broken_config_file_ends_the_command_before_any_workdir(tmp_path):
  # The command line's way to the errors above (cli_flags.parse_flags).
  path = tmp_path / 'broken.py'
  path.write_text('import no_such_module\n')
  result = nmt(f'--config={path}', f'--workdir={tmp_path}/w', check=False)
  _one_line_error(result, "No module named 'no_such_module'")
  assert not os.path.exists(tmp_path / 'w')


def test_beam_wider_than_the_vocabulary_fails_before_training(tmp_path):
  result = nmt(
      *RUN,
      f'--workdir={tmp_path}/w',
      '--config.decode.beam_size=100000',
      check=False,
  )
  _one_line_error(result, 'wider than the target vocabulary (10 tokens)')
  assert not os.path.exists(tmp_path / 'w')


def test_checkpoints_as_a_file_is_one_line(tmp_path):
  os.makedirs(tmp_path / 'w')
  (tmp_path / 'w' / 'checkpoints').write_text('not a directory')
  result = nmt(*RUN, f'--workdir={tmp_path}/w', check=False, timeout=120)
  _one_line_error(result, 'checkpoints is a file, not a directory')


def test_disk_full_during_a_save_is_one_line(tmp_path, monkeypatch):
  def full(*args, **kwargs):
    raise OSError(28, 'No space left on device')

  monkeypatch.setattr(checkpoint.ocp.CheckpointManager, 'save', full)
  config = defaults.get_config('tiny')
  with pytest.raises(errors.CheckpointError) as error:
    train.train_and_evaluate(config, str(tmp_path / 'w'))
  message = str(error.value)
  assert 'No space left on device' in message and '\n' not in message
  assert 'run the same command again to resume' in message


def _text_corpus(tmp_path, dev_de, dev_en, train_prefix=b''):
  """The config of a word-level text corpus of these dev files."""
  lines = open(
      os.path.join(ROOT, 'tests/corpora/numbers.train.de'), 'rb'
  ).read()
  targets = open(
      os.path.join(ROOT, 'tests/corpora/numbers.train.en'), 'rb'
  ).read()
  (tmp_path / 'c.train.de').write_bytes(train_prefix + lines)
  (tmp_path / 'c.train.en').write_bytes(targets)
  (tmp_path / 'c.dev.de').write_bytes(dev_de)
  (tmp_path / 'c.dev.en').write_bytes(dev_en)
  return cli_config(
      f'--config={CONFIG}',
      *QUICK,
      f'--config.data.name=text:{tmp_path}/c',
      '--config.data.vocab.kind=word',
      '--config.data.max_length=20',
  )


# The corpus is read (and the vocabularies built) as training does, by
# --mode=prepare (train.prepare), in this process.


def test_cr_line_endings_and_a_bom_are_read_as_text(tmp_path):
  config = _text_corpus(
      tmp_path,
      b'eins zwei\rdrei\r',
      b'one two\rthree\r',
      train_prefix=b'\xef\xbb\xbf',
  )
  task = train.prepare(config, str(tmp_path / 'w'))
  assert task.eval.target_text == ['one two', 'three']
  vocab = open(glob.glob(f'{tmp_path}/w/vocab/*')[0], encoding='utf-8').read()
  assert '\ufeff' not in vocab


def test_blank_dev_files_get_the_right_advice(tmp_path):
  config = _text_corpus(tmp_path, b'\n\n \n', b'\n\n\n')
  with pytest.raises(errors.UserError) as error:
    train.prepare(config, str(tmp_path / 'w'))
  assert 'give both sides of each line some text' in str(error.value)
  assert 'max_length' not in str(error.value)


def test_test_split_with_one_language_file_is_one_line(tmp_path):
  config = _text_corpus(tmp_path, b'eins\n', b'one\n')
  (tmp_path / 'c.test.de').write_bytes(b'eins\n')
  with pytest.raises(errors.UserError) as error:
    train.prepare(config, str(tmp_path / 'w'))
  assert 'c.test.en is missing' in str(error.value)
  assert '\n' not in str(error.value)


def test_a_checkpoint_rotated_away_while_read_is_not_set_aside(
    trained, tmp_path
):
  # translate may read a workdir that is training: the step it picked can be
  # deleted by the checkpoint rotation meanwhile. That is not damage.
  workdir = _copy(trained, tmp_path)
  ckpts = checkpoint.Checkpoints(workdir, create=False)

  def restore(step):
    if step == LAST:
      shutil.rmtree(os.path.join(ckpts.directory, str(LAST)))
      raise checkpoint.DamagedCheckpoint('Directory does not exist')
    return step

  try:
    assert ckpts.first_good(restore) == (LAST - 2, LAST - 2)
  finally:
    ckpts.close()
  assert not os.path.exists(os.path.join(workdir, 'checkpoints', 'corrupt'))


@pytest.mark.parametrize('read_only', [False, True])
def test_a_damaged_best_checkpoint_falls_back_to_the_next_best(
    trained, tmp_path, monkeypatch, read_only
):
  # Validation BLEU 50, 70 and 10 at steps 2, 4 and the later ones; 4 is
  # damaged. The next best is 2, also where the damaged step cannot be moved
  # aside (read-only).
  workdir = _copy(trained, tmp_path)
  for step in STEPS:
    bleu = {2: 50.0, 4: 70.0}.get(step, 10.0)
    with open(f'{workdir}/checkpoints/{step}/metrics/metrics', 'w') as f:
      json.dump({'bleu': bleu}, f)
  if read_only:

    def refuse(*args):
      raise PermissionError(13, 'Permission denied')

    monkeypatch.setattr(checkpoint.os, 'rename', refuse)
  ckpts = checkpoint.Checkpoints(workdir, create=False)

  def restore(step):
    if step == 4:
      raise checkpoint.DamagedCheckpoint('checksum mismatch')
    return step

  try:
    assert ckpts.first_good(restore, best=True) == (2, 2)
  finally:
    ckpts.close()
  moved = os.path.exists(f'{workdir}/checkpoints/corrupt/4')
  assert moved != read_only


# The last step damaged: in its arrays (--last reads them), in its meta JSON
# (--best ranks by the BLEU there too). The first as a command, the others
# in this process (nmt_jax.average's main prints the same error).
@pytest.mark.parametrize(
    'damage, flag',
    [
        (_flip_one_byte, '--last=2'),
        (_bad_meta_json, '--last=2'),
        (_bad_meta_json, '--best=2'),
    ],
)
def test_averaging_a_damaged_checkpoint_is_one_line(
    trained, tmp_path, damage, flag
):
  workdir = _copy(trained, tmp_path)
  damage(os.path.join(workdir, 'checkpoints', str(LAST)))
  before = snapshot(workdir)
  fragments = f'checkpoints/{LAST} is damaged', 'without it'
  if damage is _flip_one_byte:
    result = conftest.run_module(
        'nmt_jax.average',
        f'--workdir={workdir}',
        flag,
        f'--output={tmp_path}/avg',
        check=False,
    )
    _one_line_error(result, *fragments)
  else:
    name, count = flag[2:].split('=')
    with pytest.raises(errors.UserError) as error:
      average.average_checkpoints(
          workdir, str(tmp_path / 'avg'), **{name: int(count)}
      )
    assert all(f in str(error.value) for f in fragments), error.value
    assert '\n' not in str(error.value)
  assert not os.path.exists(tmp_path / 'avg')
  assert snapshot(workdir) == before


def test_a_resumed_run_checks_divergence_as_an_uninterrupted_one():
  fetch = lambda metrics: metrics
  record = lambda loss: {'loss_sum': loss, 'tokens': 1.0, 'grad_norm': 1.0}
  new = lambda: progress_lib.Progress(fetch, 6, 10.0, 3.0, divergence_steps=5)
  losses = [0.2] * 10 + [3.5] * 5
  uninterrupted = new()
  with pytest.raises(errors.TrainingError, match='at step 14 .* for 5 steps'):
    for step, loss in enumerate(losses):
      uninterrupted.push(step, record(loss), 1)
    uninterrupted.flush()
  first = new()
  for step, loss in enumerate(losses[:12]):  # saved after step 11
    first.push(step, record(loss), 1)
  first.flush()
  saved = json.loads(json.dumps(first.divergence_state()))  # as in the meta
  resumed = new()
  resumed.restore_divergence_state(saved)
  with pytest.raises(errors.TrainingError, match='at step 14 .* for 5 steps'):
    for step, loss in enumerate(losses[12:], start=12):
      resumed.push(step, record(loss), 1)
    resumed.flush()
  # From scratch, the resumed run took the diverged loss for its mean.
  scratch = new()
  for step, loss in enumerate(losses[12:], start=12):
    scratch.push(step, record(loss), 1)
  scratch.flush()


def test_a_failed_init_from_leaves_no_workdir(tmp_path):
  config = defaults.get_config('tiny')
  config.train.init_from = str(tmp_path / 'nowhere')
  with pytest.raises(errors.UserError, match='init_from'):
    train.train_and_evaluate(config, str(tmp_path / 'w'))
  assert not os.path.exists(tmp_path / 'w')


def test_num_epochs_count_steps_without_float_error():
  config = defaults.get_config('tiny')
  config.train.num_epochs = 1.1
  assert train.with_epochs(config, 50).train.num_steps == 55
  config.train.num_epochs = 0.001
  assert train.with_epochs(config, 50).train.num_steps == 1


def test_a_loss_spike_that_recovers_is_not_divergence():
  fetch = lambda metrics: metrics
  record = lambda loss: {'loss_sum': loss, 'tokens': 1.0, 'grad_norm': 1.0}
  spike = progress_lib.Progress(fetch, 200, 10.0, 3.0, divergence_steps=5)
  for step, loss in enumerate([0.2] * 10 + [3.5] * 4 + [0.2] * 10):
    spike.push(step, record(loss), 1)
  spike.flush()
  assert spike.running_loss == pytest.approx(0.2)  # the spike is left out
  stays = progress_lib.Progress(fetch, 200, 10.0, 3.0, divergence_steps=5)
  with pytest.raises(errors.TrainingError, match='for 5 steps'):
    for step, loss in enumerate([0.2] * 10 + [3.5] * 5):
      stays.push(step, record(loss), 1)
    stays.flush()


def test_sigterm_interrupts_a_multi_process_run_once_its_loop_has_ended(
    monkeypatch,
):
  # With several processes JAX's preemption service takes SIGTERM during the
  # training loop; after it (the final evaluation) nothing would act on it.
  before = signal.getsignal(signal.SIGTERM)
  monkeypatch.setattr(preemption, '_interrupts', [])
  try:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as JAX's, for Python
    monkeypatch.setattr(preemption.jax, 'process_count', lambda: 2)
    with preemption.Preemption(grace_seconds=5):
      assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is preemption._interrupt
    with pytest.raises(KeyboardInterrupt):
      os.kill(os.getpid(), signal.SIGTERM)
      time.sleep(1)  # the handler runs between bytecodes
  finally:
    signal.signal(signal.SIGTERM, before)


def test_out_of_memory_while_restoring_does_not_set_a_checkpoint_aside():
  with pytest.raises(errors.CheckpointError, match='out of memory while'):
    with integrity.reading():
      raise RuntimeError('RESOURCE_EXHAUSTED: Out of memory allocating 4 GiB')
  with pytest.raises(checkpoint.DamagedCheckpoint, match='bad bytes'):
    with integrity.reading():
      raise ValueError('bad bytes')
  with pytest.raises(checkpoint.DamagedCheckpoint):  # a missing file is
    with integrity.reading():
      raise ValueError('NOT_FOUND: Error opening file "x/d/1"')


@pytest.mark.parametrize(
    'error',
    [
        PermissionError(13, 'Permission denied'),
        OSError(116, 'Stale file handle'),
        ValueError('PERMISSION_DENIED: Error opening file "x/d/1"'),
        ValueError("UNKNOWN: Error reading x: [os_error_code='5'] I/O error"),
    ],
)
def test_a_read_the_storage_refused_does_not_set_a_checkpoint_aside(error):
  # A passing NFS hiccup or a permission problem would otherwise set every
  # good checkpoint aside, one after the other. (A missing file is damage:
  # test_out_of_memory_while_restoring_does_not_set_a_checkpoint_aside.)
  with pytest.raises(errors.CheckpointError, match='nothing was set aside'):
    with integrity.reading():
      raise error


@pytest.mark.filterwarnings('ignore::pytest.PytestUnraisableExceptionWarning')
def test_a_ctrl_c_dropped_inside_a_gc_callback_is_raised_again(monkeypatch):
  """Python drops an exception raised in a garbage-collector callback (XLA
  runs one at allocations): a training run sent SIGINT in one trained on."""
  monkeypatch.setattr(preemption, '_interrupts', [])
  preemption.raise_if_interrupted()  # nothing yet
  previous = signal.getsignal(signal.SIGINT)
  preemption.interrupt_on_sigint()
  try:

    def callback(phase, info):
      del info
      if phase == 'start':
        signal.raise_signal(signal.SIGINT)  # handled inside the callback

    gc.callbacks.append(callback)
    try:
      gc.collect()  # 'Exception ignored in ...': the interrupt is dropped
    finally:
      gc.callbacks.remove(callback)
    with pytest.raises(KeyboardInterrupt):
      preemption.raise_if_interrupted()
  finally:
    signal.signal(signal.SIGINT, previous)


def _translating(*args, **pipes):
  """`python -m nmt_jax.main *RUN --mode=translate *args`, started."""
  return subprocess.Popen(
      [sys.executable, '-m', 'nmt_jax.main', *RUN, '--mode=translate', *args],
      cwd=ROOT,
      env=conftest.subprocess_env(),
      stderr=subprocess.PIPE,
      text=True,
      **pipes,
  )


def test_ctrl_c_ends_a_long_translation_at_once(trained, tmp_path):
  """It printed 'interrupted' and decoded on (minutes) until SIGKILL."""
  source = tmp_path / 'long.txt'
  source.write_text(' '.join(['a', 'b', 'c'] * 20000) + '\n')  # minutes
  process = _translating(
      f'--workdir={trained}',
      f'--input={source}',
      '--config.decode.max_input_length=60000',
      '--config.decode.beam_size=4',
      stdout=subprocess.PIPE,
  )

  def cpu_seconds():
    # /proc/<pid>/stat: utime is the 14th field, in clock ticks.
    with open(f'/proc/{process.pid}/stat') as f:
      fields = f.read().rsplit(')', 1)[1].split()
    return int(fields[11]) / os.sysconf('SC_CLK_TCK')

  try:
    # Past its start, restore and compilation (~5 s): decoding.
    wait_until(lambda: cpu_seconds() > 12, [process], timeout=300)
    process.send_signal(signal.SIGINT)
    # Decoding the line takes minutes; the interrupt ends it at once.
    stdout, stderr = process.communicate(timeout=60)
  finally:
    process.kill()
  assert process.returncode == 130, stderr[-2000:]
  assert stderr.strip().splitlines()[-1].startswith('interrupted; the')
  assert stdout == ''


def test_ctrl_c_in_translate_does_not_tell_to_resume(tmp_path):
  """Ctrl-C while translate waits for stdin: exit 130, no 'resume' advice."""
  process = _translating(f'--workdir={tmp_path}/w', stdin=subprocess.PIPE)

  def reading_stdin():
    # /proc/<pid>/syscall: 'syscall number, first argument, ...'; read is 0.
    with open(f'/proc/{process.pid}/syscall') as f:
      return f.read().split()[:2] == ['0', '0x0']

  try:
    wait_until(reading_stdin, [process], timeout=120)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
  finally:
    process.kill()
  assert process.returncode == 130, stderr[-2000:]
  last = stderr.strip().splitlines()[-1]
  assert last == f'interrupted; the checkpoints in {tmp_path}/w are unchanged'
  assert not os.path.exists(tmp_path / 'w')


def test_a_reader_that_leaves_ends_translate_quietly(trained):
  # `translate | head -1`: the pipe's reader is gone before the output.
  code = (
      'import os, runpy, sys\n'
      'read, write = os.pipe()\n'
      'os.close(read)\n'
      'os.dup2(write, 1)\n'
      'sys.stdin = open(sys.argv[1])\n'
      "sys.argv = ['nmt_jax.main'] + sys.argv[2:]\n"
      "runpy.run_module('nmt_jax.main', run_name='__main__')\n"
  )
  source = os.path.join(trained, 'two_lines.txt')
  with open(source, 'w') as f:
    f.write('a b\nb a\n')
  result = conftest.run_code(
      code, source, '--mode=translate', f'--config={CONFIG}',
      f'--workdir={trained}', check=False,
  )  # fmt: skip
  assert result.returncode == 128 + signal.SIGPIPE, result.stderr
  assert 'Traceback' not in result.stderr
  assert 'BrokenPipeError' not in result.stderr


def test_a_backend_that_is_not_installed_is_one_line(tmp_path):
  env = dict(conftest.subprocess_env(), JAX_PLATFORMS='cuda')
  result = conftest.run_module(
      'nmt_jax.main', f'--config={CONFIG}', f'--workdir={tmp_path}/w',
      check=False, env=env,
  )  # fmt: skip
  _one_line_error(result, "JAX cannot start the backend JAX_PLATFORMS='cuda'")
  assert 'unset JAX_PLATFORMS' in result.stderr
  assert not os.path.exists(tmp_path / 'w')
