"""The softmax layer and its cross-entropy in one pass, a chunk of rows at a time.

Training needs the loss's gradients with respect to the softmax layer's
input, kernel and bias. Autodiff of `logits = x W + b` followed by the loss
keeps the [N, V] logits and makes several more [N, V] arrays in the backward
pass (softmax, its cotangent, the bias's broadcast). With real vocabularies
(V = 8k-50k) those arrays are most of a step's memory traffic, and on CPU
each is fresh memory the kernel must fault in and zero.

Here the forward pass walks the rows in chunks: for each chunk it makes the
[rows, V] logits, the loss, the softmax minus the target distribution, and
at once that chunk's share of dx, dW and db. The backward pass only scales
them by the loss's cotangent. The work is the same three matrix products
autodiff does, on a working set that stays in cache (16 MB of logits a
chunk on CPU), and no [N, V] array exists.

This is correct only for a scalar loss that is the weighted sum itself (its
cotangent is one number), which is how `steps.train_step` uses it.
"""

import functools
import math

import jax
import jax.numpy as jnp

from nmt_jax.attention import base as attention_lib

# On CPU, a chunk's float32 logits take about this many bytes: they, the
# softmax and its cotangent stay in the caches and in memory malloc reuses.
CPU_CHUNK_BYTES = 2**24


def chunk_rows(num_rows: int, vocab_size: int, positions: int, batch: int):
  """Rows per chunk for `num_rows` rows of `batch` sentences.

  `positions` > 0 asks for that many target positions of every sentence per
  chunk (train.loss_chunk). 0 chooses: on CPU chunks of about CPU_CHUNK_BYTES
  of logits, elsewhere all rows at once (accelerators prefer one large
  product to a loop of small ones). The rows are spread evenly over the
  chunks, so padding the last one adds fewer rows than there are chunks
  times 8.
  """
  if positions:
    target = positions * batch
  elif jax.default_backend() == 'cpu':
    target = max(8, CPU_CHUNK_BYTES // (4 * vocab_size))
  else:
    target = num_rows
  count = max(1, math.ceil(num_rows / target))
  rows = math.ceil(num_rows / count)
  return min(num_rows, -(-rows // 8) * 8) if count > 1 else num_rows


def smoothed_target(label_smoothing: float, vocab: int):
  """(confidence, low, entropy) of the label-smoothed target distribution.

  The target gets `confidence`, every other entry `low`; `entropy` is the
  distribution's, which the loss subtracts so that a perfect prediction
  scores 0.
  """
  confidence, low = 1.0 - label_smoothing, label_smoothing / (vocab - 1)
  entropy = -(
      confidence * math.log(confidence)
      + (vocab - 1) * low * math.log(low + 1e-20)
  )
  return confidence, low, entropy


def _soft_target_terms(label_smoothing: float, vocab: int):
  """(weight of the target, weight of every entry, entropy) of the target distribution."""
  if not label_smoothing:
    return 1.0, 0.0, 0.0
  confidence, low, entropy = smoothed_target(label_smoothing, vocab)
  return confidence - low, low, entropy


def _forward(x, kernel, bias, targets, weights, rows, label_smoothing):
  """(loss sum, (dx, dkernel, dbias)) for a cotangent of 1."""
  num_rows, width = x.shape
  vocab = kernel.shape[1]
  on_target, everywhere, entropy = _soft_target_terms(label_smoothing, vocab)
  count = -(-num_rows // rows)
  pad = count * rows - num_rows
  # [count, rows, ...]; padded rows have weight 0.
  xs = jnp.pad(x, ((0, pad), (0, 0))).reshape(count, rows, width)
  ts = jnp.pad(targets, (0, pad)).reshape(count, rows)
  ws = jnp.pad(weights, (0, pad)).reshape(count, rows)
  accumulate = attention_lib.float32_or_wider(x.dtype)

  def one_chunk(sums, chunk):
    loss_sum, d_kernel, d_bias = sums
    x_c, t_c, w_c = chunk
    # The logits as the softmax layer makes them (in the compute dtype),
    # then the softmax and loss in at least float32.
    logits = attention_lib.at_least_float32(x_c @ kernel + bias)
    top = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    exp = jnp.exp(logits - top)
    total = jnp.sum(exp, axis=-1)
    log_z = top[:, 0] + jnp.log(total)
    target_logit = jnp.take_along_axis(logits, t_c[:, None], axis=-1)[:, 0]
    loss = log_z - on_target * target_logit - entropy
    if everywhere:
      loss = loss - everywhere * jnp.sum(logits, axis=-1)
    loss_sum = loss_sum + jnp.sum(loss * w_c)
    # d loss / d logits = (softmax - target distribution) * weight.
    d_logits = exp * (w_c / total)[:, None] - everywhere * w_c[:, None]
    d_logits = d_logits.at[jnp.arange(rows), t_c].add(-on_target * w_c)
    d_bias = d_bias + jnp.sum(d_logits, axis=0)
    d_logits = d_logits.astype(x.dtype)
    d_kernel = d_kernel + jax.lax.dot_general(
        x_c,
        d_logits,
        (((0,), (0,)), ((), ())),
        preferred_element_type=accumulate,
    )
    d_x = jax.lax.dot_general(d_logits, kernel, (((1,), (1,)), ((), ())))
    return (loss_sum, d_kernel, d_bias), d_x.astype(x.dtype)

  start = (
      jnp.zeros((), accumulate),
      jnp.zeros(kernel.shape, accumulate),
      jnp.zeros(bias.shape, accumulate),
  )
  (loss_sum, d_kernel, d_bias), d_x = jax.lax.scan(
      one_chunk, start, (xs, ts, ws)
  )
  d_x = d_x.reshape(count * rows, width)[:num_rows]
  return loss_sum, (
      d_x,
      d_kernel.astype(kernel.dtype),
      d_bias.astype(bias.dtype),
  )


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def cross_entropy(x, kernel, bias, targets, weights, rows, label_smoothing):
  """sum_i weights_i * CE(softmax(x_i kernel + bias), targets_i), a scalar.

  x [N, H], kernel [H, V], bias [V], targets [N] int, weights [N] float
  (0 for padding). `rows` rows of x at a time (chunk_rows). Label smoothing
  as steps.cross_entropy: the loss is shifted by the smoothed distribution's
  entropy. Differentiable in x, kernel and bias (not weights).
  """
  return _forward(x, kernel, bias, targets, weights, rows, label_smoothing)[0]


def _cross_entropy_bwd(rows, smoothing, gradients, cotangent):
  del rows, smoothing
  d_x, d_kernel, d_bias = ((g * cotangent).astype(g.dtype) for g in gradients)
  return d_x, d_kernel, d_bias, None, None


cross_entropy.defvjp(_forward, _cross_entropy_bwd)
