"""Metric wrappers: sacreBLEU called the right way, RIBES edge cases."""

import numpy as np

from nmt_jax import evaluation
from nmt_jax import metrics


def test_perfect_and_partial_translations():
  refs = ['a b c d e f', 'b c d e a a', 'c c d a b e']
  perfect = metrics.translation_metrics(refs, refs)
  for key in ('bleu', 'bleu_tokenized', 'chrf'):
    assert abs(perfect[key] - 100.0) < 1e-6, key
  assert abs(perfect['ribes'] - 1.0) < 1e-9
  assert (
      'tok:13a' in perfect['bleu_signature']
      and 'tok:none' in perfect['bleu_tokenized_signature']
  )
  partial = metrics.translation_metrics(['a b c d e f', 'b c d', 'x'], refs)
  # would be 0.0 if references were passed flat
  assert 0 < partial['bleu'] < 100


def test_ribes_survives_degenerate_hypotheses():
  assert metrics.ribes([''], ['a b c']) == 0.0
  assert 0 <= metrics.ribes(['a'], ['b c']) <= 1


def test_window_metrics():
  result = evaluation.window_metrics(
      {'window_sum': 30.0, 'window_count': 10.0, 'window_fraction_sum': 5.0}
  )
  assert result == {'avg_window': 3.0, 'avg_window_fraction': 0.5}
  assert np.isfinite(
      evaluation.window_metrics(
          {'window_sum': 0.0, 'window_count': 0.0, 'window_fraction_sum': 0.0}
      )['avg_window']
  )


def test_tokenized_bleu_scores_moses_tokens_of_detokenized_text():
  # Punctuation glued to words: whitespace-split BLEU misses the match, Moses tokens find it.
  refs = ['Das ist gut, sagte er.', 'Wir gehen nach Hause!']
  hyps = ['Das ist gut , sagte er .', 'Wir gehen nach Hause!']
  result = metrics.translation_metrics(hyps, refs, language='de')
  assert abs(result['bleu_tokenized'] - 100.0) < 1e-6
  assert (
      result['bleu_tokenized_signature'].startswith('moses:de|')
      and 'tok:none' in result['bleu_tokenized_signature']
  )
  import sacrebleu  # pylint: disable=g-import-not-at-top

  assert sacrebleu.BLEU(tokenize='none').corpus_score(hyps, [refs]).score < 90
  # symbol tasks are unchanged
  assert metrics.moses_tokenize('a b c d') == 'a b c d'
