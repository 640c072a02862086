"""Translation metrics: sacreBLEU, tokenized BLEU, chrF, RIBES."""

import functools
from typing import Dict, Sequence

import sacrebleu
from sacrebleu.metrics import BLEU
from sacrebleu.metrics import CHRF


def translation_metrics(
    hypotheses: Sequence[str], references: Sequence[str], language: str = 'en'
) -> Dict:
  """Corpus scores of detokenized `hypotheses` against one reference each.

  `bleu` is sacreBLEU with its default 13a tokenizer on detokenized text (the
  number to report). `bleu_tokenized` is the multi-bleu.perl figure Luong, Britz
  and Shu quote: hypotheses and references Moses-tokenized for `language` (the
  target language), then scored with tokenize='none'. On text that is already
  tokenized (the embedded tasks, pre-tokenized corpora) the Moses step changes
  nothing, so it equals BLEU on that text.
  """
  hypotheses, references = list(hypotheses), list(references)
  bleu = BLEU()
  bleu_tok = BLEU(tokenize='none')
  chrf = CHRF()
  tokenize = functools.partial(moses_tokenize, language=language)
  result = {
      'bleu': bleu.corpus_score(hypotheses, [references]).score,
      'bleu_signature': str(bleu.get_signature()),
      'bleu_tokenized': (
          bleu_tok.corpus_score(
              [tokenize(h) for h in hypotheses],
              [[tokenize(r) for r in references]],
          ).score
      ),
      'bleu_tokenized_signature': (
          f'moses:{language}|{bleu_tok.get_signature()}'
      ),
      'chrf': chrf.corpus_score(hypotheses, [references]).score,
      'chrf_signature': str(chrf.get_signature()),
      'ribes': ribes(hypotheses, references),
  }
  return result


@functools.lru_cache(maxsize=8)
def _moses(language: str):
  # Imported on first use: sacremoses takes 0.3 s and nltk 1 s to import.
  from sacremoses import MosesTokenizer  # pylint: disable=g-import-not-at-top

  return MosesTokenizer(lang=language)


def moses_tokenize(text: str, language: str = 'en') -> str:
  """tokenizer.perl -l language (no escaping, no -a).

  E.g. 'Ja, gut.' -> 'Ja , gut .'.
  """
  return _moses(language).tokenize(text, return_str=True, escape=False)


def ribes(hypotheses: Sequence[str], references: Sequence[str]) -> float:
  """Corpus RIBES (Isozaki et al. 2010) on whitespace tokens, in [0, 1].

  Computed with nltk.
  """
  # Imported here: nltk takes 1 s to import.
  from nltk.translate.ribes_score import corpus_ribes  # pylint: disable=g-import-not-at-top

  hyps = [h.split() for h in hypotheses]
  refs = [[r.split()] for r in references]
  try:
    return float(corpus_ribes(refs, hyps))
  except (
      ZeroDivisionError
  ):  # nltk divides by the hypothesis count of matching words
    return 0.0


def sacrebleu_version() -> str:
  return sacrebleu.__version__
