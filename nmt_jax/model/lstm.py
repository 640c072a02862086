"""LSTM layers over padded batches.

The input-to-gate projection of a whole sequence is one GEMM outside the
recurrence ([B*T, in] x [in, 4H]); only h @ W_h runs per step. flax's
`nn.LSTMCell` computes both per step, which costs CPU time at our sizes.
The math is the standard LSTM with gate order (i, f, g, o):

  i, f, g, o = split(x W_x + h W_h + b)
  c' = sigmoid(f) * c + sigmoid(i) * tanh(g);   h' = sigmoid(o) * tanh(c')

(tests/test_lstm.py checks it against flax's `nn.LSTMCell`). The
decoder's stack runs one step at a time (nmt_jax/model/decoder_cell.py), its
inputs depending on the previous step's output.
"""

import functools
from typing import Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp

Carry = Tuple[jax.Array, jax.Array]  # (c, h), each [B, H]


def forget_bias_init(hidden_size, forget_bias):
  """Bias init: zeros except `forget_bias` on the forget gate."""

  def init(key, shape, dtype=jnp.float32):
    del key
    return (
        jnp.zeros(shape, dtype)
        .at[hidden_size : 2 * hidden_size]
        .set(forget_bias)
    )

  return init


def weight_grad(x2, dy2, explicit: bool):
  """x2^T dy2 [in, out] from x2 [N, in], dy2 [N, out].

  XLA:CPU runs a dot contracting its left operand's first dimension on a
  slow path (Eigen, 17-26 GFLOP/s at our shapes against 45-72 for a plain
  GEMM). With `explicit`, x2^T is materialised first (an optimization
  barrier keeps XLA from folding the transpose back into the dot), so the
  product is a plain GEMM: same values; a training step on CPU measured
  x1.09 and x0.96 on two VMs (docs/performance.md).
  """
  x_t = x2.T
  if explicit:
    x_t = jax.lax.optimization_barrier(x_t)
  return x_t @ dy2


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def matmul(x, w, explicit=True):
  """x [..., in] @ w [in, out], its weight gradient by `weight_grad`."""
  return x @ w


def _matmul_fwd(x, w, explicit):
  return x @ w, (x, w)


def _matmul_bwd(explicit, residuals, dy):
  x, w = residuals
  x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
  return dy @ w.T, weight_grad(x2, dy2, explicit).astype(w.dtype)


matmul.defvjp(_matmul_fwd, _matmul_bwd)


def project(x, kernel, explicit_weight_grads: bool, probe=None):
  """x [..., in] @ kernel [in, out].

  Without a probe the kernel gradient is `weight_grad`'s; with one
  ([..., out] zeros) the kernel gets none here and the caller adds it from
  the probe's cotangent (nmt_jax/model/hoisting.py).
  """
  if probe is None:
    return matmul(x, kernel, explicit_weight_grads)
  return x @ jax.lax.stop_gradient(kernel) + probe


def dropout(x, keep, rate: float):
  """x with dropout by a drawn keep mask (as nn.Dropout); x if keep is None."""
  if keep is None:
    return x
  return jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x))


