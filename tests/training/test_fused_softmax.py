"""The fused softmax layer and loss against NumPy and against plain autodiff."""

import functools

import jax
import jax.numpy as jnp
from jax.test_util import check_grads
import numpy as np
import optax
import pytest

from nmt_jax import train
from nmt_jax.data.vocab import PAD
from nmt_jax.model import seq2seq
from nmt_jax.training import fused_softmax
from nmt_jax.training import steps
from tests import helpers


def numpy_loss_and_grads(x, kernel, bias, targets, weights, smoothing):
  """float64 NumPy: the weighted smoothed cross-entropy and its gradients."""
  x, kernel, bias = (np.asarray(a, np.float64) for a in (x, kernel, bias))
  vocab = kernel.shape[1]
  logits = x @ kernel + bias
  logits = logits - logits.max(-1, keepdims=True)
  log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  soft = np.full(log_p.shape, smoothing / (vocab - 1) if smoothing else 0.0)
  soft[np.arange(len(targets)), targets] = 1.0 - smoothing
  entropy = -np.sum(
      np.where(soft > 0, soft * np.log(np.maximum(soft, 1e-300)), 0), -1
  )
  loss = -(soft * log_p).sum(-1) - entropy
  d_logits = (np.exp(log_p) - soft) * weights[:, None]
  return (
      np.sum(loss * weights),
      d_logits @ kernel.T,
      x.T @ d_logits,
      d_logits.sum(0),
  )


def random_rows(seed, rows=23, width=5, vocab=11):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(rows, width)).astype(np.float32)
  kernel = rng.normal(size=(width, vocab)).astype(np.float32)
  bias = rng.normal(size=(vocab,)).astype(np.float32)
  targets = rng.integers(0, vocab, rows).astype(np.int32)
  weights = (rng.random(rows) < 0.7).astype(np.float32)
  return x, kernel, bias, targets, weights


@pytest.mark.parametrize('smoothing', [0.0, 0.1])
@pytest.mark.parametrize('rows', [1, 8, 16, 23])
def test_loss_and_gradients_are_numpys(smoothing, rows):
  """Every chunking (one row, uneven chunks, all rows) gives NumPy's values."""
  x, kernel, bias, targets, weights = random_rows(0)

  def loss(x, kernel, bias):
    return 3.0 * fused_softmax.cross_entropy(
        x, kernel, bias, targets, weights, rows, smoothing
    )

  value, grads = jax.value_and_grad(loss, argnums=(0, 1, 2))(x, kernel, bias)
  want = numpy_loss_and_grads(x, kernel, bias, targets, weights, smoothing)
  np.testing.assert_allclose(value, 3.0 * want[0], rtol=1e-5)
  for got, expected in zip(grads, want[1:]):
    np.testing.assert_allclose(got, 3.0 * expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('smoothing', [0.0, 0.1])
def test_equals_autodiff_of_the_plain_loss(smoothing):
  """steps.cross_entropy of the layer's logits, differentiated by JAX."""
  x, kernel, bias, targets, weights = random_rows(1)
  targets = np.where(weights > 0, targets, PAD)

  def plain(x, kernel, bias):
    return steps.cross_entropy(x @ kernel + bias, targets, smoothing)[0]

  def fused(x, kernel, bias):
    weights = (targets != PAD).astype(np.float32)
    return fused_softmax.cross_entropy(
        x, kernel, bias, targets, weights, 8, smoothing
    )

  for a, b in zip(
      jax.value_and_grad(fused, (0, 1, 2))(x, kernel, bias),
      jax.value_and_grad(plain, (0, 1, 2))(x, kernel, bias),
  ):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
      np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-5)


def test_float64_gradients_pass_finite_differences():
  with jax.enable_x64(True):
    x, kernel, bias, targets, weights = random_rows(2, rows=9, vocab=6)
    f = functools.partial(
        lambda t, w, *a: fused_softmax.cross_entropy(*a, t, w, 4, 0.1),
        targets,
        weights,
    )
    args = tuple(np.asarray(a, np.float64) for a in (x, kernel, bias))
    check_grads(f, args, order=1, modes=['rev'])


