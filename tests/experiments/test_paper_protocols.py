"""configs/sweeps/paper_protocols.py: the papers' comparisons, three seeds."""

import collections
import os
import shlex
import subprocess

import pytest

from nmt_jax.analysis import sweep_runs
from nmt_jax.system import errors
from tests import conftest

SWEEP = 'configs/sweeps/paper_protocols.py'


def _runs(arg):
  return {r.name: r for r in sweep_runs.load_sweep(f'{SWEEP}:{arg}', {})}


def test_every_compared_kind_has_three_seeds_and_every_combination_one():
  runs = _runs('/d')
  seeds = collections.defaultdict(set)
  for name, run in runs.items():
    kind, seed = name.split('/')
    assert seed == f'seed{run.overrides["seed"]}'
    seeds[kind].add(run.overrides['seed'])
  three = {k for k, s in seeds.items() if s == {1, 2, 3}}
  assert three == {
      'global_general', 'local_p', 'local_m', 'global_dot',
      'global_concat', 'global_location',
      'global_concat_rnnsearch', 'flexible_rnnsearch',
      'flexible_rnnsearch_finetune',
  }  # fmt: skip
  combinations = {k for k, s in seeds.items() if k.startswith('memory_')}
  assert len(combinations) == 8 and all(seeds[k] == {1} for k in combinations)
  # Flexible and its global baseline share the RNNsearch decoder.
  for kind in ('flexible_rnnsearch', 'global_concat_rnnsearch'):
    overrides = runs[f'{kind}/seed2'].overrides
    assert overrides['model.query'] == 'previous'
    assert overrides['model.input_feeding'] is False
  finetune = runs['flexible_rnnsearch_finetune/seed3'].overrides
  assert finetune['train.init_from'] == '{root}/flexible_rnnsearch/seed3'
  assert finetune['train.num_epochs'] == 1.0
  # Every run's config resolves (no misspelt field, no refused value).
  sweep_runs.check_overrides(list(runs.values()))


def test_the_chosen_memory_combination_gets_seeds_two_and_three():
  runs = _runs('/d,max_length=120,memory=sigmoid/softmax/renorm')
  chosen = [n for n in runs if n.startswith('memory_sigmoid_softmax_pe/')]
  assert sorted(chosen) == [
      f'memory_sigmoid_softmax_pe/seed{s}' for s in (1, 2, 3)
  ]
  assert runs['local_p/seed1'].overrides['data.max_length'] == 120


@pytest.mark.parametrize(
    'arg', ['', '/d,beam=3', '/d,memory=softmax/softmax', '/d,memory=a/b/c']
)
def test_a_wrong_argument_is_one_line(arg):
  with pytest.raises(errors.ConfigError, match='paper_protocols.py'):
    sweep_runs.load_sweep(f'{SWEEP}:{arg}', {})


def _script(*args, **env):
  return subprocess.run(
      ['bash', 'experiments/paper_protocols/run.sh', *args],
      cwd=conftest.ROOT,
      env=dict(os.environ, **env),
      capture_output=True,
      text=True,
      timeout=60,
  )


def test_the_script_trains_on_every_core_then_chooses_tau_and_tabulates(
    tmp_path,
):
  result = _script(
      str(tmp_path / 'runs'), '--dry-run', CORES='2', DATA='/d',
      CORPUS='help', SETTINGS='max_length=100',
  )  # fmt: skip
  assert result.returncode == 0, result.stderr
  commands = [shlex.split(line) for line in result.stdout.splitlines()[1:]]
  train = [c for c in commands if 'run' in c and 'nmt_jax.sweep' in c]
  assert [c[:3] for c in train] == [
      ['taskset', '-c', '0'],
      ['taskset', '-c', '1'],
  ]
  for command in train:
    assert f'--sweep={SWEEP}:/d,max_length=100' in command
  tau = [c for c in commands if 'tau' in c]
  assert [c[c.index('tau') + 1] for c in tau] == [
      f'--workdir={tmp_path}/runs/flexible_rnnsearch_finetune/seed{s}'
      for s in (1, 2, 3)
  ]
  assert all('--select_on_dev' in c for c in tau)
  tables = [c for c in commands if 'aggregate' in c]
  assert [c[-2] for c in tables] == [
      f'--paired_with={r}'
      for r in ('global_general', 'global_concat', 'flexible_rnnsearch')
  ]


def test_the_script_without_its_data_is_one_line(tmp_path):
  result = _script(str(tmp_path), CORPUS='gettext')
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
      'error: set DATA to the folder parity prepare wrote (pieces.train.en,'
      ' ...)'
  ]
