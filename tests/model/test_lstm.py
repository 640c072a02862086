"""The LSTM layer against flax's LSTMCell, its hand-written VJP against autodiff."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.test_util import check_grads
import numpy as np
import pytest

from nmt_jax.model import lstm


def _flax_reference(params, x, lengths, hidden):
  """Scans flax's nn.LSTMCell (gate order i, f, g, o) with our kernels split per gate."""
  w_x, w_h, b = (
      params['input_kernel'],
      params['recurrent_kernel'],
      params['bias'],
  )
  names = ['i', 'f', 'g', 'o']
  cell_params = {}
  for k, name in enumerate(names):
    cell_params[f'i{name}'] = {'kernel': w_x[:, k * hidden : (k + 1) * hidden]}
    cell_params[f'h{name}'] = {
        'kernel': w_h[:, k * hidden : (k + 1) * hidden],
        'bias': b[k * hidden : (k + 1) * hidden],
    }
  cell = jax.jit(nn.LSTMCell(hidden).apply)
  carry = (jnp.zeros((x.shape[0], hidden)),) * 2
  outputs = []
  for t in range(x.shape[1]):
    new, h = cell({'params': cell_params}, carry, x[:, t])
    valid = (t < lengths)[:, None]
    carry = tuple(jnp.where(valid, n, o) for n, o in zip(new, carry))
    outputs.append(h)
  return jnp.stack(outputs, 1), carry


def test_lstm_matches_flax_lstm_cell():
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(3, 6, 5)), jnp.float32)
  lengths = jnp.array([6, 2, 4])
  layer = lstm.LSTM(7, forget_bias=1.0)
  params = layer.init(jax.random.key(0), jnp.swapaxes(x, 0, 1), lengths)[
      'params'
  ]
  params = jax.tree_util.tree_map(
      lambda p: p + 0.1 * jax.random.normal(jax.random.key(1), p.shape), params
  )
  out, (c, h) = jax.jit(layer.apply)(
      {'params': params}, jnp.swapaxes(x, 0, 1), lengths
  )
  out = jnp.swapaxes(out, 0, 1)
  ref_out, (ref_c, ref_h) = _flax_reference(params, x, lengths, 7)
  mask = (jnp.arange(6)[None, :] < lengths[:, None])[..., None]
  np.testing.assert_allclose(
      jnp.where(mask, out, 0), jnp.where(mask, ref_out, 0), atol=1e-5
  )
  np.testing.assert_allclose(c, ref_c, atol=1e-5)
  np.testing.assert_allclose(h, ref_h, atol=1e-5)


def test_forget_bias_initialised():
  bias = lstm.forget_bias_init(4, 1.0)(None, (16,))
  np.testing.assert_array_equal(bias, [0] * 4 + [1] * 4 + [0] * 8)


def _layer_norm_reference(x, scale, bias, eps=1e-5):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / jnp.sqrt(var + eps) * scale + bias


