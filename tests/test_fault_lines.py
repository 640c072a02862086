"""Faults and bad inputs that were a traceback or a misleading line.

Each is now one line that names the problem and the fix (or, for a lock file
no run wrote, a warning and the lock taken over). Most run in this process
where the command fails; the bench command line's flags run as commands.
"""

import json
import logging
import os

import numpy as np
import pytest

from nmt_jax.config import cli_flags
from nmt_jax.config import defaults
from nmt_jax.config import validation
from nmt_jax.data import dataset
from nmt_jax.data import encoding
from nmt_jax.data import vocab
from nmt_jax.system import errors
from nmt_jax.system import profiling
from nmt_jax.workdir import locks
from nmt_jax.workdir import writers
from tests import conftest


def _one_line(error, *fragments):
  message = str(error.value)
  assert '\n' not in message, message
  for fragment in fragments:
    assert fragment in message, message


def test_a_file_where_a_profile_goes_is_refused_before_any_step(tmp_path):
  # jax.profiler failed at the end of the traced steps (JaxRuntimeError).
  blocker = tmp_path / 'profile'
  blocker.write_text('')
  config = defaults.get_config('tiny')
  config.train.profile_steps = 1
  with pytest.raises(errors.UserError) as error:
    profiling.Profiler(
        profiling.profile_dir(str(tmp_path), 'profile'), config.train
    )
  _one_line(error, f'{blocker} is a file', 'train.profile_steps')
  # Further down, and for decoding's profile.
  with pytest.raises(errors.UserError) as error:
    profiling.check_folder(str(blocker / 'process_1'), 'decode.profile')
  _one_line(error, f'{blocker} is a file', 'leave decode.profile off')
  profiling.check_folder(str(tmp_path / 'new' / 'folder'), 'decode.profile')
  config.train.profile_steps = 0  # no profile: the file is no matter
  profiling.Profiler(str(blocker), config.train)


def test_a_vocabulary_path_that_is_a_directory(tmp_path):
  # IsADirectoryError.
  for kind in ('word', 'sentencepiece'):
    with pytest.raises(vocab.VocabError) as error:
      vocab.load_vocab(kind, str(tmp_path))
    _one_line(error, f'vocabulary file {tmp_path} is a directory')


@pytest.mark.parametrize(
    'field, value',
    [('train.num_steps', 10**20), ('train.num_steps', 2**31)]
    + [('data.num_eval', -(2**31))],
)
def test_counts_beyond_int32_are_refused(field, value):
  # 10**20 steps: OverflowError in batching.
  config = defaults.get_config('tiny')
  section, name = field.split('.')
  config[section][name] = value
  with pytest.raises(errors.ConfigError) as error:
    validation.resolve(config)
  _one_line(error, field, 'must be below 2**31')
  config[section][name] = 2**31 - 1
  validation.resolve(config)  # the largest is fine


def _write_config(path, body):
  path.write_text(
      'import ml_collections\n'
      'from nmt_jax.config import defaults\n\n'
      'def get_config():\n'
      + body
  )
  return str(path)


@pytest.mark.parametrize(
    'section',
    ['data', 'model', 'model.attention', 'train', 'decode', 'parallel'],
)
def test_a_config_without_a_section_of_the_defaults(tmp_path, section):
  # AttributeError, far from the config file.
  parent, _, leaf = section.rpartition('.')
  path = _write_config(
      tmp_path / 'no_section.py',
      '  config = defaults.get_config()\n'
      f'  del config{"." + parent if parent else ""}["{leaf}"]\n'
      '  return config\n',
  )
  with pytest.raises(errors.ConfigError) as error:
    cli_flags.load_config(path)
  _one_line(error, path, f'has no {section}', 'defaults.get_config()')
  path = _write_config(
      tmp_path / 'bare.py', '  return ml_collections.ConfigDict({"seed": 1})\n'
  )
  with pytest.raises(errors.ConfigError) as error:
    cli_flags.load_config(path)
  _one_line(error, 'has no data')


