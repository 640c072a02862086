"""The training input pipeline: batches by tokens, per-host shards, the checkpointed iterator."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax import data
from nmt_jax.config import defaults
from nmt_jax.config import validation
from nmt_jax.data import batching
from nmt_jax.system import errors
from nmt_jax.workdir import checkpoint


def _train_split(num_train=600, max_length=12, seed=0):
  config = defaults.get_config('tiny')
  config.data.num_train = num_train
  config.data.max_length = max_length
  return data.load_task(config.data, seed=seed)


def _host_rows(index, count):
  """What parallel.process_rows gives process `index` of `count` with one device each."""
  return lambda rows: slice(index * rows // count, (index + 1) * rows // count)


def test_batch_sizes_by_tokens():
  boundaries = [4, 7, 10, 13]
  assert batching.batch_sizes(boundaries, 32) == [32] * 4
  sizes = batching.batch_sizes(boundaries, 32, batch_tokens=100, multiple=2)
  assert sizes == [24, 14, 10, 6]  # floor(100 / L) rounded down to even
  with pytest.raises(
      errors.ConfigError, match='data.batch_tokens=20 holds no batch of 2'
  ):
    batching.batch_sizes(boundaries, 32, batch_tokens=20, multiple=2)


def test_batches_by_tokens_fill_their_bucket_and_use_each_example_once_per_epoch():
  task = _train_split()
  boundaries = batching.bucket_boundaries(task.max_length, 3)
  sizes = batching.batch_sizes(boundaries, 8, batch_tokens=60)
  batches = batching.TrainBatches(task.train, sizes, boundaries, seed=3)
  lengths = batching.example_lengths(task.train)
  seen = []
  for step in range(batches.num_batches):
    examples, length = batches.examples(step)
    rows = batches.batch(step)['source'].shape
    assert (
        rows == (sizes[boundaries.index(length)], length)
        and rows[0] * rows[1] <= 60
    )
    assert lengths[examples].max() <= length
    assert (
        boundaries.index(length) == 0
        or lengths[examples].min() > boundaries[boundaries.index(length) - 1]
    )
    seen += examples.tolist()
  assert len(seen) == len(set(seen))
  # Only each bucket's last partial batch is left out of an epoch.
  bucket = np.searchsorted(boundaries, lengths)
  assert len(seen) == sum(
      np.sum(bucket == b) // s * s for b, s in enumerate(sizes)
  )


@pytest.mark.parametrize('batch_tokens', [0, 60])
def test_two_hosts_shards_are_disjoint_and_cover_the_data(batch_tokens):
  task = _train_split()
  boundaries = batching.bucket_boundaries(task.max_length, 3)
  sizes = batching.batch_sizes(boundaries, 8, batch_tokens, multiple=2)
  batches = batching.TrainBatches(task.train, sizes, boundaries, seed=1)
  everything = []
  for step in range(batches.num_batches + 3):  # into the second epoch
    whole, length = batches.examples(step)
    host0, length0 = batches.examples(step, _host_rows(0, 2))
    host1, length1 = batches.examples(step, _host_rows(1, 2))
    assert length0 == length1 == length
    assert len(host0) == len(host1) == len(whole) // 2
    assert not set(host0.tolist()) & set(host1.tolist())
    assert sorted(host0.tolist() + host1.tolist()) == sorted(whole.tolist())
    # The hosts' arrays are the rows of the global batch.
    np.testing.assert_array_equal(
        np.concatenate(
            [batches.batch(step, _host_rows(i, 2))['source'] for i in (0, 1)]
        ),
        batches.batch(step)['source'],
    )
    if step < batches.num_batches:
      everything += host0.tolist() + host1.tolist()
  assert (
      len(everything)
      == len(set(everything))
      == sum(len(b) for b in batches.epoch(0))
  )


def _assert_same_batches(a, b):
  assert len(a) == len(b)
  for x, y in zip(a, b):
    assert x.keys() == y.keys()
    for key in x:
      np.testing.assert_array_equal(x[key], y[key])


def test_restored_iterator_yields_the_batches_of_an_uninterrupted_one(tmp_path):
  task = _train_split()
  boundaries = batching.bucket_boundaries(task.max_length, 3)
  batches = batching.TrainBatches(
      task.train, batching.batch_sizes(boundaries, 8, 60), boundaries, seed=2
  )
  num_steps = batches.num_batches + 5  # crosses an epoch boundary
  uninterrupted = list(batching.train_iterator(batches, num_steps))
  assert len(uninterrupted) == num_steps
  _assert_same_batches(
      uninterrupted, [batches.batch(s) for s in range(num_steps)]
  )

  interrupted = batching.train_iterator(batches, num_steps)
  stop = batches.num_batches - 2
  first_part = [next(interrupted) for _ in range(stop)]
  state = {'step': jnp.int32(stop), 'w': jnp.ones((3,))}
  ckpts = checkpoint.Checkpoints(str(tmp_path))
  ckpts.save(stop, state, {'step': stop}, data_iterator=interrupted)
  ckpts.close()
  next(interrupted)  # moves on after the save; must not matter

  ckpts = checkpoint.Checkpoints(str(tmp_path))
  resumed = batching.train_iterator(batches, num_steps)
  restored, _ = ckpts.restore(
      ckpts.latest_step(), checkpoint.abstract(state), resumed
  )
  ckpts.close()
  assert int(restored['step']) == stop and resumed.get_state() == {
      'next_index': stop
  }
  _assert_same_batches(first_part + list(resumed), uninterrupted)


def test_batch_tokens_config_error_before_anything_is_built():
  config = defaults.get_config('tiny')
  config.data.batch_tokens = 5
  with pytest.raises(
      errors.ConfigError, match='data.batch_tokens=5 holds no batch'
  ):
    validation.resolve(config)
  config.data.batch_tokens = 64
  validation.resolve(config)


def test_process_rows_of_one_process_is_the_whole_batch():
  from nmt_jax.system import parallel  # pylint: disable=g-import-not-at-top

  mesh = parallel.make_mesh((-1,))
  assert parallel.process_rows(12, mesh) == slice(0, 12)
  assert jax.process_count() == 1