# (recurrent dropout, layer normalisation): the hand-written backward, its
# masked h, and the recomputing backward with layer normalisation.
@pytest.mark.parametrize(
    'dropped,normed',
    [(False, False), (True, False), (False, True), (True, True)],
)
def test_recurrence_vjp_matches_autodiff(dropped, normed):
  with jax.enable_x64(True):
    rng = np.random.default_rng(0)
    t, b, h = 6, 4, 3
    x_gates = jnp.asarray(rng.normal(size=(t, b, 4 * h)))
    w_h = jnp.asarray(rng.normal(size=(h, 4 * h)) * 0.5)
    lengths = np.array([6, 1, 3, 5])
    valid = jnp.asarray(
        (np.arange(t)[:, None, None] < lengths[None, :, None]).astype(
            np.float64
        )
    )
    weights = [
        jnp.asarray(rng.normal(size=s)) for s in [(t, b, h), (b, h), (b, h)]
    ]
    h_keep = None
    if dropped:  # keep mask / (1 - 0.5)
      h_keep = jnp.asarray(2.0 * (rng.random((b, h)) < 0.5))
    norm = None
    if normed:
      norm = {
          name: tuple(
              jnp.asarray(1 + 0.3 * rng.normal(size=w)) for _ in range(2)
          )
          for name, w in (('recurrent', 4 * h), ('cell', h))
      }

    def reference(x_gates, w_h, norm):
      def step(carry, inputs):
        gates, v = inputs
        c, hid = carry
        rec = (hid if h_keep is None else hid * h_keep) @ w_h
        if norm is not None:
          rec = _layer_norm_reference(rec, *norm['recurrent'])
        i, f, g, o = jnp.split(gates + rec, 4, axis=-1)
        c_new = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        c_out = c_new
        if norm is not None:
          c_out = _layer_norm_reference(c_new, *norm['cell'])
        new = (c_new, jax.nn.sigmoid(o) * jnp.tanh(c_out))
        return tuple(jnp.where(v > 0, n, o) for n, o in zip(new, carry)), new[1]

      zeros = jnp.zeros((b, h))
      carry, out = jax.lax.scan(step, (zeros, zeros), (x_gates, valid))
      return out, carry

    def loss(fn):
      def f(x_gates, w_h, norm):
        out, (c, hid) = fn(x_gates, w_h, norm)
        return (
            (out * weights[0]).sum()
            + (c * weights[1]).sum()
            + (jnp.sin(hid) * weights[2]).sum()
        )

      return jax.jit(f)

    custom = lambda x_gates, w_h, norm: lstm.lstm_recurrence(
        x_gates, w_h, valid, h_keep, norm
    )
    args = (x_gates, w_h, norm)
    for a, r in zip(
        jax.tree_util.tree_leaves(jax.jit(custom)(*args)),
        jax.tree_util.tree_leaves(jax.jit(reference)(*args)),
    ):
      np.testing.assert_allclose(a, r, atol=1e-12)
    got = jax.jit(jax.grad(loss(custom), argnums=(0, 1, 2)))(*args)
    want = jax.jit(jax.grad(loss(reference), argnums=(0, 1, 2)))(*args)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(
        want
    )
    for g, w in zip(
        jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    ):
      np.testing.assert_allclose(g, w, atol=1e-10)
    check_grads(loss(custom), args, order=1, modes=['rev'])


