"""What a task is: parallel id sequences (Split) and a task's splits (Task).

Every source and target sequence ends with EOS. Ragged stores variable-length
rows flat, as the encoded-corpus cache holds them (encoding.py).
"""

import collections.abc
import dataclasses
from typing import List, Optional, Sequence

import numpy as np

from nmt_jax.data import vocab as vocab_lib
from nmt_jax.data.vocab import EOS


class Ragged(collections.abc.Sequence):
  """Variable-length int32 rows stored flat.

  Row i is flat[offsets[i]:offsets[i + 1]]. What the encoded-corpus cache
  holds (memory-mapped, so a large training split costs neither loading time
  nor RAM until its rows are read).
  """

  def __init__(self, flat: np.ndarray, offsets: np.ndarray):
    self.flat, self.offsets = flat, offsets

  @classmethod
  def from_rows(cls, rows: Sequence[np.ndarray]) -> 'Ragged':
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    flat = (
        np.concatenate(rows).astype(np.int32)
        if len(rows)
        else np.zeros(0, np.int32)
    )
    return cls(flat, offsets)

  def __len__(self):
    return len(self.offsets) - 1

  def __getitem__(self, i):
    return self.flat[self.offsets[i] : self.offsets[i + 1]]

  def lengths(self) -> np.ndarray:
    return np.diff(self.offsets)

  def save(self, prefix: str):
    np.save(prefix + '.ids.npy', self.flat)
    np.save(prefix + '.offsets.npy', self.offsets)

  @classmethod
  def load(cls, prefix: str) -> 'Ragged':
    # Plain ndarray views of the mapping:
    # slicing an np.memmap costs ~3x more per row.
    return cls(
        np.load(prefix + '.ids.npy', mmap_mode='r').view(np.ndarray),
        np.load(prefix + '.offsets.npy'),
    )


@dataclasses.dataclass
class Split:
  """Parallel id sequences; each source and target ends with EOS.

  source/target: lists of arrays, or Ragged (from the encoded-corpus cache,
  where the training split's texts are left out: only validation and test
  need them).
  """

  source: Sequence[np.ndarray]
  target: Sequence[np.ndarray]
  source_text: List[str]
  target_text: List[str]

  def __len__(self):
    return len(self.source)


@dataclasses.dataclass
class Task:
  source_vocab: vocab_lib.Vocab
  target_vocab: vocab_lib.Vocab
  train: Split
  eval: Split  # validation
  max_length: int  # longest sequence in tokens, EOS included
  test: Optional[Split] = None  # final evaluation (None: the validation split)

  @property
  def test_or_eval(self) -> Split:
    return self.eval if self.test is None else self.test


def sentences_split(
    lines: Sequence[str],
    vocab: vocab_lib.Vocab,
    line_numbers=None,
    reverse: bool = False,
) -> Split:
  """A source-only split from text lines (for `translate`).

  Each target is a lone EOS. `line_numbers` (default 1, 2, ...) name the
  lines in errors; `reverse` reverses the sources (data.reverse_source).
  """
  numbers = line_numbers or range(1, len(lines) + 1)
  source = [
      np.asarray(vocab.encode(line, line=number), np.int32)
      for number, line in zip(numbers, lines)
  ]
  eos = [np.asarray([EOS], np.int32)] * len(source)
  split = Split(source, eos, list(lines), [''] * len(source))
  return reverse_sources(split) if reverse else split


def reverse_sources(split: Split) -> Split:
  """The split with each source's tokens reversed, EOS kept last.

  Sutskever et al. (2014)'s source reversal. Texts stay in reading order.
  """
  if isinstance(split.source, Ragged):
    flat, offsets = split.source.flat, split.source.offsets
    index = np.arange(len(flat))
    row = np.searchsorted(offsets, index, side='right') - 1
    start, eos = offsets[row], offsets[row + 1] - 1
    order = np.where(index < eos, start + eos - 1 - index, index)
    source = Ragged(flat[order], offsets)
  else:
    source = [np.concatenate([s[:-1][::-1], s[-1:]]) for s in split.source]
  return dataclasses.replace(split, source=source)
