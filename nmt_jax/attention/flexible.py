"""Shu & Nakayama 2017 flexible attention: a position penalty around the focus.

  g(t)      = sigmoid(v_g^T tanh(W_g [h_{t-1}; i_t]) + b_g)
  penalty_t = g(t) (s - p_{t-1})^2 / (2 sigma^2)
  a_t(s)    = softmax_s(score(h, hbar_s) - penalty_t(s))
  p_t       = sum_s a_t(s) s,   p_0 = 0

Outside training, positions with penalty >= tau are dropped: the kept set is
the integers in (p_{t-1} - r, p_{t-1} + r), r = sigma sqrt(2 tau / g(t)),
within the sentence (if none is, the one nearest p_{t-1}). Their scores are
computed on a gathered window whose static width is the smallest of
`content.window_buckets(S)` that holds the widest kept interval of the batch,
chosen per step by `nn.switch`: a narrow focus costs a narrow computation. In
beam search the K hypotheses of a sentence share one gathered window (the
union of their kept intervals) and one cache row (GROUPED_CACHE); each still
attends to its own interval only.
tau = inf (and training) takes the untruncated path over all S positions.

W_g [h_{t-1}; i_t] = W_g^h h_{t-1} + W_g^i i_t: the second term depends on
the fed-back word only, so it is the kind's `token_features`, computed
outside the decoder loop (over all target positions at once in training, as
a [V, H] table in decoding), which halves g(t)'s cost per step.
"""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from nmt_jax.attention import base
from nmt_jax.attention import content
from nmt_jax.system import errors


class BlockDense(nn.Module):
  """A bias-free dense layer on a concatenation [a; b], one block at a time.

  The kernel [in_features, features] (lecun_normal, as nn.Dense) is applied
  to x [..., n] through its rows start .. start + n - 1, so
  block(a, 0, n) + block(b, A, n) = nn.Dense on [a; b] (n = A + B).
  """

  features: int

  @nn.compact
  def __call__(self, x, start: int, in_features: int):
    kernel = self.param(
        'kernel',
        nn.initializers.lecun_normal(),
        (in_features, self.features),
    )
    x, kernel = nn.dtypes.promote_dtype(x, kernel)
    return x @ kernel[start : start + x.shape[-1]]


