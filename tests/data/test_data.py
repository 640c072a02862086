"""Embedded tasks and batching."""

import numpy as np
import pytest

from nmt_jax import data
from nmt_jax.config import defaults
from nmt_jax.config import validation
from nmt_jax.data import batching
from nmt_jax.data import dataset
from nmt_jax.data import vocab as vocab_lib
from nmt_jax.data.vocab import BOS
from nmt_jax.data.vocab import EOS
from nmt_jax.data.vocab import PAD
from nmt_jax.system import errors


def _task(name='copy', **overrides):
  config = defaults.get_config('tiny')
  config.data.name = name
  for key, value in overrides.items():
    config.data[key] = value
  return data.load_task(config.data, seed=0), config


def test_copy_task_is_deterministic_and_well_formed():
  task, config = _task(num_train=300, max_length=7)
  again, _ = _task(num_train=300, max_length=7)
  lengths = []
  for src, tgt, again_src in zip(
      task.train.source, task.train.target, again.train.source
  ):
    np.testing.assert_array_equal(src, tgt)
    np.testing.assert_array_equal(src, again_src)
    assert src[-1] == EOS and EOS not in src[:-1] and PAD not in src
    lengths.append(len(src) - 1)
  assert min(lengths) == 1 and max(lengths) == 7  # uniform in 1..L
  assert task.max_length == 8
  other = data.load_task(config.data, seed=1)
  assert any(
      len(a) != len(b) or np.any(a != b)
      for a, b in zip(task.train.source, other.train.source)
  )


def test_min_length():
  task, _ = _task(num_train=200, max_length=9, min_length=6)
  assert {len(s) - 1 for s in task.train.source} == {6, 7, 8, 9}