def test_bfloat16_inputs_give_float32_loss_and_input_dtype_gradients():
  x, kernel, bias, targets, weights = random_rows(3)
  bf16 = [jnp.asarray(a, jnp.bfloat16) for a in (x, kernel, bias)]
  loss = lambda *a: fused_softmax.cross_entropy(*a, targets, weights, 8, 0.0)
  value, grads = jax.value_and_grad(loss, (0, 1, 2))(*bf16)
  assert value.dtype == jnp.float32
  assert [g.dtype for g in grads] == [jnp.bfloat16] * 3
  want = numpy_loss_and_grads(*bf16, targets, weights, 0.0)
  np.testing.assert_allclose(value, want[0], rtol=2e-2)
  for got, expected in zip(grads, want[1:]):
    np.testing.assert_allclose(
        np.asarray(got, np.float32), expected, rtol=5e-2, atol=5e-2
    )


@pytest.mark.parametrize(
    'num_rows, vocab, positions, batch, backend, want',
    [
        (3264, 16000, 0, 64, 'cpu', 256),  # 13 chunks of ~16 MB of logits
        (100, 24, 0, 10, 'cpu', 100),  # a small vocabulary: one chunk
        (3264, 16000, 0, 64, 'gpu', 3264),  # accelerators: one chunk
        # train.loss_chunk = 10 positions: 640 rows, spread as 6 chunks of 544
        (3264, 16000, 10, 64, 'cpu', 544),
        (3264, 16000, 10, 64, 'gpu', 544),
        (50, 24, 3, 10, 'cpu', 32),  # 2 chunks of 25 rows, rounded to 8s
    ],
)
def test_chunk_rows(num_rows, vocab, positions, batch, backend, want):
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(jax, 'default_backend', lambda: backend)
    rows = fused_softmax.chunk_rows(num_rows, vocab, positions, batch)
  assert rows == want
  chunks = -(-num_rows // rows)
  assert chunks * rows - num_rows < 8 * chunks or chunks == 1


def reference_step(setup, batch):
  """The update made with autodiff of the model's logits and the plain loss.

  Jitted as the train step is: op by op, each of Adam's updates and the
  scans' gradients compile per parameter shape (ten times the time).
  """
  config, model, optimizer = setup.config, setup.model, setup.optimizer

  def loss_fn(params):
    logits, _ = model.apply(
        {'params': params}, batch['source'], batch['target_in'], train=False
    )
    loss_sum, tokens = steps.cross_entropy(
        logits, batch['target_out'], config.train.label_smoothing
    )
    return loss_sum / tokens, loss_sum

  @jax.jit
  def step(state):
    (_, loss_sum), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.params
    )
    updates, _ = optimizer.update(grads, state.opt_state, state.params)
    return optax.apply_updates(state.params, updates), loss_sum, grads

  return step(setup.state)


@pytest.mark.parametrize(
    'model',
    [{}, {'tie_embeddings': True, 'output_hidden_size': 16}],
    ids=['plain', 'tied_and_output_hidden'],
)
def test_a_train_step_is_the_autodiff_step(model):
  """The train step's loss, gradient norm and update equal autodiff's.

  (bfloat16: test_bfloat16_inputs_give_float32_loss_and_input_dtype_gradients.)
  """
  config = helpers.tiny_config('global', 'general', dropout=0.0, **model)
  config.train.label_smoothing = 0.1
  setup = train.build(config)
  batch = setup.batches.batch(0)
  state, metrics = helpers.jitted_train_step(setup)(setup.state, batch)
  params, loss_sum, grads = reference_step(setup, batch)
  np.testing.assert_allclose(metrics['loss_sum'], loss_sum, rtol=1e-5)
  np.testing.assert_allclose(
      metrics['grad_norm'], optax.global_norm(grads), rtol=1e-4
  )
  # Adam's first update is about +-lr wherever a gradient is not tiny; where
  # it is, float32 rounding moves it by a fraction of lr.
  atol = 0.02 * setup.config.train.learning_rate
  for a, b in zip(
      jax.tree_util.tree_leaves(state.params), jax.tree_util.tree_leaves(params)
  ):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=atol)


def test_softmax_layer_makes_the_models_logits():
  for model in ({}, {'tie_embeddings': True}, {'output_hidden_size': 7}):
    config = helpers.tiny_config('global', 'general', **model)
    net = helpers.make_model(config)
    params = helpers.init_params(net)
    htilde = jnp.asarray(
        np.random.default_rng(0).normal(size=(2, 3, config.model.hidden_size)),
        jnp.float32,
    )
    x, kernel, bias = net.apply(
        {'params': params}, htilde, method=seq2seq.Seq2Seq.softmax_layer
    )
    want = net.apply(
        {'params': params}, htilde, method=seq2seq.Seq2Seq.output_logits
    )
    np.testing.assert_allclose(x @ kernel + bias, want, rtol=1e-5, atol=1e-6)
