"""Attention kinds behind one interface.

Every kind is a linen module with three methods, called by the decoder
(`models.Decoder`) and nothing else:

  prepare(memory [B, S, D], lengths [B]) -> cache
      Once per sentence, after encoding: precomputed keys, memory, masks.
      Beam search repeats and never reorders the cache.
  initial_state(cache) -> state
      Per-hypothesis recurrent state of the kind (e.g. the focus p_{t-1});
      a dict of [B, ...] arrays that beam search reorders with the beams.
  __call__(query [B, H], cache, state, step: StepInputs, with_weights, train)
      -> context [B, D], new state, diagnostics
      One decoder step. `diagnostics` always holds 'window' [B] (number of
      source positions whose score was computed at this step, SPEC §2), plus
      cheap kind-specific values; 'weights' only when `with_weights`: over
      source positions [B, S], or over memory slots [B, K] for `memory`.
      `train` is True in training steps (flexible attention never truncates then).

Positions are 0-based: s = 0 is the first source token, S_b - 1 its EOS.

The kinds registered in `KINDS` are built by `make_attention`.
"""

import math
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


def gather_positions(x, positions):
  """x [B, S, ...], positions [B, W] int -> [B, W, ...] (positions clipped into 0..S-1)."""
  positions = jnp.clip(positions, 0, x.shape[1] - 1)
  return jnp.take_along_axis(x, positions.reshape(positions.shape + (1,) * (x.ndim - 2)), axis=1)


def scatter_positions(weights, positions, valid, length):
  """Window weights [B, W] at positions [B, W] -> weights over the source [B, length]."""
  rows = jnp.arange(weights.shape[0])[:, None]
  return jnp.zeros((weights.shape[0], length), weights.dtype).at[
      rows, jnp.clip(positions, 0, length - 1)].add(jnp.where(valid, weights, 0.0))


class _ContentAttention(nn.Module):
  """Shared by the kinds that score encoder states (all but memory)."""
  config: Any          # model.attention
  hidden_size: int
  max_source_length: int

  def setup(self):
    self.scorer = Scorer(self.config.score, self.hidden_size, self.max_source_length)
    self.setup_kind()

  def setup_kind(self):
    pass

  def prepare(self, memory, lengths) -> Cache:
    cache = source_cache(memory, lengths)
    cache['keys'] = self.scorer.keys(memory)
    return cache

  def initial_state(self, cache) -> State:
    del cache
    return {}

  def attend_all(self, query, cache, logit_offset=None):
    """Masked softmax over all S positions -> weights [B, S]."""
    positions = jnp.broadcast_to(jnp.arange(cache['mask'].shape[1]), cache['mask'].shape)
    scores = self.scorer(query, cache['keys'], positions)
    if logit_offset is not None:
      scores = scores + logit_offset
    return masked_softmax(scores, cache['mask'])

  def attend_window(self, query, cache, positions, valid, logit_offset=None):
    """Masked softmax over gathered positions [B, W] -> weights [B, W]; O(W) work, not O(S)."""
    scores = self.scorer(query, gather_positions(cache['keys'], positions), positions)
    if logit_offset is not None:
      scores = scores + logit_offset
    return masked_softmax(scores, valid)


class GlobalAttention(_ContentAttention):
  """Luong global attention: softmax over all S source positions."""

  def __call__(self, query, cache, state, step, with_weights=False, train=False):
    del step, train
    weights = self.attend_all(query, cache)
    context = jnp.einsum('bs,bsd->bd', weights, cache['memory'])            # [B, D]
    diagnostics = {'window': cache['lengths'].astype(jnp.float32)}
    if with_weights:
      diagnostics['weights'] = weights
    return context, state, diagnostics


