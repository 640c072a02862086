"""Length-bucketed batches: training batches (by step) and eval batches.

Every batch is padded to one of a few bucket lengths, so a jitted step
compiles once per bucket. The training stream is a pure function of
(seed, step): resuming at step N yields exactly the batches an uninterrupted
run would have seen.
"""

import functools
import math
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from absl import logging
import grain
import numpy as np

from nmt_jax.data import dataset
from nmt_jax.data import vocab as vocab_lib
from nmt_jax.data.vocab import BOS
from nmt_jax.data.vocab import EOS
from nmt_jax.system import errors

Batch = Dict[str, np.ndarray]


def bucket_boundaries(max_length: int, num_buckets: int) -> List[int]:
  """Padded lengths: num_buckets evenly spaced lengths up to max_length."""
  return sorted({
      math.ceil(max_length * (i + 1) / num_buckets) for i in range(num_buckets)
  })


def fitted_boundaries(
    lengths: np.ndarray, max_length: int, num_buckets: int
) -> List[int]:
  """The num_buckets padded lengths (the last max_length) that pad least.

  Minimises the padding sum_i (bucket(len_i) - len_i) of `lengths` exactly,
  by dynamic programming over the length histogram: O(num_buckets *
  max_length^2), milliseconds for sentence lengths.
  """
  # No more buckets than lengths: the exact count would not fit otherwise.
  num_buckets = min(num_buckets, max_length)
  counts = np.bincount(
      np.minimum(lengths, max_length), minlength=max_length + 1
  )
  counts = counts.astype(np.float64)
  positions = np.arange(max_length + 1, dtype=np.float64)
  # cost[a, b]: padding of the lengths a+1..b in a bucket of length b.
  below = np.concatenate([[0.0], np.cumsum(counts)])  # counts of lengths < x
  tokens = np.concatenate([[0.0], np.cumsum(counts * positions)])
  a, b = np.meshgrid(positions, positions, indexing='ij')
  a_, b_ = a.astype(int) + 1, b.astype(int) + 1
  cost = b * (below[b_] - below[a_]) - (tokens[b_] - tokens[a_])
  cost = np.where(b > a, cost, np.inf)
  padding = cost[0].copy()  # padding[b]: one bucket, ending at b
  back = []  # back[j][b]: where bucket j + 2 starts if it ends at b
  for _ in range(num_buckets - 1):
    total = padding[:, None] + cost  # [previous end, this end]
    back.append(np.argmin(total, axis=0))
    padding = total.min(axis=0)
  boundaries, end = [max_length], max_length
  for previous in reversed(back):
    end = int(previous[end])
    boundaries.append(end)
  # Buckets no example falls into are dropped (the longest stays).
  boundaries = sorted(set(boundaries))
  filled = set(np.searchsorted(boundaries, lengths).tolist())
  return [b for i, b in enumerate(boundaries) if i in filled or b == max_length]


def example_lengths(split: dataset.Split) -> np.ndarray:
  """Padded length each example needs.

  target_in is BOS + target[:-1], the same length as target.
  """
  if isinstance(split.source, dataset.Ragged) and isinstance(
      split.target, dataset.Ragged
  ):
    return np.maximum(split.source.lengths(), split.target.lengths())
  return np.array(
      [max(len(s), len(t)) for s, t in zip(split.source, split.target)]
  )


def make_batch(split: dataset.Split, rows: Sequence[int], length: int) -> Batch:
  """Rows of `split` as PAD-padded arrays [len(rows), length]."""
  targets = [split.target[i] for i in rows]
  return {
      'source': vocab_lib.pad_batch([split.source[i] for i in rows], length),
      'target_in': vocab_lib.pad_batch(
          [np.concatenate([[BOS], t[:-1]]) for t in targets], length
      ),
      'target_out': vocab_lib.pad_batch(targets, length),
  }


def dummy_batch(batch_size: int, length: int) -> Batch:
  """A batch of one-token (EOS) sentences.

  Enough for shape-only uses such as init.
  """
  tokens = np.zeros((batch_size, length), np.int32)
  tokens[:, 0] = EOS
  return {'source': tokens, 'target_in': tokens, 'target_out': tokens}


def batch_sizes(
    boundaries: Sequence[int],
    batch_size: int,
    batch_tokens: int = 0,
    multiple: int = 1,
) -> List[int]:
  """Sentences per batch in each bucket.

  batch_tokens = 0: `batch_size` everywhere. Otherwise as many sentences as fit
  in `batch_tokens` padded tokens (rows x bucket length), rounded down to a
  multiple of `multiple` (the device count, so batches split evenly).
  """
  if not batch_tokens:
    return [batch_size] * len(boundaries)
  sizes = [
      batch_tokens // length // multiple * multiple for length in boundaries
  ]
  if not sizes[-1]:
    raise errors.ConfigError(
        f'config: data.batch_tokens={batch_tokens} holds no batch of {multiple}'
        f' sentence(s) of the longest bucket ({boundaries[-1]} tokens); use at'
        f' least {boundaries[-1] * multiple} (--config.data.batch_tokens=...)'
    )
  return sizes


