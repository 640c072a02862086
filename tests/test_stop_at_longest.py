"""Length-sorted training batches (data.sort_pool) and training loops that
stop at the batch's longest row (model.stop_at_longest): same values,
padding moved past the longest row."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax import attention
from nmt_jax import data
from nmt_jax import default_config
from nmt_jax import lstm
from nmt_jax.data import batching
from nmt_jax.vocab import PAD
from tests import helpers
from tests import test_hoisting


def _valid(lengths, steps):
  return jnp.asarray(
      (np.arange(steps)[:, None, None] < np.asarray(lengths)[None, :, None])
  ).astype(jnp.float32)


@pytest.mark.parametrize('unroll', [1, 2])
def test_the_recurrence_gives_the_same_values_and_gradients_when_it_stops(
    unroll,
):
  rng = np.random.default_rng(0)
  steps, batch, h = 9, 3, 4
  x_gates = jnp.asarray(rng.normal(size=(steps, batch, 4 * h)), jnp.float32)
  w_h = jnp.asarray(0.3 * rng.normal(size=(h, 4 * h)), jnp.float32)
  valid = _valid([3, 6, 2], steps)  # longest row: 6 of 9 steps
  weights = jnp.asarray(rng.normal(size=(steps, batch, h)), jnp.float32)

  def run(stop):
    def loss(x, w):
      out, (c, hh) = lstm.lstm_recurrence(x, w, valid, True, unroll, stop)
      return jnp.sum(out * valid * weights) + jnp.sum(c * hh), out

    return jax.jit(jax.value_and_grad(loss, (0, 1), has_aux=True))(x_gates, w_h)

  (loss_a, out_a), grads_a = run(False)
  (loss_b, out_b), grads_b = run(True)
  np.testing.assert_allclose(loss_a, loss_b, rtol=1e-6)
  for a, b in zip(grads_a, grads_b):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  # It did stop: no output past the longest row, where the plain loop
  # computes one from the padding's gates.
  assert np.all(np.asarray(out_b)[6:] == 0) and np.all(out_a[6:] != 0)
  np.testing.assert_allclose(out_a[:6], out_b[:6], rtol=1e-6)


def _padded_run(kind, **model):
  """(loss, grads) of a train-mode backward pass (dropout on) on a batch
  whose rows all end at least 3 steps before its padded length."""
  net = helpers.make_model(helpers.tiny_config(kind, dropout=0.3, **model))
  params = helpers.init_params(net, seed=2)
  batch = helpers.random_batch(np.random.default_rng(1), 3, 7, 6)
  source, target_in, target_out = (
      np.pad(x, ((0, 0), (0, 3)), constant_values=PAD) for x in batch
  )

  def loss(p):
    logits, _ = net.apply(
        {'params': p},
        source,
        target_in,
        train=True,
        rngs={'dropout': jax.random.key(3)},
    )
    log_probs = jax.nn.log_softmax(logits)
    picked = jnp.take_along_axis(log_probs, target_out[..., None], -1)[..., 0]
    return -jnp.sum(picked * (target_out != PAD))

  return jax.jit(jax.value_and_grad(loss))(params)


@pytest.mark.parametrize(
    'kind,hoist',
    [(kind, True) for kind in attention.kinds()] + [('global', False)],
)
def test_every_kind_trains_the_same_when_the_loops_stop_at_the_longest_row(
    kind, hoist
):
  test_hoisting._assert_same_run(
      _padded_run(kind, hoist_weight_grads=hoist),
      _padded_run(kind, hoist_weight_grads=hoist, stop_at_longest=True),
      exact_loss=False,
  )


def test_the_decoder_outputs_nothing_past_the_longest_row():
  source, target_in, _ = helpers.random_batch(np.random.default_rng(2), 3, 5, 4)
  pad = lambda x: np.pad(x, ((0, 0), (0, 4)), constant_values=PAD)
  features = {}
  for stop in (False, True):
    net = helpers.make_model(helpers.tiny_config(stop_at_longest=stop))
    params = helpers.init_params(net)
    htilde, _ = net.apply(
        {'params': params},
        pad(source),
        pad(target_in),
        method=net.features,
    )
    features[stop] = np.asarray(htilde)
  last = int(np.max(np.sum(target_in != PAD, axis=1)))
  assert np.all(features[True][:, last:] == 0)
  assert np.all(features[False][:, last:] != 0)
  np.testing.assert_allclose(
      features[True][:, :last], features[False][:, :last], rtol=1e-6
  )


def _batches(sort_pool, seed=4):
  config = default_config.get_config('tiny')
  config.data.num_train, config.data.max_length = 2_000, 30
  task = data.load_task(config.data, seed=0)
  boundaries = batching.bucket_boundaries(task.max_length, 2)
  return batching.TrainBatches(task.train, 16, boundaries, seed, sort_pool)


def _padding(batches, epoch=0):
  """(padded positions, of which past each batch's longest row) of an epoch."""
  lengths = batching.example_lengths(batches.split)
  padded = past = 0
  for step in range(
      epoch * batches.num_batches, (epoch + 1) * batches.num_batches
  ):
    examples, length = batches.examples(step)
    padded += np.sum(length - lengths[examples])
    past += len(examples) * (length - lengths[examples].max())
  return padded, past


def test_sorted_pools_keep_the_epoch_and_put_the_padding_past_the_longest_row():
  plain, sorted_ = _batches(0), _batches(8)
  assert sorted_.num_batches == plain.num_batches
  lengths = batching.example_lengths(sorted_.split)
  for epoch in range(2):
    steps = range(epoch * plain.num_batches, (epoch + 1) * plain.num_batches)
    seen = np.concatenate([sorted_.examples(s)[0] for s in steps])
    # Each example at most once, as many as without pools.
    assert len(set(seen.tolist())) == len(seen) == 16 * plain.num_batches
    # Rows of a batch have nearly one length.
    spread = [np.ptp(lengths[sorted_.examples(s)[0]]) for s in steps]
    assert np.median(spread) <= 2
  padded_plain, past_plain = _padding(plain)
  padded_sorted, past_sorted = _padding(sorted_)
  # Random batches: almost no padding lies past the longest row; sorted pools:
  # nearly all of it, the total unchanged.
  assert past_plain < 0.1 * padded_plain
  assert past_sorted > 0.85 * padded_sorted
  assert abs(padded_sorted - padded_plain) < 0.05 * padded_plain
  # A pure function of (seed, step); another seed, other batches.
  again = _batches(8)
  assert all(
      np.array_equal(again.examples(s)[0], sorted_.examples(s)[0])
      for s in range(5)
  )
  assert not np.array_equal(
      _batches(8, seed=5).examples(0)[0], sorted_.examples(0)[0]
  )
