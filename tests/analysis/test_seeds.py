"""Seed groups in `sweep aggregate`: spread over seeds and a comparison's outcome."""

import json
import math
import statistics

import pytest
from sacrebleu.significance import PairedTest

from nmt_jax.analysis import runs as runs_lib
from nmt_jax.analysis import seeds
from nmt_jax.decoding import metrics
from nmt_jax.system import errors
from tests import conftest

REFERENCES = [
    'the cat sat on the mat',
    'a dog ran in the park today',
    'we read the long book',
    'she opened the old door',
]


def test_names_give_group_and_seed():
  assert seeds.seed_of('local_p/seed2') == ('local_p', 2)
  assert seeds.seed_of('memory_k64_pe_seed13') == ('memory_k64_pe', 13)
  assert seeds.seed_of('L100/memory-seed1') == ('L100/memory', 1)
  assert seeds.seed_of('global_general') is None
  assert seeds.seed_of('seed1') is None


def test_the_interval_is_students_t_over_the_seed_differences():
  # [1, 2, 3]: mean 2, sd 1, t(0.975, 2 df) = 4.3027 -> half-width 2.484.
  mean, low, high = seeds.interval([1.0, 2.0, 3.0])
  assert mean == 2.0
  assert (low, high) == pytest.approx((2 - 2.48414, 2 + 2.48414), abs=1e-4)
  assert seeds.outcome(low, high) == 'undetermined'
  assert seeds.outcome(*seeds.interval([1.0, 1.1, 0.9])[1:]) == 'better'
  assert seeds.outcome(*seeds.interval([-1.0, -1.1, -0.9])[1:]) == 'worse'
  assert seeds.outcome(*seeds.interval([0.1, -0.1, 0.05])[1:]) == 'level'
  # One seed says nothing of the spread.
  assert seeds.interval([2.0])[1:] == (-math.inf, math.inf)
  assert seeds.outcome(*seeds.interval([2.0])[1:]) == 'undetermined'


def _workdir(root, name, seed, hypotheses):
  workdir = root / name / f'seed{seed}'
  workdir.mkdir(parents=True)
  (workdir / 'config.json').write_text(
      json.dumps({
          'seed': seed,
          'data': {'name': 'text:x', 'target_lang': 'en'},
          'model': {'attention': {'kind': 'global', 'score': 'general'}},
      })
  )
  (workdir / 'metrics.jsonl').write_text(
      json.dumps({'step': 2, 'split': 'valid', 'bleu': 10.0 + seed}) + '\n'
  )
  (workdir / 'eval_hypotheses.txt').write_text('\n'.join(hypotheses) + '\n')
  (workdir / 'eval_references.txt').write_text('\n'.join(REFERENCES) + '\n')
  bleu = metrics.bleu_metric('en').corpus_score(hypotheses, [REFERENCES]).score
  (workdir / 'eval_results.json').write_text(
      json.dumps({'bleu': bleu, 'chrf': 50.0 + seed, 'window_reduction': 0.5})
  )
  return str(workdir), bleu


def test_groups_are_compared_seed_for_seed(tmp_path):
  worse = [
      'the cat sat on a mat',
      'a dog ran in a park',
      'we read a book',
      'she opened a door',
  ]
  hypotheses = {
      'base': [REFERENCES, REFERENCES[:3] + worse[3:], REFERENCES[:2] + worse[2:]],
      'other': [worse, worse[:1] + REFERENCES[1:2] + worse[2:], worse[:2] + REFERENCES[2:]],
  }  # fmt: skip
  bleu = {}
  for name, per_seed in hypotheses.items():
    for seed, h in enumerate(per_seed, 1):
      bleu[name, seed] = _workdir(tmp_path, name, seed, h)
  # A run without seeds and an unevaluated seed stay out of the groups.
  _workdir(tmp_path, 'alone', 0, REFERENCES)
  (tmp_path / 'alone' / 'seed0').rename(tmp_path / 'single')
  workdirs = runs_lib.find_workdirs(str(tmp_path))
  rows = runs_lib.results_table(workdirs, root=str(tmp_path))
  table = seeds.seed_rows(rows, workdirs, reference='base')
  assert [r['group'] for r in table] == ['base', 'other']
  base, other = table
  assert base['seeds'] == other['seeds'] == [1, 2, 3]
  base_bleu = [bleu['base', s][1] for s in (1, 2, 3)]
  assert base['bleu'] == pytest.approx(statistics.fmean(base_bleu))
  assert base['bleu_sd'] == pytest.approx(statistics.stdev(base_bleu))
  assert base['chrf'] == pytest.approx(52.0)
  assert base['best_valid_bleu'] == pytest.approx(12.0)
  diffs = [bleu['other', s][1] - bleu['base', s][1] for s in (1, 2, 3)]
  assert [p['diff'] for p in other['per_seed']] == pytest.approx(diffs)
  mean, low, high = seeds.interval(diffs)
  assert (other['diff'], other['ci_low'], other['ci_high']) == (mean, low, high)
  assert other['outcome'] == seeds.outcome(low, high)
  # Each seed's p-value is sacreBLEU's paired bootstrap of that pair.
  seed1 = PairedTest(
      [('base', hypotheses['base'][0]), ('other', hypotheses['other'][0])],
      {'BLEU': metrics.bleu_metric('en')},
      [REFERENCES],
      test_type='bs',
      n_samples=1000,
  )()[1]['BLEU'][1].p_value
  assert other['per_seed'][0]['p_value'] == pytest.approx(seed1)
  text = seeds.table(rows, workdirs, 'base')
  assert '| other | 1,2,3 |' in text and other['outcome'] in text
  with pytest.raises(errors.ConfigError, match='names no group'):
    seeds.seed_rows(rows, workdirs, reference='single')


def test_aggregate_prints_the_seed_table(tmp_path):
  for seed in (1, 2):
    _workdir(tmp_path, 'a', seed, REFERENCES)
    _workdir(tmp_path, 'b', seed, REFERENCES[:2] + ['x y', 'z w'])
  out = conftest.run_module(
      'nmt_jax.sweep', 'aggregate', f'--root={tmp_path}', '--paired_with=a'
  ).stdout
  (line,) = [x for x in out.splitlines() if x.startswith('| b |')]
  # Two seeds, the same difference each time: an interval of zero width.
  assert line.endswith('| worse |')
  assert 'Seeds (runs NAME/seedN)' in out
