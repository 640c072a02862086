"""experiments/paper_protocols/verdicts.py: the README's rule on records."""

import json

from experiments.paper_protocols import verdicts
from nmt_jax.decoding import metrics

REFERENCES = [
    'the cat sat on the mat',
    'a dog ran in the park today',
    'we read the long book',
    'she opened the old door',
]
WORSE = ['the cat sat on a mat', 'a dog ran in a park', 'we read a book',
         'she opened a door']  # fmt: skip


def _run(root, name, seed, hypotheses, best_valid=10.0, selection=None):
  workdir = root / name / f'seed{seed}'
  workdir.mkdir(parents=True)
  (workdir / 'config.json').write_text(
      json.dumps({'seed': seed, 'data': {'target_lang': 'en'}})
  )
  (workdir / 'metrics.jsonl').write_text(
      json.dumps({'step': 2, 'split': 'valid', 'bleu': best_valid}) + '\n'
  )
  (workdir / 'eval_hypotheses.txt').write_text('\n'.join(hypotheses) + '\n')
  (workdir / 'eval_references.txt').write_text('\n'.join(REFERENCES) + '\n')
  bleu = metrics.bleu_metric('en').corpus_score(hypotheses, [REFERENCES]).score
  (workdir / 'eval_results.json').write_text(json.dumps({'bleu': bleu}))
  if selection is not None:
    (workdir / 'tau_sweep.json').write_text(
        json.dumps({'rows': [], 'selections': [{'test': selection}]})
    )
  return bleu


def test_each_claim_follows_the_rule(tmp_path):
  corpus = tmp_path / 'records' / 'gettext'
  for seed in (1, 2, 3):
    # local_p better than global_general by the same BLEU on every seed.
    _run(corpus, 'global_general', seed, WORSE)
    _run(corpus, 'local_p', seed, REFERENCES[:2] + WORSE[2:])
    _run(corpus, 'global_concat', seed, REFERENCES)
    plain = _run(corpus, 'flexible_rnnsearch', seed, REFERENCES)
    _run(
        corpus, 'flexible_rnnsearch_finetune', seed, REFERENCES,
        selection={'bleu': plain, 'window_reduction': 0.55 + 0.01 * seed},
    )  # fmt: skip
  # Two memory combinations at seed 1: the better on validation is chosen;
  # it has one seed, so Britz's verdict waits.
  _run(corpus, 'memory_sigmoid_softmax', 1, WORSE, best_valid=20.0)
  _run(corpus, 'memory_softmax_time_softmax', 1, REFERENCES, best_valid=15.0)
  result = verdicts.corpus_verdicts(str(corpus))
  assert result['luong']['verdict'] == 'holds'
  assert result['luong']['seeds'] == [1, 2, 3]
  assert result['britz']['verdict'] == 'pending'
  assert result['britz']['value'].startswith('memory_sigmoid_softmax against')
  # The same BLEU at the chosen tau, 56-58% smaller windows: holds.
  assert result['shu']['verdict'] == 'holds'
  assert result['shu']['value'].startswith('57.0% ± 1.0 smaller; +0.00 BLEU')
  # The chosen combination's seeds 2 and 3, level with global_concat.
  for seed in (2, 3):
    _run(corpus, 'memory_sigmoid_softmax', seed, REFERENCES)
  britz = verdicts.corpus_verdicts(str(corpus))['britz']
  # Seed 1 is worse by ~50 BLEU, seeds 2-3 level: the interval spans 0.
  assert britz['verdict'] == 'undetermined' and britz['seeds'] == [1, 2, 3]
  text = verdicts.table(str(tmp_path / 'records'))
  assert text.count('| gettext |') == 3
