"""Embedded tasks and length-bucketed batching (SPEC §6).

Every batch is padded to one of a few bucket lengths, so a jitted step
compiles once per bucket. The training stream is a pure function of
(seed, step): resuming at step N yields exactly the batches an uninterrupted
run would have seen, with nothing to checkpoint but the step.
"""

import collections.abc
import dataclasses
import functools
import math
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from nmt_jax import vocab as vocab_lib
from nmt_jax.errors import DataError
from nmt_jax.vocab import BOS, EOS

Batch = Dict[str, np.ndarray]

EMBEDDED_TASKS = ('copy', 'chunk_reverse')


class Ragged(collections.abc.Sequence):
  """Variable-length int32 rows stored flat: row i is flat[offsets[i]:offsets[i + 1]].

  What the encoded-corpus cache holds (memory-mapped, so a large training split
  costs neither loading time nor RAM until its rows are read).
  """

  def __init__(self, flat: np.ndarray, offsets: np.ndarray):
    self.flat, self.offsets = flat, offsets

  @classmethod
  def from_rows(cls, rows: Sequence[np.ndarray]) -> 'Ragged':
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    flat = np.concatenate(rows).astype(np.int32) if len(rows) else np.zeros(0, np.int32)
    return cls(flat, offsets)

  def __len__(self):
    return len(self.offsets) - 1

  def __getitem__(self, i):
    return self.flat[self.offsets[i]:self.offsets[i + 1]]

  def lengths(self) -> np.ndarray:
    return np.diff(self.offsets)

  def save(self, prefix: str):
    np.save(prefix + '.ids.npy', self.flat)
    np.save(prefix + '.offsets.npy', self.offsets)

  @classmethod
  def load(cls, prefix: str) -> 'Ragged':
    # Plain ndarray views of the mapping: slicing an np.memmap costs ~3x more per row.
    return cls(np.load(prefix + '.ids.npy', mmap_mode='r').view(np.ndarray),
               np.load(prefix + '.offsets.npy'))


