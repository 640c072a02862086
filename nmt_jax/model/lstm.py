"""LSTM layers over padded batches.

The input-to-gate projection of a whole sequence is one GEMM outside the
recurrence ([B*T, in] x [in, 4H]); only h @ W_h runs per step. flax's
`nn.LSTMCell` computes both per step, which costs CPU time at our sizes.
The math is the standard LSTM with gate order (i, f, g, o):

  i, f, g, o = split(x W_x + h W_h + b)
  c' = sigmoid(f) * c + sigmoid(i) * tanh(g);   h' = sigmoid(o) * tanh(c')

(tests/model/test_lstm.py checks it against flax's `nn.LSTMCell`). The
decoder's stack runs one step at a time (nmt_jax/model/decoder_cell.py), its
inputs depending on the previous step's output.

Regularisers (model.layer_norm, model.recurrent_dropout; off by default):

* Layer normalisation (Ba et al. 2016), each with its own gain and bias:

    i, f, g, o = split(LN(x W_x) + LN(h W_h) + b);   h' = o * tanh(LN(c'))

  over the whole 4H pre-activation of each product, not per gate block: Ba
  et al.'s equations and Marian's LSTM (Sockeye offers both; Nematus
  normalises its GRU's products whole as well). LN(x W_x) is per position,
  so it stays outside the recurrence (a gate table normalises its rows).
  The carry keeps the unnormalised c'.
* Variational (locked) recurrent dropout (Gal & Ghahramani 2016): h is
  multiplied by one mask per sequence and layer, scaled by 1 / (1 - rate),
  before W_h.

The encoder's recurrence has a hand-written backward pass; with layer
normalisation its backward loop recomputes each step's VJP with `jax.vjp`
(the recurrent product h W_h still saved, its kernel gradient still one GEMM
after the loop).
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


NORM_EPSILON = 1e-5


def layer_norm(x, norm):
  """x [..., D] normalised over D, times scale plus bias ([D] each, `norm`).

  x as is when `norm` is None. Mean and variance in float32 at least
  (bfloat16 holds them too coarsely).
  """
  if norm is None:
    return x
  scale, bias = norm
  y = x.astype(jnp.promote_types(x.dtype, jnp.float32))
  y = y - jnp.mean(y, axis=-1, keepdims=True)
  y = y * jax.lax.rsqrt(jnp.mean(y * y, axis=-1, keepdims=True) + NORM_EPSILON)
  return (y * scale + bias).astype(x.dtype)


def norm_params(module: nn.Module, name: str, width: int):
  """A layer normalisation's (scale, bias) [width] params: ones and zeros."""
  return (
      module.param(f'{name}_scale', nn.initializers.ones_init(), (width,)),
      module.param(f'{name}_bias', nn.initializers.zeros_init(), (width,)),
  )


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


