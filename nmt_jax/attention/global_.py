"""Luong global attention: a softmax over all S source positions.

a_t(s) = softmax_s(score(h_t, hbar_s)),   c_t = sum_s a_t(s) hbar_s
"""

import jax.numpy as jnp

from nmt_jax.attention import base
from nmt_jax.attention import content


@base.register('global')
class GlobalAttention(content.ContentAttention):
  """Global attention with any score of content.SCORES."""

  RANK = 50
  GROUPED_CACHE = True

  def __call__(
      self, query, cache, state, step, with_weights=False, train=False
  ):
    del step, train
    # [N, S]
    weights = self.attend_all(query, cache, coverage=state.get('coverage'))
    context = base.grouped_matmul(weights, cache['memory'])  # [N, D]
    diagnostics = {
        'window': base.row_lengths(cache, query.shape[0]).astype(jnp.float32),
        # Every padded position is scored (and then masked).
        'computed': jnp.full(query.shape[:1], float(weights.shape[1])),
    }
    if with_weights:
      diagnostics['weights'] = weights
    return context, self.covered(state, weights), diagnostics

  @classmethod
  def cost(cls, model_config, source_length):
    return cls.content_cost(model_config, source_length, source_length)