class LocalAttention(_ContentAttention):
  """Luong local attention on a window [p_t - D, p_t + D] of static width 2D + 1.

  local_m: p_t = t, clipped to the last source position S_b - 1.
  local_p: p_t = (S_b - 1) * sigmoid(v_p^T tanh(W_p h_t)), the 0-based form of
    Luong's S * sigmoid(.) (his released code: (srcLen - 1) * sigmoid + 1,
    1-based), so p_t spans exactly the source positions. The window is centred
    at floor(p_t) and the softmax weights are multiplied by
    exp(-(s - p_t)^2 / (2 sigma^2)), sigma = D / 2, with the real p_t, and not
    renormalised.
  A window crossing a sentence boundary is truncated, not shifted; the softmax
  runs over its in-sentence positions only.
  """

  def setup_kind(self):
    if self.config.kind == 'local_p':
      self.position_hidden = nn.Dense(self.hidden_size, use_bias=False)    # W_p
      self.position_out = nn.Dense(1, use_bias=False)                      # v_p

  def center(self, query, cache, step):
    """Real-valued p_t [B]."""
    last = (cache['lengths'] - 1).astype(jnp.float32)
    if self.config.kind == 'local_m':
      return jnp.minimum(step.t.astype(jnp.float32), last)
    return last * jax.nn.sigmoid(self.position_out(jnp.tanh(self.position_hidden(query)))[:, 0])

  def __call__(self, query, cache, state, step, with_weights=False, train=False):
    del train
    half = self.config.window
    p = self.center(query, cache, step)
    positions = jnp.floor(p).astype(jnp.int32)[:, None] + jnp.arange(-half, half + 1)   # [B, 2D+1]
    valid = (positions >= 0) & (positions < cache['lengths'][:, None])
    weights = self.attend_window(query, cache, positions, valid)
    if self.config.kind == 'local_p':
      sigma = half / 2
      weights = weights * jnp.exp(-(positions - p[:, None]) ** 2 / (2 * sigma ** 2))
    context = jnp.einsum('bw,bwd->bd', weights, gather_positions(cache['memory'], positions))
    diagnostics = {'window': valid.sum(-1).astype(jnp.float32), 'center': p}
    if with_weights:
      diagnostics['weights'] = scatter_positions(weights, positions, valid, cache['mask'].shape[1])
    return context, state, diagnostics


def window_buckets(length: int):
  """Static window widths flexible attention picks from: 8, 16, 32, ... and the full length."""
  widths, width = [], 8
  while width < length:
    widths.append(width)
    width *= 2
  return widths + [length]


