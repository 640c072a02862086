"""Metric wrappers: sacreBLEU called the right way, RIBES edge cases."""

import re

import numpy as np
import pytest
from sacrebleu.metrics import BLEU

from nmt_jax.decoding import evaluation
from nmt_jax.decoding import loop
from nmt_jax.decoding import metrics


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


def test_bleu_by_source_length_scores_each_bin_on_its_own():
  refs = ['a b c d e f', 'b c d e a a', 'c c d a b e', 'e d c b a a']
  # Bin 1-10 translated perfectly, bin 11-20 not at all, 21-30 is empty.
  hyps = [refs[0], refs[1], 'x y z', 'x y z w']
  rows = metrics.bleu_by_source_length(hyps, refs, [0, 10, 11, 35])
  assert [r['source_length'] for r in rows] == ['1-10', '11-20', '31-40']
  assert [r['sentences'] for r in rows] == [2, 1, 1]
  assert [r['bleu'] for r in rows] == pytest.approx([100.0, 0.0, 0.0])
  # The corpus score is not a mean of the bins'.
  whole = metrics.translation_metrics(hyps, refs)['bleu']
  assert 0 < whole < 100
  rows = metrics.bleu_by_source_length(refs, refs, [1, 2, 3, 4], width=2)
  assert [(r['source_length'], r['sentences']) for r in rows] == [
      ('1-2', 2),
      ('3-4', 2),
  ]


def test_ribes_survives_degenerate_hypotheses():
  assert metrics.ribes([''], ['a b c']) == 0.0
  assert 0 <= metrics.ribes(['a'], ['b c']) <= 1


def test_ribes_of_exact_copies_is_nltks():
  # As docs/options.md ("Metrics") says: words nltk cannot align make an
  # exact copy score below 1; unique words score 1.
  assert metrics.ribes(['a b c'], ['a b c']) == 1.0
  assert metrics.ribes(['a', 'a a a'], ['a', 'a a a']) == 0.0
  assert metrics.ribes(['a', 'a b c'], ['a', 'a b c']) == 0.5


def test_window_metrics_average_sentences_then_steps():
  # Sentence 1: 2 steps attending 3 positions each of a 4-token source,
  # 8 scored; sentence 2: 4 steps attending 5 of 10, 16 scored.
  windows = loop.Windows(
      window=np.array([6.0, 20.0]),
      computed=np.array([16.0, 64.0]),
      steps=np.array([2.0, 4.0]),
  )
  result = evaluation.window_metrics(windows, np.array([4.0, 10.0]))
  expected = {
      'avg_window': (3 + 5) / 2,  # Shu: per sentence, then over sentences
      'avg_window_fraction': (3 / 4 + 5 / 10) / 2,
      'window_reduction': 1 - 4 / 7,  # ratio of means
      'window_reduction_per_sentence': 1 - (3 / 4 + 5 / 10) / 2,
      'avg_window_steps': 26 / 6,  # pooled over the 6 steps
      'avg_computed': (8 + 16) / 2,
      'avg_computed_fraction': (8 / 4 + 16 / 10) / 2,
      'avg_source_length': 7.0,
      'avg_steps': 3.0,
  }
  assert result == pytest.approx(expected)
  empty = evaluation.window_metrics(
      loop.Windows(*np.zeros((3, 0))), np.zeros(0)
  )
  assert all(np.isfinite(v) for v in empty.values())


