"""experiments/gettext_attention/run.sh (--dry-run) and its sweep file."""

import json
import os
import shlex
import subprocess

from experiments import records
from nmt_jax.analysis import sweep_runs
from tests import conftest

ROOT = conftest.ROOT
SCRIPT = 'experiments/gettext_attention/run.sh'


def _script(*args, **env):
  return subprocess.run(
      ['bash', SCRIPT, *args],
      cwd=ROOT,
      env=dict(os.environ, **env),
      capture_output=True,
      text=True,
      timeout=60,
  )


def test_the_sweep_trains_on_every_core_and_the_rest_follows(tmp_path):
  result = _script(str(tmp_path / 'runs'), '--dry-run', CORES='2', DATA='/d')
  assert result.returncode == 0, result.stderr
  first, *lines = result.stdout.splitlines()
  assert first == f'cd {shlex.quote(ROOT)}'
  commands = [shlex.split(line) for line in lines]
  train = [c for c in commands if c[5:7] == ['nmt_jax.sweep', 'run']]
  assert [c[:3] for c in train] == [
      ['taskset', '-c', '0'],
      ['taskset', '-c', '1'],
  ]
  # Each process goes through the whole sweep, taking the runs no other
  # holds (their locks).
  sweep = 'configs/sweeps/gettext_attention.py:/d'
  assert len(sweep_runs.load_sweep(sweep, {})) == 10
  for command in train:
    assert command[7:] == [f'--sweep={sweep}', f'--root={tmp_path}/runs']
  tau = [c for c in commands if 'tau' in c]
  assert [c[c.index('tau') + 1] for c in tau] == [
      f'--workdir={tmp_path}/runs/flexible',
      f'--workdir={tmp_path}/runs/flexible_finetune',
  ]
  decode = next(c for c in commands if 'benchmarks.trained_decode' in c)
  assert decode[:3] == ['taskset', '-c', '0'] and '--threads=1' in decode
  assert '--reference=global_general' in decode
  records = os.path.join(ROOT, 'experiments/gettext_attention/records')
  assert commands[-1][2:5] == [
      'nmt_jax.sweep',
      'aggregate',
      f'--root={records}',
  ]
  assert '--by_length' in commands[-1]
  assert '--paired_with=global_general' in commands[-1]


def test_the_records_keep_every_evaluated_runs_small_files(tmp_path):
  for name, files in [
      ('local_p', ['config.json', 'eval_results.json', 'eval_hypotheses.txt']),
      ('memory_k32', ['config.json', 'metrics.jsonl']),  # not evaluated yet
  ]:
    os.makedirs(tmp_path / 'runs' / name / 'checkpoints')
    for file in files:
      (tmp_path / 'runs' / name / file).write_text('{}')
  (tmp_path / 'runs' / 'trained_decode.json').write_text('{}')
  result = _script(
      str(tmp_path / 'runs'),
      '--dry-run',
      DATA='/d',
      PARTS='record',
      RECORDS='kept',  # relative to where the script was started
  )
  assert result.returncode == 0, result.stderr
  commands = [shlex.split(line) for line in result.stdout.splitlines()[1:]]
  kept, run = f'{ROOT}/kept', f'{tmp_path}/runs'
  assert len(commands) == 2
  assert commands[0][1:] == [
      '-m',
      'experiments.records',
      f'{run}/local_p',
      f'{kept}/local_p',
  ]
  assert commands[1][:2] == ['cp', f'{run}/trained_decode.json']
  assert commands[1][2].startswith(f'{kept}/trained_decode_20')


def test_a_records_copy_keeps_one_training_line_per_validation(tmp_path):
  run, kept = tmp_path / 'run', tmp_path / 'kept' / 'run'
  os.makedirs(run / 'checkpoints' / '4')
  (run / 'config.json').write_text('{"train": {}}')
  (run / 'eval_results.json').write_text('{"bleu": 1.0}')
  lines = [
      {'step': 1, 'split': 'train', 'loss': 3.0},
      {'step': 2, 'split': 'train', 'loss': 2.0},
      {'step': 2, 'split': 'valid', 'bleu': 5.0},
      {'step': 3, 'split': 'train', 'loss': 1.5},
      {'step': 4, 'split': 'train', 'loss': 1.0},
      {'step': 4, 'split': 'valid', 'bleu': 9.0},
      {'step': 4, 'split': 'eval', 'bleu': 8.0},
  ]
  (run / 'metrics.jsonl').write_text(
      ''.join(json.dumps(x) + '\n' for x in lines)
  )
  assert records.main([str(run), str(kept)]) == 0
  assert sorted(os.listdir(kept)) == [
      'config.json',
      'eval_results.json',
      'metrics.jsonl',
  ]
  read = [
      json.loads(x)
      for x in (kept / 'metrics.jsonl').read_text().split('\n')
      if x
  ]
  assert [(r['step'], r['split']) for r in read] == [
      (2, 'train'),
      (2, 'valid'),
      (4, 'train'),
      (4, 'valid'),
      (4, 'eval'),
  ]
  assert (kept / 'eval_results.json').read_text() == '{"bleu": 1.0}'
  assert records.main([str(tmp_path / 'nothing'), str(kept)]) == 2


def test_missing_root_or_data_is_one_line():
  result = _script()
  assert result.returncode == 2
  assert result.stderr == (
      'error: give the directory for the runs:'
      ' experiments/gettext_attention/run.sh ROOT\n'
  )
  result = _script('/tmp/x', DATA='/nonexistent')
  assert result.returncode == 2
  assert '/nonexistent/pieces.train.en not found' in result.stderr