class FlexibleAttention(_ContentAttention):
  """Shu & Nakayama 2017: a position penalty around the tracked focus p_{t-1}.

    g(t)      = sigmoid(v_g^T tanh(W_g [h_{t-1}; i_t]) + b_g)
    penalty_t = g(t) (s - p_{t-1})^2 / (2 sigma^2)
    a_t(s)    = softmax_s(score(h, hbar_s) - penalty_t(s)),   p_t = sum_s a_t(s) s,  p_0 = 0.

  Outside training, positions with penalty >= tau are dropped: the kept set is
  the integers in (p_{t-1} - r, p_{t-1} + r), r = sigma sqrt(2 tau / g(t)),
  within the sentence (if none is, the one nearest p_{t-1}). Their scores are
  computed on a gathered window whose static width is the smallest of
  `window_buckets(S)` that holds the widest kept interval of the batch, chosen
  per step by `nn.switch`: a narrow focus costs a narrow computation.
  tau = inf (and training) takes the untruncated path over all S positions.
  """

  def setup_kind(self):
    self.strength_hidden = nn.Dense(self.hidden_size, use_bias=False)      # W_g
    self.strength_out = nn.Dense(1)                                        # v_g, b_g

  def initial_state(self, cache) -> State:
    return {'center': jnp.zeros(cache['lengths'].shape, jnp.float32)}

  def strength(self, step):
    hidden = jnp.tanh(self.strength_hidden(jnp.concatenate([step.prev_query, step.inputs], -1)))
    return jax.nn.sigmoid(self.strength_out(hidden)[:, 0])                # [B]

  def kept_interval(self, g, previous, lengths, tau):
    """First and last kept position [B] each (closed form), for finite tau."""
    radius = self.config.sigma * jnp.sqrt(2.0 * tau / g)
    first = jnp.maximum(jnp.floor(previous - radius) + 1, 0).astype(jnp.int32)
    last = jnp.minimum(jnp.ceil(previous + radius) - 1, lengths - 1).astype(jnp.int32)
    nearest = jnp.clip(jnp.round(previous), 0, lengths - 1).astype(jnp.int32)
    empty = last < first
    return jnp.where(empty, nearest, first), jnp.where(empty, nearest, last)

  def penalty(self, g, previous, positions):
    return g[:, None] * (positions - previous[:, None]) ** 2 / (2.0 * self.config.sigma ** 2)

  def __call__(self, query, cache, state, step, with_weights=False, train=False):
    g = self.strength(step)
    previous = state['center']
    lengths = cache['lengths']
    length = cache['mask'].shape[1]
    tau = math.inf if train else self.config.tau
    diagnostics = {'strength': g, 'previous_center': previous}
    if math.isinf(tau):
      positions = jnp.broadcast_to(jnp.arange(length), cache['mask'].shape)
      weights = self.attend_all(query, cache, -self.penalty(g, previous, positions))
      context = jnp.einsum('bs,bsd->bd', weights, cache['memory'])
      center = jnp.sum(weights * positions, -1)
      diagnostics.update(window=lengths.astype(jnp.float32), computed=jnp.full(lengths.shape, float(length)),
                         first=jnp.zeros_like(lengths), last=lengths - 1)
      full_weights = weights
    else:
      first, last = self.kept_interval(g, previous, lengths, tau)
      widths = window_buckets(length)
      branch = jnp.searchsorted(jnp.array(widths), jnp.max(last - first + 1))

      def windowed(width):
        def run(mdl, query, cache, g, previous, first, last):
          positions = first[:, None] + jnp.arange(width)                  # [B, W]
          valid = positions <= last[:, None]
          weights = mdl.attend_window(query, cache, positions, valid,
                                      -mdl.penalty(g, previous, positions))
          context = jnp.einsum('bw,bwd->bd', weights, gather_positions(cache['memory'], positions))
          center = jnp.sum(weights * positions, -1)
          scattered = scatter_positions(weights, positions, valid, length) if with_weights else None
          return context, center, scattered, jnp.full(g.shape, float(width))
        return run

      operands = (query, cache, g, previous, first, last)
      if self.is_initializing():   # params must exist before the data-dependent switch
        out = windowed(length)(self, *operands)
      else:
        out = nn.switch(branch, [windowed(w) for w in widths], self, *operands)
      context, center, full_weights, computed = out
      diagnostics.update(window=(last - first + 1).astype(jnp.float32), computed=computed,
                         first=first, last=last)
    diagnostics['center'] = center
    if with_weights:
      diagnostics['weights'] = full_weights
    return context, {'center': center}, diagnostics


POSITION_ENCODINGS = ('none', 'renorm', 'renorm_mean1', 'unnormalized')


def position_encoding(lengths, length: int, num_slots: int, max_length: int, mode: str):
  """Britz et al. 3.2: L[s, k] = (1 - k/K)(1 - s/S) + (k/K)(s/S), 1-based k and s, S = max_length.

  'renorm' (paper): entries past each sentence's length masked, the rest of
  each slot's column renormalised to sum to 1 over time; 'renorm_mean1':
  renormalised to mean 1 instead (a labelled deviation: the paper's version
  shrinks logits ~|S|-fold); 'unnormalized': L as is (neulab/xnmt).
  Returns [B, length, K].
  """
  k = jnp.arange(1, num_slots + 1) / num_slots                             # [K]
  s = jnp.arange(1, length + 1) / max_length                               # [S]
  table = (1 - k)[None, :] * (1 - s)[:, None] + k[None, :] * s[:, None]    # [S, K]
  table = jnp.broadcast_to(table, (lengths.shape[0], length, num_slots))
  if mode == 'unnormalized':
    return table
  mask = (jnp.arange(length)[None, :] < lengths[:, None])[..., None]       # [B, S, 1]
  table = jnp.where(mask, table, 0.0)
  table = table / jnp.maximum(table.sum(1, keepdims=True), 1e-9)
  if mode == 'renorm_mean1':
    table = table * lengths[:, None, None]
  return table


