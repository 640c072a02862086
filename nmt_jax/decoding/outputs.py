"""Text formats of decoded and scored sentences.

Pure functions from token ids, scores and alignments to lines: the Pharaoh
alignment format, soft alignments (attention matrices in the text's order),
Luong et al. (2015)'s unknown-word replacement, Moses n-best lists and the
score lines of --mode=score.
"""

from typing import List, Optional, Sequence

import numpy as np

from nmt_jax.data.vocab import UNK


def source_positions(alignment, source_length: int, reversed_source: bool):
  """Argmax source positions [T] -> original positions, -1 where none.

  `source_length` counts real tokens (EOS excluded): a target token aligned
  to the source EOS (or beyond) is aligned to nothing. With `reversed_source`
  the model read the tokens backwards (data.reverse_source): position i of
  its input is source token n - 1 - i.
  """
  alignment = np.asarray(alignment, np.int64)
  inside = alignment < source_length
  if reversed_source:
    alignment = source_length - 1 - alignment
  return np.where(inside, alignment, -1)


def reading_order(values, axis: int):
  """Reverses the source positions before EOS (the last) along `axis`.

  What a model that read its source backwards (data.reverse_source) attended
  to, in the text's order; its own inverse.
  """
  values = np.moveaxis(values, axis, 0)
  values = np.concatenate([values[:-1][::-1], values[-1:]])
  return np.moveaxis(values, 0, axis)


def soft_alignment(weights, source_length: int, reversed_source: bool):
  """A hypothesis's attention [T, S_padded] -> [T, source_length] float32.

  `source_length` counts the source's tokens with its EOS; the columns after
  it (padding, zero weight) go, and with `reversed_source` the rest are put
  back in the text's order (EOS stays last).
  """
  weights = np.asarray(weights, np.float32)[:, :source_length]
  return reading_order(weights, 1) if reversed_source else weights


def pharaoh(positions) -> str:
  """Source positions [T] (-1: unaligned) -> 'i-j' pairs, source first."""
  return ' '.join(f'{i}-{j}' for j, i in enumerate(positions) if i >= 0)


def replace_unk(
    ids: Sequence[int],
    words: Sequence[str],
    positions,
    source_words: Sequence[str],
) -> List[str]:
  """Each <unk> in the hypothesis becomes the source word it is aligned to.

  `ids` [T] are the hypothesis token ids, `words` their text, `positions`
  [T] their aligned source positions (-1: none, the <unk> stays).
  """
  out = list(words)
  for j, (token, i) in enumerate(zip(ids, positions)):
    if token == UNK and 0 <= i < len(source_words):
      out[j] = source_words[i]
  return out


def nbest_line(index: int, text: str, score: float, alignment: Optional[str]):
  """Moses n-best format: 'index ||| hypothesis ||| F0= score ||| score'.

  One feature (the model's score) and the total; Moses' optional alignment
  field follows with decode.alignments: ' ||| 0-0 1-1 ...'.
  """
  line = f'{index} ||| {text} ||| F0= {score:.6f} ||| {score:.6f}'
  return line if alignment is None else f'{line} ||| {alignment}'


def score_line(token_log_probs) -> str:
  """--mode=score: 'log-prob<TAB>per-token mean<TAB>each token's log-prob'.

  The tokens are the target's (EOS included), so the mean divides by the
  number of target tokens + 1.
  """
  values = np.asarray(token_log_probs, np.float64)
  total = float(np.sum(values))
  mean = total / max(len(values), 1)
  each = ' '.join(f'{v:.4f}' for v in values)
  return f'{total:.6f}\t{mean:.6f}\t{each}'
