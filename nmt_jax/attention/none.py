"""No attention (Sutskever et al. 2014): the decoder sees only its own state.

The context is empty ([B, 0]) and htilde_t = h_t; the encoder states are not
kept after encoding.
"""

import jax.numpy as jnp

from nmt_jax.attention import base


@base.register('none')
class NoAttention(base.Attention):
  """The no-attention baseline."""

  HAS_CONTEXT = False
  GROUPED_CACHE = True  # reads no cache
  RANK = 0
  PLOT = None

  def prepare(self, memory, lengths) -> base.Cache:
    del memory
    return {'lengths': lengths}

  def __call__(
      self, query, cache, state, step, with_weights=False, train=False
  ):
    del cache, step, with_weights, train
    context = jnp.zeros(query.shape[:1] + (0,), query.dtype)  # [B, 0]
    nothing = jnp.zeros(query.shape[:1], jnp.float32)
    return context, state, {'window': nothing, 'computed': nothing}

  @classmethod
  def validate(cls, config):
    base.refuse_coverage(config, 'has no attention')

  @classmethod
  def cost(cls, model_config, source_length):
    del model_config, source_length
    return base.Cost(0.0, 0.0, 0.0)

  @classmethod
  def source_attention(cls, weights, cache, row, length):
    del weights, cache, row, length
    return None, {}
