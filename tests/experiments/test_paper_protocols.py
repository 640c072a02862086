"""configs/sweeps/paper_protocols.py: the papers' comparisons, three seeds."""

import collections

import pytest

from nmt_jax.analysis import sweep_runs
from nmt_jax.system import errors

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
