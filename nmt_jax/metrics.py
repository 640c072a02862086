"""Translation metrics (SPEC §5): sacreBLEU, tokenized BLEU, chrF, RIBES, window size."""

from typing import Dict, Sequence

import sacrebleu
from sacrebleu.metrics import BLEU, CHRF


def translation_metrics(hypotheses: Sequence[str], references: Sequence[str]) -> Dict:
  """Corpus scores of detokenized `hypotheses` against one reference each.

  `bleu` is sacreBLEU with its default 13a tokenizer on detokenized text (the
  number to report); `bleu_tokenized` uses tokenize='none' on text that is
  already tokenized, the multi-bleu.perl figure Luong and Britz quote.
  """
  hypotheses, references = list(hypotheses), list(references)
  bleu = BLEU()
  bleu_tok = BLEU(tokenize='none')
  chrf = CHRF()
  result = {
      'bleu': bleu.corpus_score(hypotheses, [references]).score,
      'bleu_signature': str(bleu.get_signature()),
      'bleu_tokenized': bleu_tok.corpus_score(hypotheses, [references]).score,
      'bleu_tokenized_signature': str(bleu_tok.get_signature()),
      'chrf': chrf.corpus_score(hypotheses, [references]).score,
      'chrf_signature': str(chrf.get_signature()),
      'ribes': ribes(hypotheses, references),
  }
  return result


def ribes(hypotheses: Sequence[str], references: Sequence[str]) -> float:
  """Corpus RIBES (Isozaki et al. 2010) from nltk, on whitespace tokens, in [0, 1]."""
  from nltk.translate.ribes_score import corpus_ribes  # pylint: disable=g-import-not-at-top
  hyps = [h.split() for h in hypotheses]
  refs = [[r.split()] for r in references]
  try:
    return float(corpus_ribes(refs, hyps))
  except ZeroDivisionError:   # nltk divides by the hypothesis count of matching words
    return 0.0


def sacrebleu_version() -> str:
  return sacrebleu.__version__
