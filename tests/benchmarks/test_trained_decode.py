"""benchmarks/trained_decode.py: trained runs timed against a reference."""

import pytest

from benchmarks import trained_decode
from nmt_jax.system import errors


def test_pair_figures_are_per_round_ratios():
  timed = {
      'this': {
          'weights': 'w',
          'greedy': {
              'ms_per_sentence': 2.0,
              'ms_per_sentence_runs': [2.0, 1.0, 4.0],
              'cpu_ms_per_sentence_runs': [4.0, 2.0, 8.0],
              'avg_window': 3.0,
              'avg_window_fraction': 0.5,
              'avg_computed': 3.5,
          },
          'beam3': {'ms_per_sentence': 1.0},  # the reference has no beam3
      },
      'reference': {
          'weights': 'r',
          'greedy': {
              'ms_per_sentence': 3.0,
              'ms_per_sentence_runs': [3.0, 3.0, 4.0],
              'cpu_ms_per_sentence_runs': [3.0, 3.0, 4.0],
          },
      },
  }
  figures = trained_decode.pair_figures(timed)
  assert set(figures) == {'greedy'}
  greedy = figures['greedy']
  # Rounds pair by index: 3/2, 3/1, 4/4 -- not a ratio of the medians.
  assert greedy['speedup'] == {'median': 1.5, 'min': 1.0, 'max': 3.0}
  assert greedy['speedup_per_cpu_s'] == {'median': 0.75, 'min': 0.5, 'max': 1.5}
  assert greedy['reference_ms_per_sentence'] == 3.0
  assert greedy['avg_window'] == 3.0


def test_a_missing_run_or_root_is_one_clear_error(tmp_path):
  (tmp_path / 'untrained').mkdir()
  (tmp_path / 'untrained' / 'config.json').write_text('{}')  # no checkpoint
  with pytest.raises(errors.ConfigError, match='nope has no trained workdir'):
    trained_decode.bench(str(tmp_path), 'nope', None, ['greedy'], 1, 2)
  with pytest.raises(
      errors.ConfigError, match='runs with checkpoints there: none'
  ):
    trained_decode.bench(str(tmp_path), 'x', ['untrained'], ['greedy'], 1, 2)
  with pytest.raises(errors.ConfigError, match='is not a directory'):
    trained_decode.bench(str(tmp_path / 'no'), 'x', None, ['greedy'], 1, 1)
