"""The command line end to end: train -> eval -> translate, resume after SIGKILL, bad input.

Where a case is about the numbers or the library's refusal rather than the
process (exit status, one error line, stdout), it runs in this process what
the command runs (train.train_and_evaluate, inference.evaluate), with the
config the command line gives (commands.cli_config).
"""

import glob
import json
import logging
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
from tensorboardX.proto import event_pb2

from nmt_jax import inference
from nmt_jax import train
from nmt_jax.config import cli_flags
from nmt_jax.config import compiler_options
from nmt_jax.system import errors
from tests import conftest
from tests.commands import CONFIG
from tests.commands import QUICK
from tests.commands import cli_config
from tests.commands import final_params
from tests.commands import nmt
from tests.commands import snapshot

ROOT = conftest.ROOT
# An absl log line and the file that wrote it.
GLOG = re.compile(r'^[IWEF]\d{4} [\d:.]+\s+\d+ ([\w.-]+):\d+\] ')
pytestmark = pytest.mark.slow


@pytest.fixture(scope='module')
def trained_process(tmp_path_factory):
  """(workdir, the CompletedProcess) of a tiny run."""
  runs = tmp_path_factory.mktemp('runs')
  workdir = str(runs / 'tiny')
  # XLA writes every program compiled with config.compiler_options to --xla_dump_to.
  # A process of its own, as a user starts it (the other commands here run
  # as forks of a process that imported the package: tests/forked_commands.py).
  result = nmt(
      f'--config={CONFIG}',
      f'--workdir={workdir}',
      f'--config.compiler_options=--xla_dump_to={runs / "xla"}',
      '--config.train.attention_images=2',
      *QUICK,
      fork=False,
  )
  return workdir, result


@pytest.fixture(scope='module')
def trained(trained_process):
  return trained_process[0]


def test_a_training_process_prints_only_its_own_log_lines(trained_process):
  # A process of its own also imports every library: none adds a warning,
  # a log line of its own or a progress bar to what a user sees.
  _, result = trained_process
  sources = {
      os.path.basename(p)
      for p in glob.glob(
          os.path.join(ROOT, 'nmt_jax', '**', '*.py'), recursive=True
      )
  }
  lines = result.stderr.strip().splitlines()
  assert lines and result.stdout == ''
  others = [
      line
      for line in lines
      if not (GLOG.match(line) and GLOG.match(line).group(1) in sources)
  ]
  assert not others, others


def _tensorboard_events(workdir):
  """The Event protos of the workdir's TensorBoard files (TFRecord framing)."""
  events = []
  for name in sorted(os.listdir(workdir)):
    if not name.startswith('events.out.tfevents'):
      continue
    with open(os.path.join(workdir, name), 'rb') as f:
      data = f.read()
    offset = 0
    while offset < len(data):
      (length,) = struct.unpack('<Q', data[offset : offset + 8])
      record = data[offset + 12 : offset + 12 + length]  # after length's CRC
      events.append(event_pb2.Event.FromString(record))
      offset += 12 + length + 4  # the record's CRC
  return events


def test_validations_draw_the_attention_of_the_same_sentences(trained):
  images = {}
  for event in _tensorboard_events(trained):
    for value in event.summary.value:
      if value.HasField('image'):
        images.setdefault(value.tag, []).append(
            (event.step, value.image.encoded_image_string)
        )
  # The tiny preset validates at steps 2 and 4: two sentences each, as PNGs.
  assert sorted(images) == ['valid/attention/0', 'valid/attention/1']
  for drawn in images.values():
    assert [step for step, _ in drawn] == [2, 4]
    assert all(png.startswith(b'\x89PNG') for _, png in drawn)


def test_compiler_options_reach_the_steps_a_run_compiles(trained):
  dumped = os.listdir(os.path.join(os.path.dirname(trained), 'xla'))
  modules = {name.split('.')[1] for name in dumped}
  assert {'jit_train_step', 'jit_greedy_search'} <= modules, modules
  with open(os.path.join(trained, 'config.json')) as f:
    assert json.load(f)['compiler_options'].startswith('--xla_dump_to=')


