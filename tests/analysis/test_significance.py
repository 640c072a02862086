"""Paired bootstrap resampling between runs' evaluations."""

import json

import pytest

from nmt_jax.analysis import significance
from nmt_jax.system import errors

REFERENCES = [f'the cat number {i} sat on mat {i % 7}' for i in range(60)]


def _workdir(path, hypotheses, references=REFERENCES):
  path.mkdir()
  (path / 'config.json').write_text(json.dumps({'data': {'target_lang': 'en'}}))
  (path / 'eval_hypotheses.txt').write_text(
      ''.join(h + '\n' for h in hypotheses)
  )
  (path / 'eval_references.txt').write_text(
      ''.join(r + '\n' for r in references)
  )
  return str(path)


def test_a_better_run_is_ahead_and_a_copy_is_not(tmp_path):
  half = [r if i % 2 else 'a dog' for i, r in enumerate(REFERENCES)]
  most = [r if i % 5 else 'a dog' for i, r in enumerate(REFERENCES)]
  base = _workdir(tmp_path / 'base', half)
  better = _workdir(tmp_path / 'better', most)
  near = list(half)
  near[0] = REFERENCES[0]  # one sentence better
  copy = _workdir(tmp_path / 'copy', half)
  near = _workdir(tmp_path / 'near', near)
  rows = significance.paired_bleu(
      [base, better, copy, near], base, 'en', ['base', 'better', 'copy', 'near']
  )
  assert [r['run'] for r in rows] == ['baseline', 'better', 'copy', 'near']
  assert rows[0]['p_value'] is None and rows[0]['diff'] == 0
  assert rows[1]['diff'] > 10 and rows[1]['p_value'] < 0.01
  assert rows[2]['diff'] == 0 and rows[2]['p_value'] == 1.0
  assert 0 < rows[3]['diff'] < 5 and rows[3]['p_value'] > 0.05
  for row in rows:
    assert 0 < row['ci95'] < 20
    assert abs(row['mean'] - row['bleu']) < row['ci95']
  # The same files give the same figures (sacreBLEU's fixed seed).
  again = significance.paired_bleu([base, better], base, 'en', ['b', 'better'])
  assert again == rows[:2]
  table = significance.markdown(rows, 'base').splitlines()
  assert table[0].startswith('| run | BLEU |') and 'against base' in table[0]
  assert table[2].startswith('| base |') and table[3].startswith('| better |')


def test_runs_without_references_or_on_other_ones_are_refused(tmp_path):
  base = _workdir(tmp_path / 'base', REFERENCES)
  other = _workdir(tmp_path / 'other', REFERENCES, REFERENCES[::-1])
  with pytest.raises(errors.ConfigError, match='other references than'):
    significance.paired_bleu([base, other], base, 'en')
  (tmp_path / 'base' / 'eval_references.txt').unlink()
  with pytest.raises(errors.ConfigError, match='has no eval_references.txt'):
    significance.paired_bleu([base], base, 'en')
