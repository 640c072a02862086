"""Token vocabularies: ids <-> text, with the four reserved ids below."""

from typing import Iterable, List, Sequence

import numpy as np

from nmt_jax.errors import DataError

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ('<pad>', '<s>', '</s>', '<unk>')


class VocabError(DataError):
  """A token or vocabulary file the model cannot use."""


class Vocab:
  """A word-level vocabulary: the reserved tokens, then `tokens`.

  With `allow_unk=False` (the embedded tasks, whose symbol set is closed) an
  unknown token is an error rather than silently becoming <unk>.
  """

  def __init__(self, tokens: Sequence[str], allow_unk: bool = True):
    self.tokens = list(SPECIALS) + [t for t in tokens if t not in SPECIALS]
    self.index = {t: i for i, t in enumerate(self.tokens)}
    self.allow_unk = allow_unk

  def __len__(self):
    return len(self.tokens)

  def encode(self, text: str, line: int = 0) -> List[int]:
    """'a b c' -> [ids..., EOS]."""
    ids = []
    for token in text.split():
      if token in self.index:
        ids.append(self.index[token])
      elif self.allow_unk:
        ids.append(UNK)
      else:
        where = f' on line {line}' if line else ''
        raise VocabError(
            f'token {token!r}{where} is not in the vocabulary ({self.describe()}); '
            'use only those tokens, separated by spaces')
    return ids + [EOS]

  def decode(self, ids: Iterable[int]) -> str:
    """ids -> text, stopping at EOS and skipping PAD/BOS."""
    words = []
    for i in ids:
      i = int(i)
      if i == EOS:
        break
      if i in (PAD, BOS):
        continue
      words.append(self.tokens[i])
    return ' '.join(words)

  def describe(self) -> str:
    shown = self.tokens[len(SPECIALS):]
    head = ' '.join(shown[:8]) + (' ...' if len(shown) > 8 else '')
    return f'{len(shown)} tokens: {head}'


def pad_batch(sequences: Sequence[np.ndarray], length: int) -> np.ndarray:
  """Right-pads int sequences with PAD to [len(sequences), length]."""
  out = np.full((len(sequences), length), PAD, np.int32)
  for row, seq in enumerate(sequences):
    out[row, :len(seq)] = seq
  return out