def test_chunk_reverse_reverses_chunks_and_keeps_their_order():
  task, config = _task(
      'chunk_reverse',
      num_train=200,
      max_length=12,
      num_symbols=10,
      chunk_size=4,
  )
  offset = len(vocab_lib.SPECIALS)
  num_end = max(1, config.data.num_symbols // 5)
  first_end = offset + config.data.num_symbols - num_end
  for src, tgt in zip(task.train.source, task.train.target):
    tokens = list(src[:-1])
    chunks, current = [], []
    for token in tokens:  # a chunk ends at an end symbol
      current.append(token)
      if token >= first_end:
        chunks.append(current)
        current = []
    assert not current and all(len(c) <= config.data.chunk_size for c in chunks)
    expected = [t for chunk in reversed(chunks) for t in chunk] + [EOS]
    np.testing.assert_array_equal(tgt, expected)


def test_train_batches_are_a_pure_function_of_the_step():
  task, _ = _task(num_train=400)
  boundaries = batching.bucket_boundaries(task.max_length, 2)
  a = batching.TrainBatches(task.train, 8, boundaries, seed=0)
  b = batching.TrainBatches(task.train, 8, boundaries, seed=0)
  for step in [
      0,
      5,
      a.num_batches - 1,
      a.num_batches,
      3 * a.num_batches + 2,
      7,
  ]:
    x, y = a.batch(step), b.batch(step)
    for key in x:
      np.testing.assert_array_equal(x[key], y[key])
  # One epoch uses each example at most once; shapes come from the bucket set.
  seen = np.concatenate(a.epoch(0))
  assert len(seen) == len(set(seen.tolist()))
  for step in range(a.num_batches):
    batch = a.batch(step)
    assert (
        batch['source'].shape[0] == 8 and batch['source'].shape[1] in boundaries
    )
    np.testing.assert_array_equal(batch['target_in'][:, 0], BOS)
    np.testing.assert_array_equal(
        batch['target_in'][:, 1:],
        np.where(
            batch['target_out'][:, 1:] == PAD, PAD, batch['target_out'][:, :-1]
        ),
    )
  assert not all(np.array_equal(a.epoch(0)[i], a.epoch(1)[i]) for i in range(3))


def test_a_bucket_smaller_than_a_batch_is_trained_with_a_longer_one():
  """Each epoch drops a bucket's partial batch: a bucket of fewer examples
  than one batch was never trained on."""
  task, _ = _task(num_train=400)
  lengths = batching.example_lengths(task.train)
  shortest, longest = int(lengths.min()), task.max_length
  small = int(np.sum(lengths == shortest))
  assert 0 < small < len(lengths) - small
  batches = batching.TrainBatches(
      task.train, small + 1, [shortest, longest], seed=0
  )
  seen = set()
  for epoch in range(20):
    for rows in batches.epoch(epoch):
      seen.update(rows.tolist())
      bucket = set(batches.bucket[rows].tolist())
      assert len(bucket) == 1
      assert lengths[rows].max() <= batches.boundaries[bucket.pop()]
  assert seen == set(range(len(lengths)))
  # The longest bucket short of a batch takes the nearest shorter one.
  top = int(np.sum(lengths == longest))
  assert 0 < top < len(lengths) - top
  few = batching.TrainBatches(
      task.train, top + 1, [longest - 1, longest], seed=0
  )
  assert set(few.bucket.tolist()) == {1}


def test_eval_batches_cover_every_example_once():
  task, _ = _task(num_eval=37)
  boundaries = batching.bucket_boundaries(task.max_length, 2)
  seen = []
  for rows, batch in batching.eval_batches(task.eval, 8, boundaries):
    assert (
        batch['source'].shape[0] == 8 and batch['source'].shape[1] in boundaries
    )
    seen += [r for r in rows if r >= 0]
    for row, index in enumerate(rows):
      if index >= 0:
        n = len(task.eval.source[index])
        np.testing.assert_array_equal(
            batch['source'][row, :n], task.eval.source[index]
        )
  assert sorted(seen) == list(range(37))


def test_eval_batches_pad_short_rows_and_long_sentences_apart():
  # 11 sentences of 1-6 tokens (EOS included) and 3 longer than the last
  # boundary (6).
  lengths = [3, 1, 6, 2, 5, 4, 1, 2, 3, 6, 5, 9, 20, 12]
  sequences = [np.append(np.arange(3, n + 2), EOS) for n in lengths]
  split = dataset.Split(sequences, sequences, [''] * 14, [''] * 14)
  batches = list(batching.eval_batches(split, 4, [3, 6], row_multiple=2))
  shapes = [batch['source'].shape for _, batch in batches]
  # The remainder (11 % 4 = 3 shortest) first, padded with a dummy row at
  # the shortest length; the long ones last, each batch as long as its
  # longest, its rows the ones it needs rounded up to 2.
  assert shapes == [(4, 3), (4, 6), (4, 6), (4, 20)]
  assert [int(np.sum(rows >= 0)) for rows, _ in batches] == [3, 4, 4, 3]
  assert list(batches[0][0][-1:]) == [-1] and list(batches[-1][0][-1:]) == [-1]
  seen = []
  for rows, batch in batches:
    for row, index in enumerate(rows):
      if index >= 0:
        n = lengths[index]
        np.testing.assert_array_equal(
            batch['source'][row, :n], sequences[index]
        )
        assert np.all(batch['source'][row, n:] == PAD)
        seen.append(index)
      else:
        assert batch['source'][row, 0] == EOS
  assert sorted(seen) == list(range(14))
  assert batching.eval_batch_count(split, 4, [3, 6]) == 4
  assert batching.eval_batch_count(split, 4, [3, 6], limit=13) == 4
  assert batching.eval_batch_count(split, 2, [3, 6], limit=12) == 7
  assert batching.eval_batch_count(split, 4, [3, 6], limit=0) == 0
  for size, limit in ((4, None), (4, 13), (2, 12), (3, 14), (16, None)):
    made = batching.eval_batches(split, size, [3, 6], limit=limit)
    assert batching.eval_batch_count(split, size, [3, 6], limit) == len(
        list(made)
    )
  # Two long ones in a batch of their own: 2 rows, no dummy.
  long_pair = list(batching.eval_batches(split, 4, [3, 6], limit=13))[-1]
  assert long_pair[1]['source'].shape == (2, 20)
  assert list(long_pair[0]) == [11, 12]


def test_bucket_boundaries():
  assert batching.bucket_boundaries(21, 4) == [6, 11, 16, 21]
  assert batching.bucket_boundaries(3, 8) == [1, 2, 3]


def test_vocab_round_trip_and_errors():
  vocab = vocab_lib.Vocab(['a', 'b', 'c'], allow_unk=False)
  ids = vocab.encode('a c b')
  assert ids[-1] == EOS and vocab.decode(ids) == 'a c b'
  with pytest.raises(
      errors.DataError, match="token 'z' on line 4 is not in the vocabulary"
  ):
    vocab.encode('a z', line=4)
  assert vocab_lib.Vocab(['a']).encode('q') == [vocab_lib.UNK, EOS]


def test_too_few_examples_for_a_batch_is_an_error():
  task, _ = _task(num_train=5)
  with pytest.raises(errors.DataError, match='lower train.batch_size'):
    batching.TrainBatches(
        task.train, 64, batching.bucket_boundaries(task.max_length, 2), seed=0
    )


def test_fitted_buckets_pad_least():
  rng = np.random.default_rng(0)
  lengths = np.minimum(rng.geometric(0.08, size=2_000) + 1, 30)  # skewed

  def padding(bounds):
    return int(
        np.sum(np.asarray(bounds)[np.searchsorted(bounds, lengths)] - lengths)
    )

  fitted = batching.fitted_boundaries(lengths, 30, 3)
  assert fitted[-1] == 30 and fitted == sorted(set(fitted)) and len(fitted) == 3
  # Exhaustive search over every pair of inner boundaries.
  best = min(
      padding([a, b, 30]) for a in range(1, 30) for b in range(a + 1, 30)
  )
  assert padding(fitted) == best
  assert padding(fitted) < padding(batching.bucket_boundaries(30, 3))
  # Fewer distinct lengths than buckets: one bucket each, the longest kept.
  assert batching.fitted_boundaries(np.array([3, 3, 7]), 21, 4) == [3, 7, 21]
  # More buckets than lengths: one per length (it fell to one bucket).
  every = np.arange(1, 8).repeat(5)
  assert batching.fitted_boundaries(every, 7, 8) == list(range(1, 8))


@pytest.mark.parametrize(
    'name, bucketing, num_buckets, training, decoding',
    [
        ('copy', 'auto', 0, ('even', 4), 4),  # embedded: as published
        ('text:/data/corpus', 'auto', 0, ('fitted', 16), 4),
        ('tfds:wmt17_translate/de-en', 'auto', 0, ('fitted', 16), 4),
        ('text:/data/corpus', 'even', 0, ('even', 16), 4),
        ('text:/data/corpus', 'auto', 8, ('fitted', 8), 8),
        ('copy', 'fitted', 6, ('fitted', 6), 6),
    ],
)
def test_automatic_bucketing_by_where_the_data_comes_from(
    name, bucketing, num_buckets, training, decoding
):
  config = defaults.get_config()
  config.data.name = name
  config.data.bucketing, config.data.num_buckets = bucketing, num_buckets
  assert batching.training_bucketing(config.data) == training
  assert batching.decoding_bucket_count(config.data) == decoding


def test_fitted_bucketing_trains_from_the_training_lengths():
  config = defaults.get_config('tiny')
  config.data.bucketing = 'fitted'
  config.data.num_buckets = 3
  config = validation.resolve(config)
  task = data.load_task(config.data, config.seed)
  batches = batching.training_batches(task, config)
  lengths = batching.example_lengths(task.train)
  assert batches.boundaries == batching.fitted_boundaries(
      lengths, config.data.max_length + 1, 3
  )
  for step in range(5):
    examples, length = batches.examples(step)
    assert lengths[examples].max() <= length