def test_train_writes_the_workdir_contract(trained):
  names = set(os.listdir(trained))
  assert {
      'config.json',
      'checkpoints',
      'metrics.jsonl',
      'eval_results.json',
  } <= names
  assert any(n.startswith('events.out.tfevents') for n in names)
  with open(os.path.join(trained, 'metrics.jsonl')) as f:
    records = [json.loads(line) for line in f]
  splits = {r['split'] for r in records}
  assert {'train', 'valid', 'eval'} <= splits
  train_record = next(r for r in records if r['split'] == 'train')
  assert {'step', 'loss', 'tokens_per_sec'} <= set(train_record)
  valid_record = next(r for r in records if r['split'] == 'valid')
  assert {'step', 'loss', 'bleu', 'avg_window'} <= set(valid_record)
  with open(os.path.join(trained, 'eval_results.json')) as f:
    result = json.load(f)
  assert 0 <= result['bleu'] <= 100 and 'tok:13a' in result['bleu_signature']
  assert result['num_sentences'] == 32 and result['avg_window'] > 0
  with open(os.path.join(trained, 'config.json')) as f:
    assert json.load(f)['model']['attention']['kind'] == 'global'


def test_help_lists_the_config_files_presets_and_where_fields_live():
  out = nmt('--help', check=False)  # absl's --help exits with status 1
  for name in os.listdir(os.path.join(ROOT, 'configs')):
    if name.endswith('.py'):
      assert f'configs/{name}' in out.stdout
  for preset in ('copyN', 'chunk', 'wmt17_de_en', 'rnnsearch', 'tiny'):
    assert f'  {preset}: ' in out.stdout
  assert 'nmt_jax/config/defaults.py' in out.stdout
  assert 'nmt_jax/attention/' in out.stdout


def test_eval_and_translate_modes(trained, tmp_path):
  before = snapshot(os.path.join(trained, 'checkpoints'))
  out = nmt(f'--config={CONFIG}', f'--workdir={trained}', '--mode=eval', *QUICK)
  assert 'BLEU' in out.stderr
  # JAX's INFO lines (no TPU backend on a machine without one) stay quiet.
  assert "backend 'tpu'" not in out.stderr and 'xla_bridge' not in out.stderr
  source = tmp_path / 'input.txt'
  # U+2028 and a lone CR are whitespace inside a line, not line ends (read
  # from stdin: test_faults.py's
  # test_translate_keeps_line_numbers_and_blank_lines).
  source.write_text('a b c\nf e d c b a\n\nb\na\u2028b\rc\n')
  target = tmp_path / 'output.txt'
  link = tmp_path / 'link.txt'  # written at its target, not replaced
  link.symlink_to(target)
  nmt(
      f'--config={CONFIG}',
      f'--workdir={trained}',
      '--mode=translate',
      f'--input={source}',
      f'--output={link}',
      *QUICK,
  )
  assert link.is_symlink()
  lines = target.read_text().splitlines()
  assert len(lines) == 5 and lines[2] == ''  # one output line per input line
  assert all(set(line.split()) <= set('abcdef') for line in lines)
  assert lines[4] == lines[0]
  assert snapshot(os.path.join(trained, 'checkpoints')) == before


def test_translate_prints_only_translations_with_the_progress_bar_on(trained):
  # NMT_JAX_PROGRESS=on draws the bar on stderr though it is not a terminal.
  env = {**conftest.subprocess_env(), 'NMT_JAX_PROGRESS': 'on'}
  out = conftest.run_module(
      'nmt_jax.main',
      f'--config={CONFIG}',
      f'--workdir={trained}',
      '--mode=translate',
      *QUICK,
      input_text='a b c\nf e d\n\nb\n',
      env=env,
  )
  assert re.search(r'decoding: +\d+%\|.*\| \d+/\d+ \[', out.stderr)
  lines = out.stdout.split('\n')
  assert len(lines) == 5 and lines[2] == '' and lines[4] == ''
  assert all(set(line.split()) <= set('abcdef') for line in lines)