def lstm_update(carry: Carry, gates: jax.Array, cell_norm=None) -> Carry:
  """One LSTM update from pre-activation gates [B, 4H] -> new (c, h).

  cell_norm: None or the (scale, bias) [H] of LN(c') in h' = o tanh(LN(c')).
  """
  c, _ = carry
  s, g = _gate_activations(gates)
  c = s[..., 1, :] * c + s[..., 0, :] * g
  return c, s[..., 3, :] * jnp.tanh(layer_norm(c, cell_norm))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def lstm_recurrence(
    x_gates,
    w_h,
    valid,
    h_keep=None,
    norm=None,
    explicit_weight_grads=True,
    unroll=1,
):
  """The recurrence of an LSTM layer over time, from zero initial state.

  Args:
    x_gates: [T, B, 4H] input projections x_t W_x + b (LN(x_t W_x) + b with
      layer normalisation).
    w_h: [H, 4H] recurrent kernel.
    valid: [T, B, 1] float, 1 where step t of row b is a real token. At other
      steps the carry is left unchanged (outputs there are still computed).
    h_keep: None or [B, H], what multiplies h before W_h (recurrent dropout:
      the keep mask / (1 - rate), the same at every step).
    norm: None or layer normalisation's {'recurrent': (scale, bias) [4H],
      'cell': (scale, bias) [H]}.
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
  return _recurrence_to_longest(x_gates, w_h, valid, h_keep, norm)


def _recurrent_input(h, h_keep):
  return h if h_keep is None else h * h_keep


def _lstm_step(gates_t, w_h, valid_t, carry, h_keep, norm):
  """One step -> (new carry, h_new, (h W_h, sigmoids, tanh(g), tanh(c_new)))."""
  c, h = carry
  rec = _recurrent_input(h, h_keep) @ w_h
  s, g = _gate_activations(
      gates_t + layer_norm(rec, norm and norm['recurrent'])
  )
  c_new = s[:, 1] * c + s[:, 0] * g
  tanh_c = jnp.tanh(layer_norm(c_new, norm and norm['cell']))
  h_new = s[:, 3] * tanh_c
  # A select, not c + valid * (c_new - c): exact (bfloat16 rounds that sum
  # off c_new by an ulp of c), at the same cost.
  keep = valid_t > 0
  carry = (jnp.where(keep, c_new, c), jnp.where(keep, h_new, h))
  return carry, h_new, (rec, s, g, tanh_c)


def _recurrence_to_longest(x_gates, w_h, valid, h_keep, norm):
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
    carry, h_new, _ = _lstm_step(gates_t, w_h, valid_t, carry, h_keep, norm)
    outputs = jax.lax.dynamic_update_index_in_dim(outputs, h_new, t, 0)
    return t + 1, carry, outputs

  zeros = jnp.zeros((batch, h_size), x_gates.dtype)
  outputs = jnp.zeros((steps, batch, h_size), x_gates.dtype)
  _, carry, outputs = jax.lax.while_loop(
      lambda state: state[0] < last, body, (0, (zeros, zeros), outputs)
  )
  return outputs, carry


def _recurrence_forward(x_gates, w_h, valid, h_keep, norm, unroll):
  def step(carry, inputs):
    gates_t, valid_t = inputs
    new_carry, h_new, (rec, s, g, tanh_c) = _lstm_step(
        gates_t, w_h, valid_t, carry, h_keep, norm
    )
    c, h = carry
    # What the backward pass needs (`_recurrence_fwd`).
    saved = (rec,) if norm is not None else (s, g, tanh_c)
    return new_carry, (h_new, (_recurrent_input(h, h_keep), c) + saved)

  batch, h_size = x_gates.shape[1], w_h.shape[0]
  zeros = jnp.zeros((batch, h_size), x_gates.dtype)
  carry, (outputs, residuals) = jax.lax.scan(
      step, (zeros, zeros), (x_gates, valid), unroll=unroll
  )
  return (outputs, carry), residuals


def _recurrence_fwd(x_gates, w_h, valid, h_keep, norm, explicit, unroll):
  (outputs, carry), (h_in, c_prev, *saved) = _recurrence_forward(
      x_gates, w_h, valid, h_keep, norm, unroll
  )
  # h_in: the h_{t-1} (recurrent dropout applied) that multiplied W_h.
  shared = dict(w_h=w_h, valid=valid, h_keep=h_keep, h_in=h_in)
  if norm is not None:
    # Recomputed step by step in the backward loop (`_normed_bwd`).
    return (outputs, carry), dict(
        shared, norm=norm, x_gates=x_gates, c_prev=c_prev, rec=saved[0]
    )
  s, g, tanh_c = saved
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
  return (outputs, carry), dict(
      shared, norm=None, multipliers=multipliers, dc_from_h=dc_from_h, f=f
  )


def _recurrence_bwd(explicit, unroll, res, cotangents):
  w_h, valid, h_keep = res['w_h'], res['valid'], res['h_keep']
  d_outputs, (dc_final, dh_final) = cotangents
  if res['norm'] is None:
    dz, d_norm = _plain_bwd(res, d_outputs, dc_final, dh_final, unroll), None
    d_rec = dz
  else:
    dz, d_rec, d_norm = _normed_bwd(res, d_outputs, dc_final, dh_final, unroll)
  # One [H, T*B] x [T*B, 4H] GEMM instead of T small ones.
  d_w_h = weight_grad(
      res['h_in'].reshape(-1, w_h.shape[0]),
      d_rec.reshape(-1, d_rec.shape[-1]),
      explicit,
  )
  d_keep = None if h_keep is None else jnp.zeros_like(h_keep)  # a constant
  return dz, d_w_h, jnp.zeros_like(valid), d_keep, d_norm


def _to_h_prev(d_rec, w_h, h_keep):
  """d loss / d h_{t-1} through h_{t-1} h_keep W_h = rec, from d rec [B, 4H]."""
  return _recurrent_input(d_rec @ w_h.T, h_keep)


def _plain_bwd(res, d_outputs, dc_final, dh_final, unroll):
  """The hand-written backward loop -> d x_gates = d (h W_h) [T, B, 4H]."""
  w_h, h_keep = res['w_h'], res['h_keep']
  gate = jnp.arange(4)[:, None]

  def step(carry, inputs):
    dc_carry, dh_carry = carry  # d loss / d carry after step t
    d_out, valid_t, mult, dc_h, f_t = inputs
    dh = d_out + valid_t * dh_carry  # d / d h_new
    dc = valid_t * dc_carry + dh * dc_h  # d / d c_new
    dz = (jnp.where(gate == 3, dh[:, None, :], dc[:, None, :]) * mult).reshape(
        dh.shape[0], -1
    )
    dh_prev = _to_h_prev(dz, w_h, h_keep) + (1 - valid_t) * dh_carry
    dc_prev = dc * f_t + (1 - valid_t) * dc_carry
    return (dc_prev, dh_prev), dz

  _, dz = jax.lax.scan(
      step,
      (dc_final, dh_final),
      (d_outputs, res['valid'], res['multipliers'], res['dc_from_h'], res['f']),
      reverse=True,
      unroll=unroll,
  )
  return dz


def _normed_bwd(res, d_outputs, dc_final, dh_final, unroll):
  """The backward loop with layer normalisation: each step's VJP recomputed
  by `jax.vjp` of `lstm_update` -> d x_gates, d (h W_h) [T, B, 4H], d norm."""
  w_h, h_keep, norm = res['w_h'], res['h_keep'], res['norm']

  def update(gates_t, rec, c, norm):
    gates = gates_t + layer_norm(rec, norm['recurrent'])
    return lstm_update((c, None), gates, norm['cell'])

  def step(carry, inputs):
    dc_carry, dh_carry, d_norm = carry  # d loss / d carry after step t
    d_out, valid_t, gates_t, rec, c = inputs
    _, vjp = jax.vjp(update, gates_t, rec, c, norm)
    dc = valid_t * dc_carry  # d / d c_new
    dh = d_out + valid_t * dh_carry  # d / d h_new
    d_gates, d_rec, dc_prev, d_norm_t = vjp((dc, dh))
    dh_prev = _to_h_prev(d_rec, w_h, h_keep) + (1 - valid_t) * dh_carry
    dc_prev = dc_prev + (1 - valid_t) * dc_carry
    d_norm = jax.tree_util.tree_map(jnp.add, d_norm, d_norm_t)
    return (dc_prev, dh_prev, d_norm), (d_gates, d_rec)

  zero_norm = jax.tree_util.tree_map(jnp.zeros_like, norm)
  (_, _, d_norm), (dz, d_rec) = jax.lax.scan(
      step,
      (dc_final, dh_final, zero_norm),
      (d_outputs, res['valid'], res['x_gates'], res['rec'], res['c_prev']),
      reverse=True,
      unroll=unroll,
  )
  return dz, d_rec, d_norm


lstm_recurrence.defvjp(_recurrence_fwd, _recurrence_bwd)


def input_gates(
    x, w_x, b, explicit_weight_grads: bool, vocabulary=None, norm=None
):
  """Input gates x W_x + b [..., 4H] of inputs x [..., in].

  With `norm` ((scale, bias) [4H]) they are LN(x W_x) + b.

  With `vocabulary` ([V, in]) x is token ids [...] standing for its rows,
  and the gates are rows of the table vocabulary W_x + b [V, 4H]: the same
  values from a GEMM over V rows instead of one over every position, and a
  scatter-add of the gates' gradient into V rows in the backward pass (on
  CPU, 3.4 vs 108 ms forward and backward for 6,400 positions, 24 words,
  256 -> 1024).
  """
  if vocabulary is None:
    return layer_norm(matmul(x, w_x, explicit_weight_grads), norm) + b
  # Layer normalisation is per row: the table's rows are the positions'.
  table = layer_norm(matmul(vocabulary, w_x, explicit_weight_grads), norm) + b
  return jnp.take(table, x, axis=0)


def uses_gate_table(config, vocab_size: int, positions: int, train: bool):
  """Whether layer 0's input gates come from a per-word table (a lookup).

  model.gate_table: 'on', 'off' or 'auto' (when the vocabulary has fewer
  words than the batch has positions, so the table's GEMM is the smaller).
  Never with dropout or word dropout on the embeddings in training: the
  table holds the gates of undropped embeddings.
  """
  if train and (config.dropout or config.word_dropout):
    return False
  return table_pays(config.gate_table, vocab_size, positions)


def table_pays(mode: str, vocab_size: int, lookups: int) -> bool:
  """'on', or 'auto' where a table of V rows costs less than `lookups` rows
  of GEMM: the gate tables' rule, in training and in decoding."""
  return mode == 'on' or (mode == 'auto' and vocab_size < lookups)


def drop_words(key, x, rate: float):
  """x [..., E] with whole vectors x[...] zeroed at the rate (word dropout).

  Not rescaled (Nematus does not; Sennrich et al. 2016): a dropped word
  reads as no word, the others as in decoding.
  """
  if not rate:
    return x
  keep = jax.random.bernoulli(key, 1.0 - rate, x.shape[:-1] + (1,))
  return jnp.where(keep, x, jnp.zeros_like(x))


def recurrent_keep(module: nn.Module, rate: float, shape, dtype, train: bool):
  """h's multiplier [B, H] of variational recurrent dropout, or None.

  The keep mask / (1 - rate), drawn once per sequence (Gal & Ghahramani
  2016); None outside training or at rate 0.
  """
  if not train or not rate:
    return None
  keep = jax.random.bernoulli(module.make_rng('dropout'), 1.0 - rate, shape)
  return keep.astype(dtype) / jnp.asarray(1.0 - rate, dtype)


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
  layer_norm: bool = False  # model.layer_norm (see the module docstring)
  recurrent_dropout: float = 0.0  # model.recurrent_dropout

  @nn.compact
  def __call__(
      self, x: jax.Array, lengths: jax.Array, vocabulary=None, train=False
  ):
    """Time-major x [T, B, in], lengths [B] -> outputs, final carry (c, h).

    The outputs are [T, B, H]; c and h are [B, H]. With `vocabulary`
    ([V, in], an embedding matrix) x is token ids [T, B] whose inputs are
    its rows: the input gates are then rows of a [V, 4H] table
    vocabulary W_x + b (see `input_gates`). `train`: recurrent dropout.
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
    norm = None
    if self.layer_norm:
      norm = {
          name: norm_params(self, f'{name}_norm', width)
          for name, width in (
              ('input', 4 * h_size),
              ('recurrent', 4 * h_size),
              ('cell', h_size),
          )
      }
    if self.reverse:
      x = reverse_padded(x, lengths)
    # [T, B, 4H]
    x_gates = input_gates(
        x,
        w_x,
        b,
        self.explicit_weight_grads,
        vocabulary,
        norm and norm.pop('input'),
    )
    valid = (jnp.arange(length)[:, None, None] < lengths[None, :, None]).astype(
        x_gates.dtype
    )
    h_keep = recurrent_keep(
        self, self.recurrent_dropout, (x.shape[1], h_size), x_gates.dtype, train
    )
    # [T, B, H]
    outputs, carry = lstm_recurrence(
        x_gates,
        w_h,
        valid,
        h_keep,
        norm,
        self.explicit_weight_grads,
        self.unroll,
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
  layer_norm: bool = False
  recurrent_dropout: float = 0.0

  @nn.compact
  def __call__(self, x, lengths, vocabulary=None, train=False):
    """Time-major x [T, B, in] -> outputs [T, B, H], final carry (c, h) [B, H].

    Each is the forward and backward halves concatenated (fwd ++ bwd).
    `vocabulary`, `train`: see LSTM.
    """
    layer = functools.partial(
        LSTM,
        self.features // 2,
        self.forget_bias,
        explicit_weight_grads=self.explicit_weight_grads,
        unroll=self.unroll,
        layer_norm=self.layer_norm,
        recurrent_dropout=self.recurrent_dropout,
    )
    out_f, (c_f, h_f) = layer(name='forward')(x, lengths, vocabulary, train)
    out_b, (c_b, h_b) = layer(reverse=True, name='backward')(
        x, lengths, vocabulary, train
    )
    carry = (jnp.concatenate([c_f, c_b], -1), jnp.concatenate([h_f, h_b], -1))
    return jnp.concatenate([out_f, out_b], -1), carry
