"""The fault battery's classifier, its workdir check, and one case run."""

import json
import os

from benchmarks import fault_battery
from tests import conftest

SOURCES = frozenset({'train.py', 'main.py'})
ERROR = 'error: config: train.num_steps=-1 must be > 0; give a positive value'
LOG = 'I1128 13:30:57.349434 140597910092672 train.py:220] model: 6,538'


def _classify(returncode, stderr, expect='refuse', **kwargs):
  return fault_battery.classify(
      expect,
      r'^error: .*num_steps',
      returncode,
      kwargs.pop('stdout', ''),
      stderr,
      sources=SOURCES,
      **kwargs,
  )[0]


def test_each_class_from_synthetic_outcomes():
  assert _classify(2, ERROR) == 'clean'
  assert _classify(2, f'{LOG}\n{ERROR}\n') == 'clean'
  traceback = 'Traceback (most recent call last):\n  File "x"\nValueError: x'
  assert _classify(1, traceback) == 'traceback'
  assert _classify(1, "KeyError: 'num_steps'") == 'traceback'
  assert _classify(0, '', stdout="ValueError('bad')") == 'traceback'
  assert _classify(0, ERROR) == 'accepted'
  assert _classify(2, 'error: something else') == 'misleading'
  assert _classify(2, f'{ERROR}\n{ERROR}') == 'misleading'  # two lines
  noise = 'W1128 13:31:00.1 1 checkpoint_manager.py:9] orbax says'
  assert _classify(2, f'{noise}\n{ERROR}') == 'misleading'
  assert _classify(2, f'usage: a wall of help\n{ERROR}') == 'misleading'
  assert _classify(None, '', timed_out=True) == 'misleading'
  assert _classify(2, ERROR, lost=['w/config.json']) == 'data loss'
  assert _classify(0, LOG, expect='succeed') == 'handled'
  assert _classify(0, '', expect='succeed', problem='no output') == 'misleading'
  assert _classify(2, ERROR, expect='succeed') == 'misleading'


def test_lost_files(tmp_path):
  def put(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)

  put(tmp_path / 'config.json', '{}')
  put(tmp_path / 'metrics.jsonl', '{"step": 1}\n')
  put(tmp_path / 'checkpoints' / '6' / 'state' / 'd' / 'x', 'arrays')
  put(tmp_path / 'eval_results.json', '{}')
  before = fault_battery.snapshot(tmp_path)
  # Moved intact aside, appended to, rewritten where allowed: nothing lost.
  os.renames(tmp_path / 'checkpoints' / '6', tmp_path / 'checkpoints' / 'x')
  os.renames(tmp_path / 'checkpoints' / 'x', tmp_path / 'checkpoints/corrupt/6')
  with open(tmp_path / 'metrics.jsonl', 'a') as f:
    f.write('{"step": 2}\n')
  put(tmp_path / 'eval_results.json', '{"bleu": 1}')
  writes = ('eval_*',)
  assert fault_battery.lost_files(before, str(tmp_path), writes) == []
  # Changed, truncated, deleted: lost.
  put(tmp_path / 'metrics.jsonl', '{"step": 2}\n')
  (tmp_path / 'config.json').unlink()
  lost = fault_battery.lost_files(before, str(tmp_path), writes)
  assert sorted(lost) == ['config.json', 'metrics.jsonl']


def test_a_cheap_case_runs_and_is_clean(tmp_path):
  result = conftest.run_module(
      'benchmarks.fault_battery',
      f'--output={tmp_path}/out',
      f'--json={tmp_path}/battery.json',
      r'--only=^config\.train\.num_steps\.negative$',
      timeout=120,
  )
  records = json.loads((tmp_path / 'battery.json').read_text())
  assert [(r['name'], r['class']) for r in records] == [
      ('config.train.num_steps.negative', 'clean')
  ], result.stdout
  assert records[0]['exit'] == 2
  assert 'num_steps' in records[0]['stderr_tail'][-1]
