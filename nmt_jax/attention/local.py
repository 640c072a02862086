"""Luong local attention on a window [p_t - D, p_t + D] of static width 2D + 1.

  local_m: p_t = t, clipped to the last source position S_b - 1.
  local_p: p_t = (S_b - 1) * sigmoid(v_p^T tanh(W_p h_t)), the 0-based form of
    Luong's S * sigmoid(.) (his released code: (srcLen - 1) * sigmoid + 1,
    1-based), so p_t spans exactly the source positions. The window is
    centred at floor(p_t) and the softmax weights are multiplied by
    exp(-(s - p_t)^2 / (2 sigma^2)), sigma = D / 2, with the real p_t, and
    not renormalised.

A window crossing a sentence boundary is truncated, not shifted; the softmax
runs over its in-sentence positions only. Only the 2D + 1 gathered positions
are scored. In beam search the K hypotheses of a sentence share one cache row
and one gathered window (GROUPED_CACHE): local-m's K windows are one; local-p's
window is the union of its hypotheses' (`attend_union`, a static width picked
per step), each hypothesis still attending to its own 2D + 1 positions.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from nmt_jax.attention import base
from nmt_jax.attention import content
from nmt_jax.system import errors

WINDOW_FIELD = {
    # Half window D (the window has 2D + 1 positions).
    'window': (10, errors.non_negative),
}


class LocalAttention(content.ContentAttention):
  """The window, softmax and context shared by local-m and local-p."""

  FIELDS = {**content.SCORE_FIELD, **content.COVERAGE_FIELD, **WINDOW_FIELD}
  GROUPED_CACHE = True
  # Whether the G rows of a sentence have one centre (local-m: p_t = t).
  SHARED_CENTER = False

  def center(self, query, lengths, step):
    """Real-valued p_t [N] of the N rows; lengths [N] their sentences'."""
    raise NotImplementedError

  def scale(self, positions, center):
    """What multiplies the window's softmax weights [N, W] (local-p: the
    Gaussian), or None."""
    del positions, center
    return None

  def __call__(
      self, query, cache, state, step, with_weights=False, train=False
  ):
    del train
    half = self.config.window
    sentences, length = cache['mask'].shape
    lengths = base.row_lengths(cache, query.shape[0])  # [N]
    p = self.center(query, lengths, step)
    middle = jnp.floor(p).astype(jnp.int32)
    # The window within the sentence: a truncated window is not shifted.
    first = jnp.maximum(middle - half, 0)
    last = jnp.minimum(middle + half, lengths - 1)
    if query.shape[0] == sentences or self.SHARED_CENTER:
      widths = [min(2 * half + 1, length)]  # every sentence's rows agree
    else:  # beam search, local-p: the union of K windows
      widths = content.window_buckets(length, smallest=2 * half + 1)
    context, computed, weights = self.attend_union(
        lambda mdl, width, *ops: mdl.windowed(width, with_weights, *ops),
        widths,
        sentences,
        first,
        last,
        query,
        cache,
        p,
        state.get('coverage'),
    )
    diagnostics = {
        'window': (last - first + 1).astype(jnp.float32),
        # Every slot of the sentence's window is scored, those outside the
        # row's own masked after.
        'computed': computed,
        'center': p,
    }
    if with_weights:
      diagnostics['weights'] = weights
    return context, self.covered(state, weights), diagnostics

  def windowed(
      self, width, with_weights, start, first, last, query, cache, p, coverage
  ):
    """Attention of each row over its window first..last [N], within its
    sentence's window of `width` positions from start [B]; coverage [N, S]
    or None."""
    positions, rows, valid = self.window_rows(width, start, first, last)
    context, _, scattered = self.window_context(
        query,
        cache,
        positions,
        rows,
        valid,
        scale=self.scale(rows, p),
        with_weights=with_weights,
        coverage=coverage,
    )
    return context, jnp.full(p.shape, float(width)), scattered

  @classmethod
  def cost(cls, model_config, source_length):
    width = 2 * model_config.attention.window + 1
    return cls.content_cost(model_config, source_length, width)


@base.register('local_m')
class LocalMonotonic(LocalAttention):
  """local-m: the window follows the target position."""

  RANK = 20
  SHARED_CENTER = True

  def center(self, query, lengths, step):
    del query
    return jnp.minimum(step.t.astype(jnp.float32), lengths - 1.0)


@base.register('local_p')
class LocalPredictive(LocalAttention):
  """local-p: the window centre is predicted from h_t; a Gaussian favours it."""

  RANK = 30

  def setup(self):
    super().setup()
    self.position_hidden = nn.Dense(self.hidden_size, use_bias=False)  # W_p
    self.position_out = nn.Dense(1, use_bias=False)  # v_p

  def center(self, query, lengths, step):
    last = (lengths - 1).astype(jnp.float32)
    hidden = jnp.tanh(self.position_hidden(query))
    # float32: in bfloat16, p_t in [0, S - 1] would keep 8 significant bits.
    logit = base.at_least_float32(self.position_out(hidden)[:, 0])
    return last * jax.nn.sigmoid(logit)

  def scale(self, positions, center):
    sigma = self.config.window / 2
    distance = positions - center[:, None]
    return jnp.exp(-(distance**2) / (2 * sigma**2))

  @classmethod
  def validate(cls, config):
    super().validate(config)
    window = config.model.attention.window
    if window < 1:
      raise errors.config_error(
          'model.attention.window',
          window,
          'must be >= 1 for local_p (sigma = D / 2)',
          'use e.g. 10',
      )

  @classmethod
  def cost(cls, model_config, source_length):
    cost = super().cost(model_config, source_length)
    hidden = model_config.hidden_size
    position = 2.0 * hidden * hidden + 2.0 * hidden  # W_p, v_p
    return cost._replace(step_flops=cost.step_flops + position)