def test_the_window_reduction_is_a_ratio_of_means_as_shu_and_nakayama_report():
  # Their 56%: a mean window of 10.7 positions against sources of 24.4.
  windows = loop.Windows(
      window=np.array([10.7 * 3]), computed=np.zeros(1), steps=np.array([3.0])
  )
  paper = evaluation.window_metrics(windows, np.array([24.4]))
  assert round(100 * paper['window_reduction']) == 56
  # Sources of 5, 20 and 35 tokens, windows of 4, 8 and 10 at every step:
  # the short sentence keeps 80% of its source and pulls the per-sentence
  # mean down; the ratio of means weighs positions, not sentences.
  lengths = np.array([5.0, 20.0, 35.0])
  steps = np.array([6.0, 21.0, 40.0])
  windows = loop.Windows(
      window=np.array([4.0, 8.0, 10.0]) * steps,
      computed=lengths * steps,
      steps=steps,
  )
  result = evaluation.window_metrics(windows, lengths)
  assert result['window_reduction'] == pytest.approx(1 - 22 / 60)
  assert result['window_reduction_per_sentence'] == pytest.approx(
      1 - (4 / 5 + 8 / 20 + 10 / 35) / 3
  )
  assert result['window_reduction'] > result['window_reduction_per_sentence']
  # Nothing pruned: no reduction by either measure.
  full = evaluation.window_metrics(
      loop.Windows(lengths * steps, lengths * steps, steps), lengths
  )
  assert full['window_reduction'] == pytest.approx(0.0, abs=1e-12)
  assert full['window_reduction_per_sentence'] == pytest.approx(0.0, abs=1e-12)


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


def test_tokenized_bleu_does_not_warn_of_tokenized_text(caplog):
  # The Moses step tokenizes on purpose; sacreBLEU warns of 100 lines or more
  # that end in a tokenized period unless told so.
  lines = [f'Datei {i} wurde gespeichert.' for i in range(120)]
  with caplog.at_level('WARNING', logger='sacrebleu'):
    metrics.translation_metrics(lines, lines, language='de')
  assert not [r for r in caplog.records if 'detokenize' in r.getMessage()]
  with caplog.at_level('WARNING', logger='sacrebleu'):  # the check can fail
    tokenized = [metrics.moses_tokenize(line, 'de') for line in lines]
    BLEU(tokenize='none').corpus_score(tokenized, [tokenized])
  assert [r for r in caplog.records if 'detokenize' in r.getMessage()]


def test_ribes_of_spaced_languages_reads_moses_tokens():
  # It read whitespace tokens of detokenized text ('day.' one word), as
  # RIBES.py and WAT do not.
  refs = ['It is a nice day.', 'He went to school, then home.']
  hyps = ['It is a nice day!', 'He went home, then to school.']
  english = metrics.translation_metrics(hyps, refs, language='en')
  tokens = [metrics.moses_tokenize(t) for t in hyps], [
      metrics.moses_tokenize(t) for t in refs
  ]
  assert english['ribes'] == metrics.ribes(*tokens)
  assert english['ribes'] != metrics.ribes(hyps, refs)


def test_chinese_and_japanese_are_scored_on_words_not_lines():
  # Unsegmented text is one "word" per line to 13a and to whitespace RIBES:
  # a near-perfect translation would score about 0.
  refs = ['我爱你。', '今天天气很好！', '他去了学校。']
  hyps = ['我爱你。', '今天天气很好。', '他去学校了。']
  chinese = metrics.translation_metrics(hyps, refs, language='zh')
  assert 'tok:zh' in chinese['bleu_signature']
  assert chinese['bleu_tokenized_signature'].startswith('zh|')
  assert 50 < chinese['bleu'] < 100 and 0.8 < chinese['ribes'] < 1
  assert metrics.ribes(hyps, refs) == 0.0  # what whitespace tokens give
  # Japanese needs MeCab for its word tokenizer; without it, characters.
  japanese = metrics.translation_metrics(hyps, refs, language='ja')
  assert japanese['bleu'] > 50 and japanese['ribes'] > 0.8
  assert re.search(r'tok:(ja-mecab|char)', japanese['bleu_signature'])
  # Korean separates words by spaces: without MeCab, 13a, not characters.
  korean = metrics.translation_metrics(
      ['나는 학교에 갔다'], ['나는 학교에 갔다'], language='ko'
  )
  assert re.search(r'tok:(ko-mecab|13a)', korean['bleu_signature'])