def _gate_activations(gates):
  """gates [B, 4H] -> sigmoid of all four gate blocks [B, 4, H], tanh(g) [B, H].

  One sigmoid over the contiguous [B, 4, H] block is ~2x faster on XLA:CPU
  than four sigmoids over strided slices; the g block's sigmoid is unused.
  """
  blocks = gates.reshape(gates.shape[:-1] + (4, gates.shape[-1] // 4))
  return jax.nn.sigmoid(blocks), jnp.tanh(blocks[..., 2, :])


def lstm_update(carry: Carry, gates: jax.Array) -> Carry:
  """One LSTM update from pre-activation gates [B, 4H] -> new (c, h)."""
  c, _ = carry
  s, g = _gate_activations(gates)
  c = s[..., 1, :] * c + s[..., 0, :] * g
  return c, s[..., 3, :] * jnp.tanh(c)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def lstm_recurrence(x_gates, w_h, valid, explicit_weight_grads=True, unroll=1):
  """The recurrence of an LSTM layer over time, from zero initial state.

  Args:
    x_gates: [T, B, 4H] input projections x_t W_x + b.
    w_h: [H, 4H] recurrent kernel.
    valid: [T, B, 1] float, 1 where step t of row b is a real token. At other
      steps the carry is left unchanged (outputs there are still computed).
    explicit_weight_grads: dW_h by `weight_grad(..., explicit=True)`.
    unroll: steps per iteration of the forward and backward loops
      (`jax.lax.scan`'s unroll; the same values, fewer loop iterations).
  Returns:
    outputs [T, B, H] (h of every step), final carry (c, h) [B, H].

  The hand-written backward (below) keeps the per-step loop to one GEMM and a
  broadcast multiply; autodiff's loop body is ~3x slower on XLA:CPU. Outside
  differentiation (encoding for decoding) the loop stops after the batch's
  longest row: outputs past it are zeros.
  """
  del explicit_weight_grads, unroll
  return _recurrence_to_longest(x_gates, w_h, valid)


def _lstm_step(gates_t, w_h, valid_t, carry):
  """One step -> (new carry, h_new, (sigmoids, tanh(g), tanh(c_new)))."""
  c, h = carry
  s, g = _gate_activations(gates_t + h @ w_h)
  c_new = s[:, 1] * c + s[:, 0] * g
  tanh_c = jnp.tanh(c_new)
  h_new = s[:, 3] * tanh_c
  # A select, not c + valid * (c_new - c): exact (bfloat16 rounds that sum
  # off c_new by an ulp of c), at the same cost.
  keep = valid_t > 0
  carry = (jnp.where(keep, c_new, c), jnp.where(keep, h_new, h))
  return carry, h_new, (s, g, tanh_c)


def _recurrence_to_longest(x_gates, w_h, valid):
  """The forward recurrence, a loop over the steps up to the longest row.

  Steps past it (a length bucket's padding) cost nothing here.
  """
  steps, batch, h_size = x_gates.shape[0], x_gates.shape[1], w_h.shape[0]
  # Counted in int32: a bfloat16 sum holds no odd integer above 256 (257
  # rounds to 256 and the last token would not be encoded).
  last = jnp.max(jnp.sum(valid, axis=0, dtype=jnp.int32))

  def body(state):
    t, carry, outputs = state
    gates_t = jax.lax.dynamic_index_in_dim(x_gates, t, keepdims=False)
    valid_t = jax.lax.dynamic_index_in_dim(valid, t, keepdims=False)
    carry, h_new, _ = _lstm_step(gates_t, w_h, valid_t, carry)
    outputs = jax.lax.dynamic_update_index_in_dim(outputs, h_new, t, 0)
    return t + 1, carry, outputs

  zeros = jnp.zeros((batch, h_size), x_gates.dtype)
  outputs = jnp.zeros((steps, batch, h_size), x_gates.dtype)
  _, carry, outputs = jax.lax.while_loop(
      lambda state: state[0] < last, body, (0, (zeros, zeros), outputs)
  )
  return outputs, carry


def _recurrence_forward(x_gates, w_h, valid, unroll):
  def step(carry, inputs):
    gates_t, valid_t = inputs
    new_carry, h_new, (s, g, tanh_c) = _lstm_step(gates_t, w_h, valid_t, carry)
    c, h = carry
    return new_carry, (h_new, (h, c, s, g, tanh_c))

  batch, h_size = x_gates.shape[1], w_h.shape[0]
  zeros = jnp.zeros((batch, h_size), x_gates.dtype)
  carry, (outputs, residuals) = jax.lax.scan(
      step, (zeros, zeros), (x_gates, valid), unroll=unroll
  )
  return (outputs, carry), residuals


def _recurrence_fwd(x_gates, w_h, valid, explicit_weight_grads, unroll):
  (outputs, carry), (h_prev, c_prev, s, g, tanh_c) = _recurrence_forward(
      x_gates, w_h, valid, unroll
  )
  # All steps at once: d z_t = select(gate == o, dh_t, dc_t) * multipliers_t.
  gate = jnp.arange(4)[:, None]  # [4, 1]
  i, f, o = s[..., 0, :], s[..., 1, :], s[..., 3, :]
  operand = jnp.where(
      gate == 0,
      g[..., None, :],
      jnp.where(
          gate == 1,
          c_prev[..., None, :],
          jnp.where(gate == 2, i[..., None, :], tanh_c[..., None, :]),
      ),
  )
  slope = jnp.where(gate == 2, 1 - g[..., None, :] ** 2, s * (1 - s))
  multipliers = operand * slope  # [T, B, 4, H]
  dc_from_h = o * (1 - tanh_c**2)  # [T, B, H]
  return (outputs, carry), (w_h, valid, h_prev, multipliers, dc_from_h, f)


def _recurrence_bwd(explicit_weight_grads, unroll, residuals, cotangents):
  w_h, valid, h_prev, multipliers, dc_from_h, f = residuals
  d_outputs, (dc_final, dh_final) = cotangents
  gate = jnp.arange(4)[:, None]

  def step(carry, inputs):
    dc_carry, dh_carry = carry  # d loss / d carry after step t
    d_out, valid_t, mult, dc_h, f_t = inputs
    dh = d_out + valid_t * dh_carry  # d / d h_new
    dc = valid_t * dc_carry + dh * dc_h  # d / d c_new
    dz = (jnp.where(gate == 3, dh[:, None, :], dc[:, None, :]) * mult).reshape(
        dh.shape[0], -1
    )
    dh_prev = dz @ w_h.T + (1 - valid_t) * dh_carry
    dc_prev = dc * f_t + (1 - valid_t) * dc_carry
    return (dc_prev, dh_prev), dz

  _, dz = jax.lax.scan(
      step,
      (dc_final, dh_final),
      (d_outputs, valid, multipliers, dc_from_h, f),
      reverse=True,
      unroll=unroll,
  )
  # One [H, T*B] x [T*B, 4H] GEMM instead of T small ones.
  d_w_h = weight_grad(
      h_prev.reshape(-1, h_prev.shape[-1]),
      dz.reshape(-1, dz.shape[-1]),
      explicit_weight_grads,
  )
  return dz, d_w_h, jnp.zeros_like(valid)


lstm_recurrence.defvjp(_recurrence_fwd, _recurrence_bwd)


def input_gates(x, w_x, b, explicit_weight_grads: bool, vocabulary=None):
  """Input gates x W_x + b [..., 4H] of inputs x [..., in].

  With `vocabulary` ([V, in]) x is token ids [...] standing for its rows,
  and the gates are rows of the table vocabulary W_x + b [V, 4H]: the same
  values from a GEMM over V rows instead of one over every position, and a
  scatter-add of the gates' gradient into V rows in the backward pass (on
  CPU, 3.4 vs 108 ms forward and backward for 6,400 positions, 24 words,
  256 -> 1024).
  """
  if vocabulary is None:
    return matmul(x, w_x, explicit_weight_grads) + b
  table = matmul(vocabulary, w_x, explicit_weight_grads) + b
  return jnp.take(table, x, axis=0)


def uses_gate_table(config, vocab_size: int, positions: int, train: bool):
  """Whether layer 0's input gates come from a per-word table (a lookup).

  model.gate_table: 'on', 'off' or 'auto' (when the vocabulary has fewer
  words than the batch has positions, so the table's GEMM is the smaller).
  Never with dropout on the embeddings in training: the table holds the
  gates of undropped embeddings.
  """
  if train and config.dropout:
    return False
  return table_pays(config.gate_table, vocab_size, positions)


def table_pays(mode: str, vocab_size: int, lookups: int) -> bool:
  """'on', or 'auto' where a table of V rows costs less than `lookups` rows
  of GEMM: the gate tables' rule, in training and in decoding."""
  return mode == 'on' or (mode == 'auto' and vocab_size < lookups)


def reverse_padded(x: jax.Array, lengths: jax.Array) -> jax.Array:
  """Reverses each column of time-major x [T, B, ...] within its length.

  Padding stays put.
  """
  t = jnp.arange(x.shape[0])[:, None]  # [T, 1]
  index = jnp.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)  # [T, B]
  return jnp.take_along_axis(
      x, index.reshape(index.shape + (1,) * (x.ndim - 2)), axis=0
  )


class LSTM(nn.Module):
  """A unidirectional LSTM layer over a padded sequence.

  Steps at padded positions leave the carry unchanged, so the returned carry
  is the state after each row's last real token.
  """

  features: int
  forget_bias: float = 1.0
  reverse: bool = False
  explicit_weight_grads: bool = True  # see weight_grad
  unroll: int = 1  # see lstm_recurrence

  @nn.compact
  def __call__(self, x: jax.Array, lengths: jax.Array, vocabulary=None):
    """Time-major x [T, B, in], lengths [B] -> outputs, final carry (c, h).

    The outputs are [T, B, H]; c and h are [B, H]. With `vocabulary`
    ([V, in], an embedding matrix) x is token ids [T, B] whose inputs are
    its rows: the input gates are then rows of a [V, 4H] table
    vocabulary W_x + b (see `input_gates`).
    """
    length = x.shape[0]
    h_size = self.features
    inputs = x if vocabulary is None else vocabulary
    w_x = self.param(
        'input_kernel',
        nn.initializers.lecun_normal(),
        (inputs.shape[-1], 4 * h_size),
    )
    w_h = self.param(
        'recurrent_kernel', nn.initializers.orthogonal(), (h_size, 4 * h_size)
    )
    b = self.param(
        'bias', forget_bias_init(h_size, self.forget_bias), (4 * h_size,)
    )
    if self.reverse:
      x = reverse_padded(x, lengths)
    # [T, B, 4H]
    x_gates = input_gates(x, w_x, b, self.explicit_weight_grads, vocabulary)
    valid = (jnp.arange(length)[:, None, None] < lengths[None, :, None]).astype(
        x_gates.dtype
    )
    # [T, B, H]
    outputs, carry = lstm_recurrence(
        x_gates, w_h, valid, self.explicit_weight_grads, self.unroll
    )
    if self.reverse:
      outputs = reverse_padded(outputs, lengths)
    return outputs, carry


class BiLSTM(nn.Module):
  """Forward and backward LSTMs of `features // 2` units each, concatenated."""

  features: int
  forget_bias: float = 1.0
  explicit_weight_grads: bool = True
  unroll: int = 1  # see lstm_recurrence

  @nn.compact
  def __call__(self, x, lengths, vocabulary=None):
    """Time-major x [T, B, in] -> outputs [T, B, H], final carry (c, h) [B, H].

    Each is the forward and backward halves concatenated (fwd ++ bwd).
    `vocabulary`: see LSTM.
    """
    half = self.features // 2
    fast = self.explicit_weight_grads
    out_f, (c_f, h_f) = LSTM(
        half,
        self.forget_bias,
        explicit_weight_grads=fast,
        unroll=self.unroll,
        name='forward',
    )(x, lengths, vocabulary)
    out_b, (c_b, h_b) = LSTM(
        half,
        self.forget_bias,
        reverse=True,
        explicit_weight_grads=fast,
        unroll=self.unroll,
        name='backward',
    )(x, lengths, vocabulary)
    carry = (jnp.concatenate([c_f, c_b], -1), jnp.concatenate([h_f, h_b], -1))
    return jnp.concatenate([out_f, out_b], -1), carry
