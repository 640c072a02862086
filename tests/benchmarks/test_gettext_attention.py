"""benchmarks/gettext_attention.sh (--dry-run) and its sweep file."""

import os
import shlex
import subprocess

from nmt_jax.analysis import sweep_runs
from tests import conftest

ROOT = conftest.ROOT
SCRIPT = 'benchmarks/gettext_attention.sh'


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
  records = os.path.join(ROOT, 'benchmarks/runs/cpu/by_hand/gettext_attention')
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
  assert commands[:4] == [
      ['mkdir', '-p', f'{kept}/local_p'],
      ['cp', f'{run}/local_p/config.json', f'{kept}/local_p/'],
      ['cp', f'{run}/local_p/eval_results.json', f'{kept}/local_p/'],
      ['cp', f'{run}/local_p/eval_hypotheses.txt', f'{kept}/local_p/'],
  ]
  assert len(commands) == 5
  assert commands[4][:2] == ['cp', f'{run}/trained_decode.json']
  assert commands[4][2].startswith(f'{kept}/trained_decode_20')


def test_missing_root_or_data_is_one_line():
  result = _script()
  assert result.returncode == 2
  assert result.stderr == (
      'error: give the directory for the runs:'
      ' benchmarks/gettext_attention.sh ROOT\n'
  )
  result = _script('/tmp/x', DATA='/nonexistent')
  assert result.returncode == 2
  assert '/nonexistent/pieces.train.en not found' in result.stderr
