"""Sweep files that are not what `sweep run` needs: one line each, nothing run."""

import pytest

from nmt_jax.analysis import sweep_runs
from nmt_jax.system import errors
from tests import conftest

GOOD = "{'name': 'a', 'config': 'c.py', 'overrides': {}}"
CASES = [
    ('raise RuntimeError("boom")', 'fails to load: RuntimeError: boom'),
    ('def get_sweep(arg=None)\n  return []', 'line 1: syntax error'),
    ('x = 1', 'has no get_sweep()'),
    ('def get_sweep(arg=None):\n  return None', 'returned a NoneType'),
    (
        'def get_sweep(arg=None):\n  raise RuntimeError("no")',
        'failed with RuntimeError: no',
    ),
    (
        "def get_sweep(arg=None):\n  return [{'name': 'a'}]",
        "run 1 needs 'config'",
    ),
    (
        (
            "def get_sweep(arg=None):\n  return [{'name': 'a', 'config':"
            " 'c.py', 'overrides': ['x=1']}]"
        ),
        "'overrides' is a list",
    ),
    ("def get_sweep(arg=None):\n  return ['a']", 'is a str, not a dict'),
]
# '' is refused as a missing name; the others would leave the root.
ESCAPES = ['../../escape', '/abs/run', 'a/../../b', '.', 'a//b', '']


@pytest.mark.parametrize('text, fragment', CASES)
def test_a_broken_sweep_file_is_one_config_error(tmp_path, text, fragment):
  path = tmp_path / 'sweep.py'
  path.write_text(text + '\n')
  with pytest.raises(errors.ConfigError, match=f'^sweep file {path}') as e:
    sweep_runs.load_sweep(str(path), {})
  assert fragment in str(e.value) and '\n' not in str(e.value)


@pytest.mark.parametrize('name', ESCAPES)
def test_run_names_stay_inside_the_root(tmp_path, name):
  path = tmp_path / 'sweep.py'
  path.write_text(
      'def get_sweep(arg=None):\n'
      f'  return [{GOOD}, {{"name": {name!r}, "config": "c.py"}}]\n'
  )
  reason = "needs 'name'" if not name else 'outside --root'
  with pytest.raises(errors.ConfigError, match=reason):
    sweep_runs.load_sweep(str(path), {})


def test_on_the_command_line_a_root_that_is_a_file_is_one_line(tmp_path):
  root = tmp_path / 'file'
  root.write_text('kept')
  sweep = tmp_path / 'sweep.py'
  sweep.write_text('x = 1\n')
  for args, fragment in (
      ([f'--root={root}', '--sweep=configs/sweeps/britz_copy.py'], 'is a file'),
      ([f'--root={tmp_path}/r', f'--sweep={sweep}'], 'has no get_sweep()'),
  ):
    result = conftest.run_module('nmt_jax.sweep', 'run', *args, check=False)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith('error: ') and fragment in line
  assert root.read_text() == 'kept'