def test_resume_after_sigkill_follows_the_uninterrupted_run(tmp_path):
  args = [
      f'--config={CONFIG}',
      *QUICK,
      '--config.train.num_steps=300',
      '--config.train.checkpoint_every=25',
      '--config.train.eval_every=1000',
      '--config.train.log_every=25',
      '--config.train.keep_checkpoints=20',
      # Two length buckets: the restored data iterator goes on in each.
      '--config.data.num_buckets=2',
  ]
  straight, interrupted = str(tmp_path / 'straight'), str(
      tmp_path / 'interrupted'
  )
  # The runs not killed: in this process (what the command runs), saving at
  # their end only (saves do not change the numbers).
  unkilled = cli_config(*args, '--config.train.checkpoint_every=1000')
  train.train_and_evaluate(unkilled, straight)

  process = subprocess.Popen(
      [sys.executable, '-m', 'nmt_jax.main', *args, f'--workdir={interrupted}'],
      cwd=ROOT,
      env=conftest.subprocess_env(),
      stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL,
  )
  checkpoints = os.path.join(interrupted, 'checkpoints')
  deadline = time.time() + 300
  while time.time() < deadline and process.poll() is None:
    if os.path.isdir(checkpoints) and any(
        n.isdigit() for n in os.listdir(checkpoints)
    ):
      break
    time.sleep(0.02)
  process.send_signal(signal.SIGKILL)
  process.wait()
  assert (
      process.returncode == -signal.SIGKILL
  ), 'the run ended before it could be killed'
  steps = [int(n) for n in os.listdir(checkpoints) if n.isdigit()]
  assert steps and max(steps) < 300, steps

  train.train_and_evaluate(unkilled, interrupted)
  a, b = final_params(straight, 300), final_params(interrupted, 300)
  assert a.keys() == b.keys()
  for key in a:
    np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def _expect_error(result, *fragments):
  assert result.returncode == 2, result.stderr[-2000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith('error: '), result.stderr[-2000:]
  for fragment in fragments:
    assert fragment in last, last
  assert 'Traceback' not in result.stderr


# As commands: a field absl's parser does not know (cli_flags), and main's
# check of the compiler options before it runs anything.
COMMAND_LINE_ERRORS = (
    '--config.model.hiden_size=8',
    '--config.decode.compiler_options=--xla_no_such=1',
)


@pytest.mark.parametrize(
    'override,fragment',
    [
        ('--config.model.attention.kind=bogus', 'model.attention.kind'),
        ('--config.model.attention.score=dotty', 'model.attention.score'),
        ('--config.model.hiden_size=8', 'Did you mean "hidden_size"'),
        ('--config.model.hidden_size=0', 'model.hidden_size=0 must be > 0'),
        ('--config.decode.beam_size=0', 'decode.beam_size=0 must be > 0'),
        ('--config.train.batch_size=-4', 'train.batch_size=-4'),
        (
            '--config.compiler_options=--xla_no_such=1',
            "XLA rejects it: No such compile option: 'xla_no_such'",
        ),
        (
            '--config.compiler_options=jax_enable_x64=1',
            "'jax_enable_x64=1' is not --xla_<name>=<value>",
        ),
        (
            '--config.decode.compiler_options=--xla_no_such=1',
            "decode.compiler_options='--xla_no_such=1' XLA rejects it",
        ),
    ],
)
def test_config_errors_are_one_line_and_touch_nothing(
    trained, override, fragment
):
  before = snapshot(trained)
  if override in COMMAND_LINE_ERRORS:
    _expect_error(
        nmt(
            f'--config={CONFIG}', f'--workdir={trained}', override, check=False
        ),
        fragment,
    )
  else:
    # In this process, where the command fails: main checks the compiler
    # options, then train.train_and_evaluate resolves the config.
    config = cli_config(f'--config={CONFIG}', override)
    with pytest.raises(errors.ConfigError) as error:
      compiler_options.get_decode(config)
      train.train_and_evaluate(config, trained)
    assert fragment in str(error.value) and '\n' not in str(error.value)
  assert snapshot(trained) == before


def test_eval_output_and_empty_workdir_mistakes(trained, tmp_path):
  # --output of one workdir's eval replaced that folder's results (another
  # run's, say): refused in inference.evaluate (here, in this process); an
  # empty --workdir (an unset $WORKDIR) was an IndexError.
  before = snapshot(trained)
  other = tmp_path / 'other'
  with pytest.raises(errors.UserError, match='drop --output'):
    inference.evaluate(cli_config(f'--config={CONFIG}'), [trained], str(other))
  assert not other.exists() and snapshot(trained) == before
  # (main.run checks it before any mode's work.)
  _expect_error(
      nmt(f'--config={CONFIG}', '--workdir=', '--mode=eval', check=False),
      "--workdir='' names no folder",
  )


def test_unwritable_workdir(tmp_path):
  # In this process, where the command fails (folders.prepare).
  blocker = tmp_path / 'a_file'
  blocker.write_text('not a directory')
  with pytest.raises(errors.UserError, match='not writable'):
    train.train_and_evaluate(cli_config(f'--config={CONFIG}'), f'{blocker}/run')


def test_checkpoint_of_another_config_is_refused(trained, tmp_path):
  # In this process, where the command fails (as a command, one error line:
  # test_faults.py's test_another_kind_on_a_workdir_is_refused).
  workdir = str(tmp_path / 'copy')
  shutil.copytree(trained, workdir)
  before = snapshot(workdir)
  for override, fragments in [
      (
          '--config.model.hidden_size=32',
          ['holds another model', 'model.hidden_size: 16 there, 32 here'],
      ),
      # Not a model field, but another optimizer state: named as such.
      (
          '--config.train.plateau_decay=0.5',
          ['opt_state/', 'train.plateau_decay must be as'],
      ),
      (
          '--config.train.weight_decay=0.01',
          ['opt_state/', 'train.weight_decay'],
      ),
      ('--config.train.ema_decay=0.9', ['ema_params/', 'train.ema_decay']),
  ]:
    config = cli_config(f'--config={CONFIG}', override)
    with pytest.raises(errors.CheckpointError) as error:
      train.train_and_evaluate(config, workdir)
    for fragment in fragments:
      assert fragment in str(error.value), error.value
    assert '\n' not in str(error.value)
    assert snapshot(workdir) == before


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(trained, tmp_path):
  workdir = str(tmp_path / 'copy')
  shutil.copytree(trained, workdir)
  checkpoints = os.path.join(workdir, 'checkpoints')
  before = snapshot(checkpoints)
  result = nmt(
      f'--config={CONFIG}',
      f'--workdir={workdir}',
      *QUICK,
      '--config.train.learning_rate=1e38',
      '--config.train.num_steps=12',
      check=False,
  )
  _expect_error(result, 'loss became', 'the last checkpoint')
  assert snapshot(checkpoints) == before


def test_translate_input_errors(trained):
  # In this process, where --mode=translate of an --input of blank lines
  # fails. (As commands: test_faults.py's
  # test_translate_input_and_output_errors_come_before_decoding; a token not
  # in the vocabulary, named by its line: its
  # test_translate_keeps_line_numbers_and_blank_lines.)
  for lines in (['', ''], []):  # blank lines, or none at all
    with pytest.raises(errors.UserError) as error:
      inference.translate(cli_config(f'--config={CONFIG}'), [trained], lines)
    assert 'no input sentences' in str(error.value)
    assert '\n' not in str(error.value)


def test_lines_longer_than_the_input_bound_are_refused(trained):
  # A 100,000-word line decoded for minutes without a word. The bound:
  # decode.max_input_length, by default 4 x data.max_length (8 here).
  config = cli_config(f'--config={CONFIG}', *QUICK)
  long_line = ' '.join(['a'] * 33)
  with pytest.raises(errors.UserError) as error:
    inference.translate(config, [trained], ['a b', '', long_line])
  message = str(error.value)
  assert 'input line 3 has 33 pieces' in message and '\n' not in message
  assert 'decode.max_input_length=32' in message
  with pytest.raises(errors.UserError, match='target line 2 has 33 pieces'):
    inference.score(config, [trained], [(1, 'a', 'a'), (2, 'a b', long_line)])
  with pytest.raises(errors.UserError, match='source line 1 has 33 pieces'):
    inference.score(config, [trained], [(1, long_line, 'a')])
  # At the bound, or with a raised one, it is translated.
  (out,) = inference.translate(config, [trained], [' '.join(['a'] * 32)])
  assert out
  config.decode.max_input_length = 33
  assert len(inference.translate(config, [trained], [long_line])) == 1


# (An existing --workdir without checkpoints: test_write_faults.py's
# test_a_mistyped_workdir_leaves_no_folders, the same check.)


# As a command: test_faults.py's
# test_a_broken_config_file_ends_the_command_before_any_workdir.
@pytest.mark.parametrize(
    'form',
    [['--config={}'], ['--config', '{}'], ['-config={}'], ['-config', '{}']],
)
def test_every_spelling_of_the_config_flag_is_checked_first(
    form, tmp_path, capsys
):
  # absl takes all of these; only --config=PATH was checked, the others gave
  # two tracebacks (config_flags defers a load failure to its first use).
  broken = tmp_path / 'broken.py'
  broken.write_text('def get_config(:\n')
  for path, fragment in [
      ('configs/nope.py', 'config file configs/nope.py does not exist'),
      (str(broken), f'config file {broken} line 1: syntax error'),
  ]:
    argv = ['main', *(a.format(path) for a in form), '--workdir=w']
    with pytest.raises(SystemExit) as exit_info:
      cli_flags.parse_flags(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith(f'error: {fragment}')


def test_a_distributed_timeout_below_one_second_is_refused(tmp_path):
  # 0 or less fired the watchdog at once: "did not form within -5s
  # (coordinator unreachable ...)" blamed the network.
  _expect_error(
      nmt(
          f'--config={CONFIG}',
          f'--workdir={tmp_path}/w',
          '--distributed_timeout=0',
          check=False,
      ),
      'flag --distributed_timeout=0: 0 is not a positive integer',
  )


FLEXIBLE = ['--config=configs/flexible.py:tiny', *QUICK]
FINETUNE = '--config=configs/flexible_finetune.py:tiny'


@pytest.fixture(scope='module')
def trained_flexible(tmp_path_factory):
  """`nmt(*FLEXIBLE)`'s workdir, trained in this process."""
  workdir = str(tmp_path_factory.mktemp('runs') / 'flexible')
  train.train_and_evaluate(cli_config(*FLEXIBLE), workdir)
  return workdir


def test_decoding_fields_may_change_for_evaluation(trained_flexible):
  # --mode=eval, in this process.
  config = cli_config(
      *FLEXIBLE,
      '--config.model.attention.tau=1.0',
      '--config.model.dropout=0.5',
  )
  inference.evaluate(config, [trained_flexible])


def test_flexible_finetuning_runs_from_a_trained_workdir(
    trained_flexible, tmp_path, caplog
):
  # In this process (what the command runs); its log as the command's.
  caplog.set_level(logging.INFO)
  workdir = str(tmp_path / 'finetune')
  config = cli_config(
      FINETUNE,
      *QUICK,
      f'--config.train.init_from={trained_flexible}',
      '--config.model.attention.tau=1.2',
      '--config.data.num_train=40',  # a few batches of 8
      '--config.train.eval_every=100',
  )
  train.train_and_evaluate(config, workdir)
  assert 'initialised from' in caplog.text
  # One epoch by default: as many steps as the split has batches.
  epoch = re.search(
      r'num_epochs=1: (\d+) steps of (\d+) per epoch', caplog.text
  )
  assert epoch and epoch[1] == epoch[2] and 3 <= int(epoch[1]) <= 5
  with open(os.path.join(workdir, 'config.json')) as f:
    assert json.load(f)['train']['num_steps'] == int(epoch[1])
  with open(os.path.join(workdir, 'eval_results.json')) as f:
    result = json.load(f)
  assert result['checkpoint_step'] == int(epoch[1])
  # tau = 1.2 drops positions: the window is a fraction of the source, not all of it.
  assert 0 < result['avg_window_fraction'] < 1
  assert result['avg_window'] <= result['avg_computed']


def test_init_from_another_kind_or_shape_is_refused(
    trained, trained_flexible, tmp_path
):
  # In this process, where the command fails.
  for name, overrides, fragments in [
      (
          'a',
          [f'--config.train.init_from={trained}'],
          ["trained attention kind 'global'"],
      ),
      (
          'b',
          [
              f'--config.train.init_from={trained_flexible}',
              '--config.model.hidden_size=24',
          ],
          ['does not match this model', 'shape'],
      ),
      (
          'c',
          [f'--config.train.init_from={tmp_path}/nothing'],
          ['has no config.json and checkpoints'],
      ),
      ('d', [], ["train.init_from='' is empty, but train.beta=0.1 fine-tunes"]),
  ]:
    with pytest.raises(errors.UserError) as error:
      train.train_and_evaluate(
          cli_config(FINETUNE, *overrides), str(tmp_path / name)
      )
    for fragment in fragments:
      assert fragment in str(error.value), error.value
    assert '\n' not in str(error.value)
  assert not os.path.exists(tmp_path / 'd')


def test_init_from_a_workdir_of_another_vocabulary_is_refused(
    trained, tmp_path
):
  # Same vocabulary size, other words: the same ids would mean other words.
  # `trained` has the 6 symbols of the copy task; this corpus 6 words. (In
  # this process, where the command fails.)
  rng = np.random.default_rng(0)
  words = 'eins zwei drei vier fünf sechs'.split()
  lines = [' '.join(rng.permutation(words)) for _ in range(40)]
  for split in ('train', 'dev'):
    for lang in ('de', 'en'):
      (tmp_path / f'b.{split}.{lang}').write_text('\n'.join(lines))
  config = cli_config(
      f'--config={CONFIG}',
      *QUICK,
      '--config.data.vocab.kind=word',
      '--config.data.max_length=8',
      f'--config.data.name=text:{tmp_path}/b',
      f'--config.train.init_from={trained}',
  )
  with pytest.raises(
      errors.UserError, match='was trained with a different source vocabulary'
  ):
    train.train_and_evaluate(config, str(tmp_path / 'wb'))