@pytest.mark.parametrize('name', ['passwd', 'config.json'])
def test_a_config_file_that_is_not_python(tmp_path, name):
  # "'NoneType' object has no attribute 'loader'".
  path = tmp_path / name
  path.write_text('root:x:0:0:root:/root:/bin/bash\n')
  with pytest.raises(errors.ConfigError) as error:
    cli_flags.load_config(str(path))
  _one_line(error, f'config file {path} is not a Python file', '.py')


def test_a_lock_file_holding_garbage_is_taken_over(tmp_path, caplog):
  # It said a run was starting there ("wait for it") when none existed.
  caplog.set_level(logging.WARNING)
  lock = tmp_path / locks.LOCK_FILE
  lock.write_text('garbage\x00 from a broken copy')
  with locks.locked(str(tmp_path)):
    assert json.loads(lock.read_text())['pid'] == os.getpid()
  assert not lock.exists()
  assert 'not a lock a run writes' in caplog.text
  # An empty lock of a moment ago is a run writing it: still refused.
  lock.write_text('')
  with pytest.raises(errors.CheckpointError) as error:
    with locks.locked(str(tmp_path)):
      pass
  _one_line(error, 'is being locked by another run that is starting')


def test_a_directory_named_lock(tmp_path):
  (tmp_path / locks.LOCK_FILE).mkdir()
  with pytest.raises(errors.CheckpointError) as error:
    with locks.locked(str(tmp_path)):
      pass
  _one_line(error, f'{tmp_path / locks.LOCK_FILE} is a directory', 'move it')


def test_a_record_file_that_is_a_directory(tmp_path):
  # It said "free some space".
  (tmp_path / 'metrics.jsonl').mkdir()
  with pytest.raises(errors.WriteError) as error:
    writers.MetricWriter(str(tmp_path))
  _one_line(error, 'metrics.jsonl: it is a directory', 'move it away')
  (tmp_path / 'eval_results.json').mkdir()
  with pytest.raises(errors.WriteError) as error:
    writers.write_json(str(tmp_path / 'eval_results.json'), {'bleu': 1.0})
  _one_line(error, 'eval_results.json: it is a directory')
  assert 'space' not in str(error.value)


def _cache(directory, train_ids):
  os.makedirs(directory)
  rows = [np.array(ids, np.int32) for ids in train_ids]
  for side in ('source', 'target'):
    dataset.Ragged.from_rows(rows).save(
        os.path.join(directory, f'train.{side}')
    )
    dataset.Ragged.from_rows(rows[:1]).save(
        os.path.join(directory, f'eval.{side}')
    )
  with open(os.path.join(directory, 'eval.text.json'), 'w') as f:
    json.dump({'source': ['a'], 'target': ['a']}, f)


def test_ids_outside_the_vocabulary_make_the_cache_damaged(tmp_path):
  # They ended in "loss became nan ... lower train.learning_rate".
  sizes = {'source': 10, 'target': 10}
  _cache(str(tmp_path / 'good'), [[4, 5, 9], [3]])
  assert len(encoding.load_cache(str(tmp_path / 'good'), sizes)['train']) == 2
  for name, ids in (('high', [[4, 10]]), ('negative', [[4, -1]])):
    _cache(str(tmp_path / name), ids)
    with pytest.raises(ValueError, match='ids outside the vocabulary of 10'):
      encoding.load_cache(str(tmp_path / name), sizes)


@pytest.mark.parametrize(
    'flag, fragment',
    [
        ('--config=/nonexistent.py', 'config file /nonexistent.py does not'),
        ('--threads=-3', '--threads=-3'),
        # A traceback (the fault battery's bench.compare_missing).
        ('--compare=/nonexistent.py', 'config file /nonexistent.py does not'),
    ],
)
def test_bench_flag_mistakes_are_one_line(flag, fragment):
  # Tracebacks: bench skipped main's flag checks.
  args = ['train', '--config=configs/global_general.py:tiny', flag]
  result = conftest.run_module('benchmarks.bench', *args, check=False)
  assert result.returncode != 0
  assert 'Traceback' not in result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and fragment in lines[0], result.stderr


