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
are scored.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from nmt_jax import errors
from nmt_jax.attention import base
from nmt_jax.attention import content

WINDOW_FIELD = {
    # Half window D (the window has 2D + 1 positions).
    'window': (10, errors.non_negative),
}


class LocalAttention(content.ContentAttention):
  """The window, softmax and context shared by local-m and local-p."""

  FIELDS = {**content.SCORE_FIELD, **WINDOW_FIELD}

  def center(self, query, cache, step):
    """Real-valued p_t [B]."""
    raise NotImplementedError

  def reweight(self, weights, positions, center):
    """Window weights after the softmax (local-p: the Gaussian)."""
    del positions, center
    return weights

  def __call__(
      self, query, cache, state, step, with_weights=False, train=False
  ):
    del train
    half = self.config.window
    p = self.center(query, cache, step)
    offsets = jnp.arange(-half, half + 1)
    positions = jnp.floor(p).astype(jnp.int32)[:, None] + offsets  # [B, 2D+1]
    valid = (positions >= 0) & (positions < cache['lengths'][:, None])
    weights = self.attend_window(query, cache, positions, valid)
    weights = self.reweight(weights, positions, p)
    window_memory = content.gather_positions(cache['memory'], positions)
    context = jnp.einsum('bw,bwd->bd', weights, window_memory)  # [B, D]
    diagnostics = {
        'window': valid.sum(-1).astype(jnp.float32),
        # All 2D+1 slots are scored, those outside the sentence masked after.
        'computed': jnp.full(p.shape, float(2 * half + 1)),
        'center': p,
    }
    if with_weights:
      diagnostics['weights'] = content.scatter_positions(
          weights, positions, valid, cache['mask'].shape[1]
      )
    return context, state, diagnostics

  @classmethod
  def cost(cls, model_config, source_length):
    width = 2 * model_config.attention.window + 1
    return cls.content_cost(model_config, source_length, width)


@base.register('local_m')
class LocalMonotonic(LocalAttention):
  """local-m: the window follows the target position."""

  RANK = 20

  def center(self, query, cache, step):
    last = (cache['lengths'] - 1).astype(jnp.float32)
    return jnp.minimum(step.t.astype(jnp.float32), last)


@base.register('local_p')
class LocalPredictive(LocalAttention):
  """local-p: the window centre is predicted from h_t; a Gaussian favours it."""

  RANK = 30

  def setup(self):
    super().setup()
    self.position_hidden = nn.Dense(self.hidden_size, use_bias=False)  # W_p
    self.position_out = nn.Dense(1, use_bias=False)  # v_p

  def center(self, query, cache, step):
    last = (cache['lengths'] - 1).astype(jnp.float32)
    hidden = jnp.tanh(self.position_hidden(query))
    return last * jax.nn.sigmoid(self.position_out(hidden)[:, 0])

  def reweight(self, weights, positions, center):
    sigma = self.config.window / 2
    distance = positions - center[:, None]
    gaussian = jnp.exp(-(distance**2) / (2 * sigma**2))
    return (weights * gaussian).astype(weights.dtype)

  @classmethod
  def validate(cls, config):
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
