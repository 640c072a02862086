"""Translation metrics: sacreBLEU, tokenized BLEU, chrF, RIBES."""

import collections
import functools
from typing import Dict, List, Sequence

from absl import logging
from sacrebleu.metrics import BLEU
from sacrebleu.metrics import CHRF

# Written without spaces between words: the tokenized BLEU and RIBES score
# the words sacreBLEU's tokenizer for the language splits out, not lines
# (other languages: Moses tokens).
UNSPACED = ('zh', 'ja')


def translation_metrics(
    hypotheses: Sequence[str], references: Sequence[str], language: str = 'en'
) -> Dict:
  """Corpus scores of detokenized `hypotheses` against one reference each.

  `bleu` is sacreBLEU on detokenized text with the tokenizer it picks for the
  target `language` (the number to report): 13a, or zh, ja-mecab and
  ko-mecab for Chinese, Japanese and Korean (the signature names it).
  `bleu_tokenized` is the multi-bleu.perl figure Luong, Britz and Shu quote:
  hypotheses and references Moses-tokenized for `language` (for zh and ja
  split by sacreBLEU's tokenizer instead), then scored with tokenize='none'.
  On text that is already tokenized (the embedded tasks, pre-tokenized
  corpora) the Moses step changes nothing, so it equals BLEU on that text.
  """
  hypotheses, references = list(hypotheses), list(references)
  bleu = bleu_metric(language)
  # force: the text is tokenized on purpose; without it sacreBLEU warns of
  # text it thinks was not detokenized.
  bleu_tok = BLEU(tokenize='none', force=True)
  chrf = CHRF()
  if language in UNSPACED:
    tokenize, tokenizer_name = bleu.tokenizer, bleu.tokenizer.signature()
  else:
    tokenize = functools.partial(moses_tokenize, language=language)
    tokenizer_name = f'moses:{language}'
  hyps_tok = [tokenize(h) for h in hypotheses]
  refs_tok = [tokenize(r) for r in references]
  result = {
      'bleu': bleu.corpus_score(hypotheses, [references]).score,
      'bleu_signature': str(bleu.get_signature()),
      'bleu_tokenized': bleu_tok.corpus_score(hyps_tok, [refs_tok]).score,
      'bleu_tokenized_signature': (
          f'{tokenizer_name}|{bleu_tok.get_signature()}'
      ),
      'chrf': chrf.corpus_score(hypotheses, [references]).score,
      'chrf_signature': str(chrf.get_signature()),
      # On tokens, as RIBES.py and WAT score it (punctuation apart).
      'ribes': ribes(hyps_tok, refs_tok),
  }
  return result


def bleu_by_source_length(
    hypotheses: Sequence[str],
    references: Sequence[str],
    source_lengths: Sequence[int],
    language: str = 'en',
    width: int = 10,
) -> List[Dict]:
  """BLEU of the sentences in each source-length bin of `width` tokens.

  The breakdown of Bahdanau et al.'s and Luong et al.'s length figures:
  [{'source_length': '1-10', 'sentences': n, 'bleu': corpus BLEU of those
  n}, ...] in increasing length, empty bins left out. Lengths count source
  tokens (pieces for a segmented corpus), EOS excluded.
  """
  bins = collections.defaultdict(list)
  for i, length in enumerate(source_lengths):
    bins[(max(length, 1) - 1) // width].append(i)
  bleu = bleu_metric(language)
  rows = []
  for b in sorted(bins):
    hyps = [hypotheses[i] for i in bins[b]]
    refs = [references[i] for i in bins[b]]
    rows.append({
        'source_length': f'{b * width + 1}-{(b + 1) * width}',
        'sentences': len(hyps),
        'bleu': bleu.corpus_score(hyps, [refs]).score,
    })
  return rows


def bleu_metric(language: str) -> BLEU:
  """sacreBLEU's BLEU for target `language`.

  Japanese and Korean need MeCab (`pip install 'sacrebleu[ja]'` or
  `'sacrebleu[ko]'`); without it a warning and, for unsegmented Japanese,
  characters (tok:char in the signature) rather than a 13a BLEU near 0 on
  unsegmented text; Korean separates its words by spaces: 13a.
  """
  try:
    return BLEU(trg_lang=language)
  except RuntimeError as e:  # sacrebleu: the language's extra is missing
    fallback = '13a' if language == 'ko' else 'char'
    _warn_once(language, fallback, str(e).strip().splitlines()[-1].strip())
    return BLEU(tokenize=fallback)


@functools.lru_cache(maxsize=None)
def _warn_once(language: str, fallback: str, install: str):
  logging.warning(
      'BLEU for %s uses tok:%s: its word tokenizer needs MeCab; for the'
      ' standard figure run `%s`',
      language,
      fallback,
      install,
  )


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

  translation_metrics gives it zh and ja text split into words first.

  Computed with nltk, which aligns only words unique in both sentences (or
  by their n-gram context) and scores a sentence with fewer than two aligned
  words 0: an exact copy of 'a' or 'a a a' scores 0.
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