# The fault battery's misleading lines (tests/faults/battery.py): the
# whole --help text before the error, two-line absl flag errors, a command
# not named.
@pytest.mark.parametrize(
    'module, args, fragment',
    [
        (
            'nmt_jax.main',
            ['--config=configs/global_general.py:tiny', '--workdir=W', 'x'],
            'unexpected arguments: x; every option is a flag',
        ),
        ('nmt_jax.average', ['--workdir=W', '--output=O', '--last=two'], 'two'),
        ('nmt_jax.average', ['--workdir=W'], 'Flag --output must have'),
        ('nmt_jax.average', ['--lst=2'], "Unknown command line flag 'lst'"),
        ('nmt_jax.sweep', [], 'give a command: python -m nmt_jax.sweep run'),
        ('nmt_jax.sweep', ['bogus'], "unknown command 'bogus'"),
        (
            'benchmarks.bench',
            ['bogus', '--config=configs/global_general.py:tiny'],
            "unknown command 'bogus'",
        ),
        (
            'nmt_jax.sweep',
            ['aggregate', '--root=/nonexistent'],
            '--root=/nonexistent is not a directory',
        ),
    ],
)
def test_command_line_mistakes_are_one_line(module, args, fragment):
  result = conftest.run_module(module, *args, check=False)
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and fragment in lines[0], result.stderr
  assert lines[0].startswith('error: ')


@pytest.mark.parametrize(
    'field, value, named',
    [
        # Named the derived decode.max_input_length before.
        ('data.max_length', 0, 'data.max_length=0'),
        ('data.max_length', 10**20, 'data.max_length='),
        # Accepted before: never checked.
        ('model.attention.max_source_length', -1, 'max_source_length=-1'),
        ('model.attention.max_source_length', 0, 'max_source_length=0'),
    ],
)
def test_a_field_is_named_before_the_fields_derived_from_it(
    field, value, named
):
  config = defaults.get_config('tiny')
  section, name = field.rsplit('.', 1)
  node = config
  for part in section.split('.'):
    node = node[part]
  node[name] = value
  with pytest.raises(errors.ConfigError) as error:
    validation.resolve(config)
  _one_line(error, named)


def test_a_zero_length_preset_is_refused_by_name():
  with pytest.raises(ValueError, match="'copy0': N is a sequence length"):
    defaults.get_config('copy0')


def test_a_grid_value_that_cannot_work_is_refused_before_any_run(tmp_path):
  # Each run failed in its turn, after the runs before it had trained.
  from nmt_jax.analysis import sweep_runs  # pylint: disable=g-import-not-at-top

  runs = sweep_runs.grid_runs(
      'configs/global_general.py:tiny', ['train.num_steps=2,-1'], {}
  )
  with pytest.raises(errors.ConfigError) as error:
    sweep_runs.check_overrides(runs)
  _one_line(error, 'run num_steps=-1', 'train.num_steps=-1 must be > 0')
  runs = sweep_runs.grid_runs(
      'configs/global_general.py:tiny', ['train.num_steps=a'], {}
  )
  with pytest.raises(errors.ConfigError) as error:
    sweep_runs.check_overrides(runs)
  _one_line(error, 'run num_steps=a', "'a'")


def test_paths_of_the_wrong_kind_are_named(tmp_path):
  # "cannot be written", "not writable (File exists)", "is missing".
  folder = tmp_path / 'folder'
  folder.mkdir()
  with pytest.raises(errors.UserError) as error:
    writers.check_writable(str(folder), 'output')
  _one_line(error, f'--output={folder} is a directory')
  from nmt_jax.workdir import folders  # pylint: disable=g-import-not-at-top

  a_file = tmp_path / 'file'
  a_file.write_text('')
  with pytest.raises(errors.UserError) as error:
    folders.prepare(str(a_file))
  _one_line(error, f'workdir {a_file} is a file, not a directory')
  for name in ('c.dev.de', 'c.dev.en', 'c.train.en'):
    (tmp_path / name).write_text('a b\n')
  (tmp_path / 'c.train.de').mkdir()
  config = defaults.get_config('tiny')
  config.data.name = f'text:{tmp_path}/c'
  from nmt_jax import data  # pylint: disable=g-import-not-at-top

  with pytest.raises(errors.UserError) as error:
    data.load_task(config.data, 0, str(tmp_path / 'w'), build_vocab=True)
  _one_line(error, 'c.train.de is a directory')