def test_recurrence_stops_after_the_longest_row_outside_differentiation():
  """Undifferentiated (encoding for decoding), the loop runs the real steps.

  Every real step and the final carry equal the differentiated recurrence's
  (a scan over all steps, which also computes outputs at padded steps);
  outputs past the batch's longest row are zeros, never computed.
  """
  rng = np.random.default_rng(2)
  t, b, h = 7, 3, 4
  x_gates = jnp.asarray(rng.normal(size=(t, b, 4 * h)), jnp.float32)
  w_h = jnp.asarray(rng.normal(size=(h, 4 * h)) * 0.5, jnp.float32)
  lengths = np.array([4, 1, 3])
  valid = jnp.asarray(
      (np.arange(t)[:, None, None] < lengths[None, :, None]).astype(np.float32)
  )
  out, carry = jax.jit(lstm.lstm_recurrence)(x_gates, w_h, valid)
  (scan_out, scan_carry), _ = jax.vjp(
      lambda x: lstm.lstm_recurrence(x, w_h, valid), x_gates
  )
  np.testing.assert_allclose(out[:4], scan_out[:4], rtol=1e-6, atol=1e-7)
  np.testing.assert_array_equal(out[4:], 0)
  assert np.all(np.abs(scan_out[4:]) > 0)  # the scan computes them
  for a, c in zip(carry, scan_carry):
    np.testing.assert_allclose(a, c, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize('longest', [257, 259])
def test_bfloat16_encodes_every_token_of_a_long_source(longest):
  # bfloat16 holds no odd integer above 256: a loop bound summed in it
  # stopped one step early (257) or ran one step past the end (259).
  rng = np.random.default_rng(3)
  t, b, h = longest, 2, 4
  x_gates = jnp.asarray(rng.normal(size=(t, b, 4 * h)), jnp.bfloat16)
  w_h = jnp.asarray(rng.normal(size=(h, 4 * h)) * 0.5, jnp.bfloat16)
  lengths = np.array([longest, 5])
  valid = jnp.asarray(
      (np.arange(t)[:, None, None] < lengths[None, :, None]), jnp.bfloat16
  )
  out, carry = jax.jit(lstm.lstm_recurrence)(x_gates, w_h, valid)
  (scan_out, scan_carry), _ = jax.vjp(
      lambda x: lstm.lstm_recurrence(x, w_h, valid), x_gates
  )
  assert np.all(np.asarray(out[-1, 0], np.float32) != 0)
  np.testing.assert_array_equal(
      np.asarray(out[:, 0], np.float32), np.asarray(scan_out[:, 0], np.float32)
  )
  for a, c in zip(carry, scan_carry):
    np.testing.assert_array_equal(
        np.asarray(a, np.float32), np.asarray(c, np.float32)
    )


def test_padding_never_changes_valid_outputs():
  rng = np.random.default_rng(1)
  lengths = jnp.array([5, 2, 3])
  x = jnp.asarray(rng.normal(size=(3, 5, 4)), jnp.float32)
  noisy = jnp.where(
      (jnp.arange(5)[None, :] < lengths[:, None])[..., None], x, 100.0
  )
  padded = jnp.concatenate([x, jnp.ones((3, 3, 4))], 1)  # longer padding
  layer = lstm.BiLSTM(6)
  time_major = lambda a: jnp.swapaxes(a, 0, 1)
  params = layer.init(jax.random.key(0), time_major(x), lengths)
  mask = (jnp.arange(5)[None, :] < lengths[:, None])[..., None]
  apply = jax.jit(layer.apply)
  out, carry = apply(params, time_major(x), lengths)
  out = time_major(out)
  for other in (noisy, padded):
    out2, carry2 = apply(params, time_major(other), lengths)
    out2 = time_major(out2)
    np.testing.assert_allclose(
        jnp.where(mask, out2[:, :5], 0), jnp.where(mask, out, 0), atol=1e-6
    )
    for a, b in zip(carry, carry2):
      np.testing.assert_allclose(a, b, atol=1e-6)


def test_reverse_padded():
  x = jnp.arange(10).reshape(2, 5).T[..., None]  # [T=5, B=2, 1]
  out = lstm.reverse_padded(x, jnp.array([3, 5]))[..., 0].T
  np.testing.assert_array_equal(out, [[2, 1, 0, 3, 4], [9, 8, 7, 6, 5]])


def test_explicit_weight_gradients_equal_autodiffs():
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(3, 5, 6)), jnp.float32)
  w = jnp.asarray(rng.normal(size=(6, 8)), jnp.float32)
  dy = jnp.asarray(rng.normal(size=(3, 5, 8)), jnp.float32)
  reference = jax.vjp(lambda x, w: x @ w, x, w)[1](dy)
  for explicit in (True, False):
    out, vjp = jax.vjp(functools.partial(lstm.matmul, explicit=explicit), x, w)
    np.testing.assert_array_equal(out, x @ w)
    for got, want in zip(vjp(dy), reference):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  # The transpose is materialised apart from the dot only when asked for.
  grad = lambda explicit: jax.grad(
      lambda w: jnp.sum(lstm.matmul(x, w, explicit) * dy)
  )
  assert 'optimization_barrier' in str(jax.make_jaxpr(grad(True))(w))
  assert 'optimization_barrier' not in str(jax.make_jaxpr(grad(False))(w))


def test_explicit_weight_gradients_do_not_change_the_layers_gradients():
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.normal(size=(6, 3, 4)), jnp.float32)  # [T, B, in]
  lengths = jnp.array([6, 3, 1])
  grads = {}
  for explicit in (True, False):
    layer = lstm.BiLSTM(8, explicit_weight_grads=explicit)
    params = layer.init(jax.random.key(0), x, lengths)
    loss = lambda p, layer=layer: jnp.sum(layer.apply(p, x, lengths)[0] ** 2)
    grads[explicit] = jax.jit(jax.grad(loss))(params)
  jax.tree_util.tree_map(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
      grads[True],
      grads[False],
  )
