"""The fault battery's classifier, its workdir check, one case run each way.

In the default suite (the battery's cases are marked `battery`): synthetic
outcomes of every class, lost_files, one cheap case run as a process of its
own and forked, and the bookkeeping of the case files and folded.py.
"""

import ast
import collections
import os

from tests import conftest
from tests.faults import battery
from tests.faults import cases_command_line
from tests.faults import cases_modes
from tests.faults import cases_signals
from tests.faults import cases_tools
from tests.faults import cases_workdir
from tests.faults import folded

SOURCES = frozenset({'train.py', 'main.py'})
ERROR = 'error: config: train.num_steps=-1 must be > 0; give a positive value'
LOG = 'I1128 13:30:57.349434 140597910092672 train.py:220] model: 6,538'


def _classify(returncode, stderr, expect='refuse', **kwargs):
  return battery.classify(
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
  before = battery.snapshot(tmp_path)
  # Moved intact aside, appended to, rewritten where allowed: nothing lost.
  os.renames(tmp_path / 'checkpoints' / '6', tmp_path / 'checkpoints' / 'x')
  os.renames(tmp_path / 'checkpoints' / 'x', tmp_path / 'checkpoints/corrupt/6')
  with open(tmp_path / 'metrics.jsonl', 'a') as f:
    f.write('{"step": 2}\n')
  put(tmp_path / 'eval_results.json', '{"bleu": 1}')
  writes = ('eval_*',)
  assert battery.lost_files(before, str(tmp_path), writes) == []
  # Changed, truncated, deleted: lost.
  put(tmp_path / 'metrics.jsonl', '{"step": 2}\n')
  (tmp_path / 'config.json').unlink()
  lost = battery.lost_files(before, str(tmp_path), writes)
  assert sorted(lost) == ['config.json', 'metrics.jsonl']


CASE_FILES = (
    cases_command_line,
    cases_modes,
    cases_workdir,
    cases_tools,
    cases_signals,
)


def _cheap_case(name='config.train.num_steps.negative'):
  (case,) = [c for c in cases_command_line.cases() if c.name == name]
  return case


def test_a_cheap_case_is_clean_as_a_process_and_forked(tmp_path):
  case = _cheap_case()
  fixtures = battery.Fixtures(str(tmp_path), conftest.subprocess_env())
  alone = battery.run_case(case, str(tmp_path / 'alone'), fixtures)
  (forked,) = battery.run_forked([(case, str(tmp_path / 'forked'))], fixtures)
  for record in (alone, forked):
    assert record['class'] == 'clean', battery.failure(record)
    assert record['exit'] == 2
    assert 'num_steps' in record['stderr_tail'][-1]
  assert alone['stderr_tail'] == forked['stderr_tail']


def test_a_failed_case_shows_its_reason_and_stderr(tmp_path):
  case = _cheap_case()
  case.pattern = '^error: .*something else'
  fixtures = battery.Fixtures(str(tmp_path), conftest.subprocess_env())
  (record,) = battery.run_forked([(case, str(tmp_path / 'case'))], fixtures)
  assert record['class'] != battery.expected_class(record)
  message = battery.failure(record)
  assert 'misleading, not clean: the last line does not match' in message
  assert 'train.num_steps=-1' in message  # the stderr tail
  assert '--config.train.num_steps=-1' in message  # the command


def test_each_case_is_in_one_file_under_a_name_of_its_own():
  names = [case.name for module in CASE_FILES for case in module.cases()]
  assert len(names) == len(set(names))
  # The forked ones are the command line's edge, and only those.
  for module in CASE_FILES:
    forks = {battery.can_fork(case) for case in module.cases()}
    assert forks == {module is cases_command_line}, module.__name__
  categories = collections.defaultdict(set)
  for module in CASE_FILES:
    for case in module.cases():
      categories[case.category].add(module.__name__)
  assert all(len(files) == 1 for files in categories.values()), categories


def test_each_folded_case_names_a_test_that_exists():
  tests = set(folded.FOLDED.values()) | set(folded.FOLDED_PATTERNS.values())
  missing = []
  for test in sorted(tests):
    path, function = test.split('::')
    with open(os.path.join(conftest.ROOT, path), encoding='utf-8') as f:
      tree = ast.parse(f.read())
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    if function not in defined:
      missing.append(test)
  assert not missing
  live = {case.name for module in CASE_FILES for case in module.cases()}
  assert not live & set(folded.FOLDED)