class MemoryAttention(nn.Module):
  """Britz, Guan & Luong 2017: K memory slots computed once, an O(K D) lookup per step.

    encoding: alpha = f_enc(W_alpha hbar_s [* l_s])  [B, S, K],  C_k = sum_s alpha_{s,k} hbar_s
    decoding: beta_t = f_dec(W_beta h_t)  [B, K],  c_t = sum_k beta_{t,k} C_k

  f_enc: 'softmax_slots' (over the K slots of each position, the paper's
  equation), 'softmax_time' (over the positions of each slot, xnmt's reading)
  or 'sigmoid'; f_dec: 'softmax' or 'sigmoid'. Padding never enters C: its
  rows of alpha are zero (masked after the position-encoding product). The
  cache holds C and alpha only; a decoder step never touches the encoder states.
  """
  config: Any
  hidden_size: int
  max_source_length: int

  def setup(self):
    self.encoder_scores = nn.Dense(self.config.num_memory, use_bias=False)  # W_alpha
    self.decoder_scores = nn.Dense(self.config.num_memory, use_bias=False)  # W_beta

  def prepare(self, memory, lengths) -> Cache:
    cfg = self.config
    length = memory.shape[1]
    mask = (jnp.arange(length)[None, :] < lengths[:, None])[..., None]     # [B, S, 1]
    logits = self.encoder_scores(memory)                                   # [B, S, K]
    if cfg.position_encoding != 'none':
      if length > self.max_source_length:
        from nmt_jax.errors import ConfigError  # pylint: disable=g-import-not-at-top
        raise ConfigError(
            f'position encodings cover {self.max_source_length} source positions but a batch has '
            f'{length}; raise model.attention.max_source_length or lower data.max_length')
      logits = logits * position_encoding(lengths, length, cfg.num_memory,
                                          self.max_source_length, cfg.position_encoding)
    if cfg.encoder_scoring == 'softmax_slots':
      alpha = jnp.where(mask, jax.nn.softmax(logits, axis=-1), 0.0)
    elif cfg.encoder_scoring == 'softmax_time':
      alpha = masked_softmax(logits, mask, axis=1)
    else:
      alpha = jnp.where(mask, jax.nn.sigmoid(logits), 0.0)
    slots = jnp.einsum('bsk,bsd->bkd', alpha, memory)                      # [B, K, D]
    return {'slots': slots, 'alpha': alpha, 'lengths': lengths}

  def initial_state(self, cache) -> State:
    del cache
    return {}

  def __call__(self, query, cache, state, step, with_weights=False, train=False):
    del step, train
    logits = self.decoder_scores(query)                                    # [B, K]
    if self.config.decoder_scoring == 'softmax':
      beta = jax.nn.softmax(logits, axis=-1)
    else:
      beta = jax.nn.sigmoid(logits)
    context = jnp.einsum('bk,bkd->bd', beta, cache['slots'])
    diagnostics = {'window': jnp.full(query.shape[:1], float(self.config.num_memory))}
    if with_weights:
      diagnostics['weights'] = beta
    return context, state, diagnostics


KINDS = {
    'global': GlobalAttention,
    'local_m': LocalAttention,
    'local_p': LocalAttention,
    'flexible': FlexibleAttention,
    'memory': MemoryAttention,
}
ALL_KINDS = ('none',) + tuple(KINDS)


def make_attention(config, hidden_size, max_source_length) -> Optional[nn.Module]:
  """The attention module of `config.kind`, or None for 'none'."""
  if config.kind == 'none':
    return None
  if config.kind not in KINDS:
    raise ValueError(f'unknown attention kind {config.kind!r}; use one of {ALL_KINDS}')
  return KINDS[config.kind](config, hidden_size, max_source_length)