@base.register('flexible')
class FlexibleAttention(content.ContentAttention):
  """Flexible attention with any score of content.SCORES."""

  FIELDS = {
      **content.SCORE_FIELD,
      **content.COVERAGE_FIELD,
      # Width sigma of the position penalty (Shu & Nakayama's best: 1.5).
      'sigma': (1.5, errors.positive),
      # Test-time threshold: positions with penalty >= tau are not scored
      # (inf keeps every position: the untruncated model).
      'tau': (math.inf, errors.non_negative_or_inf),
  }
  HAS_STRENGTH = True
  GROUPED_CACHE = True
  DECODING_FIELDS = ('tau',)
  RANK = 40
  PLOT = 'vision_span'

  def setup(self):
    super().setup()
    self.strength_hidden = BlockDense(self.hidden_size)  # W_g
    self.strength_out = nn.Dense(1)  # v_g, b_g

  def initial_state(self, cache) -> base.State:
    center = jnp.zeros(cache['lengths'].shape, jnp.float32)
    return {**super().initial_state(cache), 'center': center}

  def token_features(self, inputs):
    """W_g^i i_t: inputs [..., E] -> [..., H]."""
    return self.strength_hidden(
        inputs, self.hidden_size, self.hidden_size + inputs.shape[-1]
    )

  def strength(self, step):
    """g(t) [B]."""
    token = step.token_features
    if token is None:
      token = self.token_features(step.inputs)
    in_features = self.hidden_size + step.inputs.shape[-1]
    hidden = jnp.tanh(
        self.strength_hidden(step.prev_query, 0, in_features) + token
    )
    # float32: the penalty, the kept interval and the reward read it.
    return jax.nn.sigmoid(
        base.at_least_float32(self.strength_out(hidden)[:, 0])
    )

  def kept_interval(self, g, previous, lengths, tau):
    """First and last kept position [B] each (closed form), for finite tau."""
    # g underflowing to 0 with tau = 0 would be 0 / 0.
    radius = self.config.sigma * jnp.sqrt(
        2.0 * tau / jnp.maximum(g, jnp.finfo(g.dtype).tiny)
    )
    first = jnp.maximum(jnp.floor(previous - radius) + 1, 0).astype(jnp.int32)
    last = jnp.minimum(jnp.ceil(previous + radius) - 1, lengths - 1)
    last = last.astype(jnp.int32)
    nearest = jnp.clip(jnp.round(previous), 0, jnp.maximum(lengths - 1, 0))
    nearest = nearest.astype(jnp.int32)
    empty = last < first
    first = jnp.where(empty, nearest, first)
    # A row without a source (a batch's padding row) keeps nothing.
    return first, jnp.where(lengths > 0, jnp.where(empty, nearest, last), -1)

  def penalty(self, g, previous, positions):
    distance = positions - previous[:, None]
    return g[:, None] * distance**2 / (2.0 * self.config.sigma**2)

  def __call__(
      self, query, cache, state, step, with_weights=False, train=False
  ):
    g = self.strength(step)  # [N]: N = B * G rows, G per sentence
    previous = state['center']
    coverage = state.get('coverage')
    sentences, length = cache['mask'].shape
    lengths = base.row_lengths(cache, query.shape[0])  # [N]
    tau = math.inf if train else self.config.tau
    diagnostics = {'strength': g, 'previous_center': previous}
    if math.isinf(tau):
      positions = jnp.broadcast_to(jnp.arange(length), (g.shape[0], length))
      offset = -self.penalty(g, previous, positions)
      # float32 weights: the next step's penalty is centred on p_t.
      memory = cache['memory']
      dtype = base.float32_or_wider(memory.dtype)
      # [N, S]
      weights = self.attend_all(query, cache, offset, dtype, coverage)
      context = base.grouped_matmul(weights.astype(memory.dtype), memory)
      center = jnp.sum(weights * positions, -1)
      diagnostics.update(
          window=lengths.astype(jnp.float32),
          computed=jnp.full(lengths.shape, float(length)),
          first=jnp.zeros_like(lengths),
          last=lengths - 1,
      )
      full_weights = weights
    else:
      first, last = self.kept_interval(g, previous, lengths, tau)
      out = self.attend_union(
          lambda mdl, width, *ops: mdl.windowed(width, with_weights, *ops),
          content.window_buckets(length),
          sentences,
          first,
          last,
          query,
          cache,
          g,
          previous,
          coverage,
      )
      context, center, full_weights, computed = out
      diagnostics.update(
          window=(last - first + 1).astype(jnp.float32),
          computed=computed,
          first=first,
          last=last,
      )
    diagnostics['center'] = center
    if with_weights:
      diagnostics['weights'] = full_weights
    state = self.covered(dict(state, center=center), full_weights)
    return context, state, diagnostics

  def windowed(
      self,
      width,
      with_weights,
      start,
      first,
      last,
      query,
      cache,
      g,
      previous,
      coverage,
  ):
    """Attention of each row over its kept positions first..last [N], within
    its sentence's window of `width` positions from start [B]; coverage
    [N, S] or None."""
    positions, rows, valid = self.window_rows(width, start, first, last)
    offset = -self.penalty(g, previous, rows)
    context, weights, scattered = self.window_context(
        query,
        cache,
        positions,
        rows,
        valid,
        offset,
        with_weights=with_weights,
        coverage=coverage,
        # At least float32: p_t centres the next step's penalty.
        dtype=base.float32_or_wider(cache['memory'].dtype),
    )
    center = jnp.sum(weights * rows, -1)
    return context, center, scattered, jnp.full(g.shape, float(width))

  @classmethod
  def cost(cls, model_config, source_length):
    cost = cls.content_cost(model_config, source_length, source_length)
    hidden, embed = model_config.hidden_size, model_config.embed_size
    strength = 2.0 * (hidden + embed) * hidden + 2.0 * hidden  # W_g, v_g
    return cost._replace(step_flops=cost.step_flops + strength)
