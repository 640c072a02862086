"""Text of a corpus that comes segmented, back to plain text.

A corpus already cut into subwords by another tool is read as a word
vocabulary over its pieces (data.vocab.kind='word'), and data.segmentation
says how to join them again: hypotheses (eval_hypotheses.txt, translate's
output) and the references BLEU and chrF compare them with are then text,
as published scores are.

  'none'           the words are words.
  'sentencepiece'  SentencePiece pieces: '▁Hal lo ▁Welt' -> 'Hallo Welt'.
  'bpe'            subword-nmt's '@@ ' joiner: 'Hal@@ lo Welt' -> 'Hallo Welt'.
"""

import re

KINDS = ('none', 'sentencepiece', 'bpe')
WORD_START = '\u2581'  # SentencePiece's mark of a piece that starts a word
_BPE_JOINER = re.compile(r'@@( +|$)')


def desegment(kind: str, text: str) -> str:
  """`text` (pieces separated by spaces) as plain text."""
  if kind == 'sentencepiece':
    return ' '.join(''.join(text.split()).replace(WORD_START, ' ').split())
  if kind == 'bpe':
    return ' '.join(_BPE_JOINER.sub('', text).split())
  return text
