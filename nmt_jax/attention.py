"""Attention kinds behind one interface.

Every kind is a linen module with three methods, called by the decoder
(`models.Decoder`) and nothing else:

  prepare(memory [B, S, D], lengths [B]) -> cache
      Once per sentence, after encoding: precomputed keys, memory, masks.
      Beam search repeats and never reorders the cache.
  initial_state(cache) -> state
      Per-hypothesis recurrent state of the kind (e.g. the focus p_{t-1});
      a dict of [B, ...] arrays that beam search reorders with the beams.
  __call__(query [B, H], cache, state, step: StepInputs, with_weights)
      -> context [B, D], new state, diagnostics
      One decoder step. `diagnostics` always holds 'window' [B] (number of
      source positions whose score was computed at this step, SPEC §2), plus
      cheap kind-specific values; 'weights' only when `with_weights`.

The kinds registered in `KINDS` are built by `make_attention`.
"""

from typing import Any, Dict, NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

Cache = Dict[str, jax.Array]
State = Dict[str, jax.Array]

SCORES = ('dot', 'general', 'concat', 'location')


class StepInputs(NamedTuple):
  """What a decoder step offers an attention kind besides the query."""
  prev_query: jax.Array   # [B, H] top decoder state h_{t-1}
  inputs: jax.Array       # [B, E] embedding of the fed-back word (i_t)
  t: jax.Array            # [B] int32 index of the target token being produced


def masked_softmax(scores, mask, axis=-1):
  """Softmax over `mask`ed entries; masked entries and all-masked rows get 0."""
  return jax.nn.softmax(scores, axis=axis, where=mask)


def source_cache(memory, lengths) -> Cache:
  """The part of every cache that describes the source: memory, mask, lengths."""
  mask = jnp.arange(memory.shape[1])[None, :] < lengths[:, None]           # [B, S]
  return {'memory': memory, 'mask': mask, 'lengths': lengths}


class Scorer(nn.Module):
  """score(h_t, hbar_s) of Luong et al. 2015 (eq. 8) and Bahdanau et al. 2015.

  `keys` precomputes the key side once per sentence; `__call__` scores a
  query against any subset of positions, so windowed kinds reuse it on
  gathered keys.
  """
  score: str
  hidden_size: int
  max_source_length: int

  def setup(self):
    if self.score == 'general':
      self.key_proj = nn.Dense(self.hidden_size, use_bias=False)           # W_a
    elif self.score == 'concat':
      self.key_proj = nn.Dense(self.hidden_size, use_bias=False)           # W_a, key half
      self.query_proj = nn.Dense(self.hidden_size, use_bias=False)         # W_a, query half
      self.v = nn.Dense(1, use_bias=False)                                 # v_a
    elif self.score == 'location':
      self.location = nn.Dense(self.max_source_length)                     # W_a h_t
    elif self.score != 'dot':
      raise ValueError(f'unknown attention score {self.score!r}; use one of {SCORES}')

  def keys(self, memory):
    """memory [B, S, D] -> keys [B, S, A] (A = 0 for location: no key side)."""
    if self.score in ('general', 'concat'):
      return self.key_proj(memory)
    if self.score == 'location':
      return memory[..., :0]
    return memory

  def __call__(self, query, keys, positions):
    """query [B, H], keys [B, W, A], positions [B, W] int -> scores [B, W]."""
    if self.score in ('dot', 'general'):
      return jnp.einsum('bh,bwh->bw', query, keys)
    if self.score == 'concat':
      hidden = jnp.tanh(keys + self.query_proj(query)[:, None, :])          # [B, W, A]
      return self.v(hidden)[..., 0]
    logits = self.location(query)                                          # [B, S_max]
    return jnp.take_along_axis(logits, jnp.minimum(positions, logits.shape[1] - 1), axis=1)


class GlobalAttention(nn.Module):
  """Luong global attention: softmax over all S source positions."""
  config: Any          # model.attention
  hidden_size: int
  max_source_length: int

  def setup(self):
    self.scorer = Scorer(self.config.score, self.hidden_size, self.max_source_length)

  def prepare(self, memory, lengths) -> Cache:
    cache = source_cache(memory, lengths)
    cache['keys'] = self.scorer.keys(memory)
    return cache

  def initial_state(self, cache) -> State:
    del cache
    return {}

  def __call__(self, query, cache, state, step, with_weights=False):
    del step
    positions = jnp.broadcast_to(jnp.arange(cache['mask'].shape[1]), cache['mask'].shape)
    weights = masked_softmax(self.scorer(query, cache['keys'], positions), cache['mask'])
    context = jnp.einsum('bs,bsd->bd', weights, cache['memory'])            # [B, D]
    diagnostics = {'window': cache['lengths'].astype(jnp.float32)}
    if with_weights:
      diagnostics['weights'] = weights
    return context, state, diagnostics


KINDS = {
    'global': GlobalAttention,
}
ALL_KINDS = ('none', 'global', 'local_m', 'local_p', 'flexible', 'memory')


def make_attention(config, hidden_size, max_source_length) -> Optional[nn.Module]:
  """The attention module of `config.kind`, or None for 'none'."""
  if config.kind == 'none':
    return None
  if config.kind not in KINDS:
    raise ValueError(f'unknown attention kind {config.kind!r}; use one of {ALL_KINDS}')
  return KINDS[config.kind](config, hidden_size, max_source_length)