class TrainBatches:
  """Shuffled, length-bucketed training batches.

  `batch(step)` is a pure function of step. Each epoch is a seeded permutation
  grouped by bucket into full batches (a bucket's last partial batch is left
  out of that epoch), in shuffled order. A bucket with fewer examples than
  one batch is trained with a longer one. `batch_size` is one size for every
  bucket or one per bucket (see batch_sizes).
  """

  def __init__(
      self,
      split: dataset.Split,
      batch_size,
      boundaries: Sequence[int],
      seed: int,
  ):
    self.split = split
    self.boundaries = list(boundaries)
    self.sizes = (
        [batch_size] * len(self.boundaries)
        if isinstance(batch_size, int)
        else list(batch_size)
    )
    self.seed = seed
    lengths = example_lengths(split)
    if lengths.max() > self.boundaries[-1]:
      raise errors.DataError(
          f'an example of length {lengths.max()} exceeds the longest bucket '
          f'{self.boundaries[-1]}; raise data.max_length'
      )
    # bucket of each example
    self.bucket = self._fill_buckets(np.searchsorted(self.boundaries, lengths))
    # Full batches per bucket do not depend on the order, so every epoch has
    # the same number of them.
    self.num_batches = int(
        sum(
            np.sum(self.bucket == b) // size
            for b, size in enumerate(self.sizes)
        )
    )
    if not self.num_batches:
      raise errors.DataError(
          f'the training split ({len(split)} examples) fills no batch of '
          f'{max(self.sizes)} in any length bucket; lower train.batch_size'
      )
    self._cached_epoch: Tuple[int, List[np.ndarray]] = (-1, [])

  def _fill_buckets(self, bucket: np.ndarray) -> np.ndarray:
    """bucket [examples], with every bucket holding at least one batch.

    Each epoch leaves out a bucket's last partial batch, so the examples of
    a bucket smaller than its batch would never be trained on: they join
    the next longer bucket (the longest, the nearest shorter one joins it).
    """
    bucket, last = bucket.copy(), len(self.boundaries) - 1
    counts = np.bincount(bucket, minlength=last + 1)

    def join(small, into):
      logging.info(
          'length bucket %d holds %d example(s), fewer than its batch of %d:'
          ' they are trained in bucket %d',
          self.boundaries[small],
          counts[small],
          self.sizes[small],
          self.boundaries[into],
      )
      bucket[bucket == small] = into
      counts[into] += counts[small]
      counts[small] = 0

    for b in range(last):
      if 0 < counts[b] < self.sizes[b]:
        join(b, b + 1)
    while 0 < counts[last] < self.sizes[last] and counts[:last].any():
      join(int(np.flatnonzero(counts[:last])[-1]), last)
    return bucket

  def epoch(self, epoch: int) -> List[np.ndarray]:
    """One epoch's batches (arrays of example indices), in training order."""
    if self._cached_epoch[0] != epoch:
      rng = np.random.default_rng([self.seed, 2, epoch])
      order = rng.permutation(len(self.split))
      batches = []
      for b, size in enumerate(self.sizes):
        members = order[self.bucket[order] == b]
        full = len(members) // size * size
        batches += np.split(members[:full], full // size) if full else []
      self._cached_epoch = (
          epoch,
          [batches[i] for i in rng.permutation(len(batches))],
      )
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


# data.bucketing = 'auto' and data.num_buckets = 0 by where the data comes
# from: a real corpus (text:, tfds:) trains in the 16 bucket lengths that pad
# its training split least (21.8% of the target positions padded in 4 even
# buckets on a WMT-shaped corpus, 8.1% in 16 fitted: x1.18 target tokens/s
# at a 16k vocabulary for a one-time 73 s more compilation); the embedded
# tasks keep 4 even buckets, so their published runs reproduce batch for
# batch. Decoding (validation, eval) uses even buckets, 4 unless set.
CORPUS_BUCKETING = ('fitted', 16)
EMBEDDED_BUCKETING = ('even', 4)


def training_bucketing(data_config) -> Tuple[str, int]:
  """('even' or 'fitted', number of buckets) training uses."""
  corpus = data_config.name.startswith(('text:', 'tfds:'))
  kind, count = CORPUS_BUCKETING if corpus else EMBEDDED_BUCKETING
  if data_config.bucketing != 'auto':
    kind = data_config.bucketing
  return kind, data_config.num_buckets or count


def decoding_bucket_count(data_config) -> int:
  """The number of even length buckets decoding batches are padded to."""
  return data_config.num_buckets or EMBEDDED_BUCKETING[1]


def training_batch_sizes(config, devices: int = 1, lengths=None):
  """(bucket boundaries, sentences per batch in each bucket) of a config.

  Every source's longest sequence is data.max_length + 1 (EOS). `devices`:
  batches by tokens hold a multiple of this many sentences; a ConfigError
  when data.batch_tokens cannot hold that many of the longest bucket.
  `lengths` (the training examples') place data.bucketing='fitted'
  boundaries (training_bucketing); without them (config checks) the buckets
  are even, which has the same longest bucket.
  """
  longest = config.data.max_length + 1
  kind, count = training_bucketing(config.data)
  if kind == 'fitted' and lengths is not None:
    boundaries = fitted_boundaries(lengths, longest, count)
  else:
    boundaries = bucket_boundaries(longest, count)
  # Each device's rows split into train.accumulate_steps micro-batches.
  sizes = batch_sizes(
      boundaries,
      config.train.batch_size,
      config.data.batch_tokens,
      devices * config.train.accumulate_steps,
  )
  return boundaries, sizes


def training_batches(task: dataset.Task, config, devices: int = 1):
  """The TrainBatches of `task` as config.data and config.train say."""
  boundaries, sizes = training_batch_sizes(
      config, devices, example_lengths(task.train)
  )
  return TrainBatches(task.train, sizes, boundaries, config.seed)


def train_iterator(
    batches: TrainBatches, num_steps: int, rows=slice(None), prefetch: int = 4
):
  """A Grain iterator over the batches of steps 0..num_steps-1.

  The batches are built ahead in a thread. The iterator's state
  ({'next_index': step}) is saved with each checkpoint (checkpoint.py), so a
  resumed run continues on the batch an uninterrupted one would see.
  """
  dataset = grain.MapDataset.range(num_steps).map(
      functools.partial(_step_batch, batches, rows)
  )
  return iter(
      dataset.to_iter_dataset(
          grain.ReadOptions(num_threads=1, prefetch_buffer_size=prefetch)
      )
  )


def _step_batch(batches: TrainBatches, rows, step) -> Batch:
  return batches.batch(int(step), rows)


def eval_batches(
    split: dataset.Split,
    batch_size: int,
    boundaries: Sequence[int],
    limit: Optional[int] = None,
    row_multiple: int = 1,
) -> Iterator[Tuple[np.ndarray, Batch]]:
  """Fixed-shape batches of the first `limit` examples, sorted by length.

  Yields (indices [rows], batch); rows of -1 pad a batch with copies of a
  one-token example. Examples up to the last boundary come in batches of
  `batch_size` rows, each padded to the boundary of its longest example; the
  first batch holds the remainder, so the rows that pad it out are of the
  shortest length. Examples longer than the last boundary (a test split is
  kept whole) come after them in batches of their own, each padded to its
  own longest example and holding only the rows it needs (rounded up to a
  multiple of `row_multiple`, e.g. the number of devices): one long sentence
  does not make a whole batch of short ones as long as itself.
  """
  count = len(split) if limit is None else min(limit, len(split))
  lengths = example_lengths(split)[:count]
  order = np.argsort(lengths, kind='stable')
  ordinary = int(np.sum(lengths <= boundaries[-1]))
  first = ordinary % batch_size or batch_size
  starts = [0, *range(first, ordinary, batch_size)] if ordinary else []
  for start, stop in zip(starts, [*starts[1:], ordinary]):
    rows = order[start:stop]
    length = boundaries[int(np.searchsorted(boundaries, lengths[rows[-1]]))]
    yield _padded(split, rows, length, batch_size)
  for start in range(ordinary, count, batch_size):
    rows = order[start : start + batch_size]
    size = min(batch_size, -(-len(rows) // row_multiple) * row_multiple)
    yield _padded(split, rows, int(lengths[rows[-1]]), size)


def eval_batch_count(
    split: dataset.Split,
    batch_size: int,
    boundaries: Sequence[int],
    limit: Optional[int] = None,
) -> int:
  """How many batches eval_batches makes of the same arguments."""
  count = len(split) if limit is None else min(limit, len(split))
  ordinary = int(np.sum(example_lengths(split)[:count] <= boundaries[-1]))
  return -(-ordinary // batch_size) + -(-(count - ordinary) // batch_size)


def _padded(split, rows, length: int, size: int) -> Tuple[np.ndarray, Batch]:
  """make_batch of `rows` padded with one-token examples (index -1) to `size`."""
  batch = make_batch(split, rows, length)
  pad = size - len(rows)
  if pad:
    dummy = np.zeros((pad, length), np.int32)
    dummy[:, 0] = EOS
    batch = {k: np.concatenate([v, dummy]) for k, v in batch.items()}
    rows = np.concatenate([rows, np.full(pad, -1)])
  return rows, batch