@dataclasses.dataclass
class Split:
  """Parallel id sequences; each source and target ends with EOS.

  source/target: lists of arrays, or Ragged (from the encoded-corpus cache, where
  the training split's texts are left out: only validation and test need them).
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
  eval: Split                # validation
  max_length: int            # longest sequence in tokens, EOS included
  test: Optional[Split] = None   # final evaluation (None: the validation split)

  @property
  def test_or_eval(self) -> Split:
    return self.eval if self.test is None else self.test


# ----------------------------------------------------------------- embedded tasks


def symbol_names(num_symbols: int) -> List[str]:
  if num_symbols <= 26:
    return [chr(ord('a') + i) for i in range(num_symbols)]
  return [f'w{i}' for i in range(num_symbols)]


def copy_examples(num: int, min_length: int, max_length: int, num_symbols: int,
                  rng) -> List[Tuple[np.ndarray, np.ndarray]]:
  """Britz et al. 4.1: random symbols, lengths uniform in min..max_length, target = source."""
  lengths = rng.integers(min_length, max_length + 1, size=num)
  flat = rng.integers(0, num_symbols, size=int(lengths.sum()))
  pieces = np.split(flat, np.cumsum(lengths)[:-1])
  return [(p, p) for p in pieces]


def chunk_reverse_examples(num: int, min_length: int, max_length: int, num_symbols: int,
                           chunk_size: int, rng) -> List[Tuple[np.ndarray, np.ndarray]]:
  """Chunks reversed, each chunk's order kept: 'a b X c Y' -> 'c Y a b X'.

  The last `max(1, num_symbols // 5)` symbols end a chunk and appear nowhere
  else, so the chunk boundaries are visible in the source, as phrase
  boundaries are in language. The alignment is monotone inside a chunk and
  jumps between chunks.
  """
  num_end = max(1, num_symbols // 5)
  num_inner = num_symbols - num_end
  examples = []
  for length in rng.integers(min_length, max_length + 1, size=num):
    chunks, left = [], int(length)
    while left:
      size = min(int(rng.integers(1, chunk_size + 1)), left)
      inner = rng.integers(0, num_inner, size=size - 1) if num_inner else np.zeros(0, int)
      chunks.append(np.concatenate([inner, [num_inner + rng.integers(0, num_end)]]))
      left -= size
    examples.append((np.concatenate(chunks), np.concatenate(chunks[::-1])))
  return examples


def load_task(data_config, seed: int, workdir: Optional[str] = None,
              build_vocab: bool = False) -> Task:
  """Builds the task named by `data_config.name`.

  Real corpora keep their vocabularies in `<workdir>/vocab`; `build_vocab`
  builds missing ones (training), otherwise a missing one is an error.
  """
  name = data_config.name
  if name.startswith('text:'):
    from nmt_jax import corpus  # pylint: disable=g-import-not-at-top
    return corpus.load_text_task(data_config, workdir, build_vocab)
  if name.startswith('tfds:'):
    from nmt_jax import corpus  # pylint: disable=g-import-not-at-top
    return corpus.load_tfds_task(data_config, workdir, build_vocab)
  if name not in EMBEDDED_TASKS:
    raise DataError(f'unknown data.name {name!r}: use one of {", ".join(EMBEDDED_TASKS)}, '
                    'text:<path prefix>, tfds:<builder>/<config>')
  symbols = symbol_names(data_config.num_symbols)
  vocab = vocab_lib.Vocab(symbols, allow_unk=False)
  offset = len(vocab_lib.SPECIALS)

  def make(num, split_id):
    rng = np.random.default_rng([seed, split_id])
    if name == 'copy':
      pairs = copy_examples(num, data_config.min_length, data_config.max_length,
                            data_config.num_symbols, rng)
    else:
      pairs = chunk_reverse_examples(num, data_config.min_length, data_config.max_length,
                                     data_config.num_symbols, data_config.chunk_size, rng)
    source = [np.append(s + offset, EOS).astype(np.int32) for s, _ in pairs]
    target = [np.append(t + offset, EOS).astype(np.int32) for _, t in pairs]
    return Split(source, target, [vocab.decode(s) for s in source], [vocab.decode(t) for t in target])

  return Task(vocab, vocab, make(data_config.num_train, 0), make(data_config.num_eval, 1),
              data_config.max_length + 1)


# ----------------------------------------------------------------- batching


def bucket_boundaries(max_length: int, num_buckets: int) -> List[int]:
  """Padded lengths: num_buckets evenly spaced lengths up to max_length."""
  return sorted({math.ceil(max_length * (i + 1) / num_buckets) for i in range(num_buckets)})


def example_lengths(split: Split) -> np.ndarray:
  """Padded length each example needs: target_in is BOS + target[:-1], same length as target."""
  if isinstance(split.source, Ragged) and isinstance(split.target, Ragged):
    return np.maximum(split.source.lengths(), split.target.lengths())
  return np.array([max(len(s), len(t)) for s, t in zip(split.source, split.target)])


def make_batch(split: Split, rows: Sequence[int], length: int) -> Batch:
  """Rows of `split` as PAD-padded arrays [len(rows), length]."""
  targets = [split.target[i] for i in rows]
  return {
      'source': vocab_lib.pad_batch([split.source[i] for i in rows], length),
      'target_in': vocab_lib.pad_batch([np.concatenate([[BOS], t[:-1]]) for t in targets], length),
      'target_out': vocab_lib.pad_batch(targets, length),
  }


def dummy_batch(batch_size: int, length: int) -> Batch:
  """A batch of one-token (EOS) sentences: enough for shape-only uses such as init."""
  tokens = np.zeros((batch_size, length), np.int32)
  tokens[:, 0] = EOS
  return {'source': tokens, 'target_in': tokens, 'target_out': tokens}


def batch_sizes(boundaries: Sequence[int], batch_size: int, batch_tokens: int = 0,
                multiple: int = 1) -> List[int]:
  """Sentences per batch in each bucket.

  batch_tokens = 0: `batch_size` everywhere. Otherwise as many sentences as fit
  in `batch_tokens` padded tokens (rows x bucket length), rounded down to a
  multiple of `multiple` (the device count, so batches split evenly).
  """
  if not batch_tokens:
    return [batch_size] * len(boundaries)
  sizes = [batch_tokens // length // multiple * multiple for length in boundaries]
  if not sizes[-1]:
    from nmt_jax.errors import ConfigError  # pylint: disable=g-import-not-at-top
    raise ConfigError(
        f'config: data.batch_tokens={batch_tokens} holds no batch of {multiple} sentence(s) of the '
        f'longest bucket ({boundaries[-1]} tokens); use at least {boundaries[-1] * multiple} '
        '(--config.data.batch_tokens=...)')
  return sizes


class TrainBatches:
  """Shuffled, length-bucketed training batches; `batch(step)` is a pure function of step.

  Each epoch is a seeded permutation grouped by bucket into full batches
  (a bucket's last partial batch is left out of that epoch), in shuffled order.
  `batch_size` is one size for every bucket or one per bucket (see batch_sizes).
  """

  def __init__(self, split: Split, batch_size, boundaries: Sequence[int], seed: int):
    self.split = split
    self.boundaries = list(boundaries)
    self.sizes = ([batch_size] * len(self.boundaries) if isinstance(batch_size, int)
                  else list(batch_size))
    self.seed = seed
    lengths = example_lengths(split)
    if lengths.max() > self.boundaries[-1]:
      raise DataError(f'an example of length {lengths.max()} exceeds the longest bucket '
                      f'{self.boundaries[-1]}; raise data.max_length')
    self.bucket = np.searchsorted(self.boundaries, lengths)               # bucket of each example
    # Full batches per bucket do not depend on the order, so every epoch has as many.
    self.num_batches = int(sum(np.sum(self.bucket == b) // size
                               for b, size in enumerate(self.sizes)))
    if not self.num_batches:
      raise DataError(f'the training split ({len(split)} examples) fills no batch of '
                      f'{max(self.sizes)} in any length bucket; lower train.batch_size')
    self._cached_epoch: Tuple[int, List[np.ndarray]] = (-1, [])

  def epoch(self, epoch: int) -> List[np.ndarray]:
    """The batches (arrays of example indices) of one epoch, in training order."""
    if self._cached_epoch[0] != epoch:
      rng = np.random.default_rng([self.seed, 2, epoch])
      order = rng.permutation(len(self.split))
      batches = []
      for b, size in enumerate(self.sizes):
        members = order[self.bucket[order] == b]
        full = len(members) // size * size
        batches += np.split(members[:full], full // size) if full else []
      self._cached_epoch = (epoch, [batches[i] for i in rng.permutation(len(batches))])
    return self._cached_epoch[1]

  def examples(self, step: int, rows=slice(None)) -> Tuple[np.ndarray, int]:
    """(example indices, padded length) of `step`'s batch.

    `rows` selects the part one process feeds: a slice, or a function from the
    batch's row count to a slice (batches by tokens differ in rows per bucket).
    """
    epoch, index = divmod(step, self.num_batches)
    examples = self.epoch(epoch)[index]
    rows = rows(len(examples)) if callable(rows) else rows
    return examples[rows], self.boundaries[self.bucket[examples[0]]]

  def batch(self, step: int, rows=slice(None)) -> Batch:
    """The batch of `step` (`rows`: see `examples`)."""
    examples, length = self.examples(step, rows)
    return make_batch(self.split, examples, length)


def train_iterator(batches: TrainBatches, num_steps: int, rows=slice(None), prefetch: int = 4):
  """A Grain iterator over the batches of steps 0..num_steps-1, built ahead in a thread.

  Its state ({'next_index': step}) is saved with each checkpoint (checkpoint.py),
  so a resumed run continues on the batch an uninterrupted one would see.
  """
  import grain  # pylint: disable=g-import-not-at-top
  dataset = grain.MapDataset.range(num_steps).map(functools.partial(_step_batch, batches, rows))
  return iter(dataset.to_iter_dataset(
      grain.ReadOptions(num_threads=1, prefetch_buffer_size=prefetch)))


def _step_batch(batches: TrainBatches, rows, step) -> Batch:
  return batches.batch(int(step), rows)


def eval_batches(split: Split, batch_size: int, boundaries: Sequence[int],
                 limit: Optional[int] = None) -> Iterator[Tuple[np.ndarray, Batch]]:
  """Fixed-shape batches of the first `limit` examples, sorted by length.

  Yields (indices [batch_size], batch); the batch is padded with copies of a
  one-token example whose index is -1, so every batch has `batch_size` rows.
  """
  count = len(split) if limit is None else min(limit, len(split))
  lengths = example_lengths(split)[:count]
  order = np.argsort(lengths, kind='stable')
  for start in range(0, count, batch_size):
    rows = order[start:start + batch_size]
    length = boundaries[int(np.searchsorted(boundaries, lengths[rows].max()))]
    batch = make_batch(split, rows, length)
    pad = batch_size - len(rows)
    if pad:
      dummy = np.zeros((pad, length), np.int32)
      dummy[:, 0] = EOS
      batch = {k: np.concatenate([v, dummy]) for k, v in batch.items()}
      rows = np.concatenate([rows, np.full(pad, -1)])
    yield rows, batch


def sentences_split(lines: Sequence[str], vocab: vocab_lib.Vocab) -> Split:
  """A source-only split from text lines (for `translate`); targets are a lone EOS."""
  source = [np.asarray(vocab.encode(line, line=i + 1), np.int32) for i, line in enumerate(lines)]
  eos = [np.asarray([EOS], np.int32)] * len(source)
  return Split(source, eos, list(lines), [''] * len(source))
