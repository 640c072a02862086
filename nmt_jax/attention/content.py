"""Score functions and the base of the kinds that score encoder states.

score(h_t, hbar_s) of Luong et al. 2015 (eq. 8) and Bahdanau et al. 2015:

  dot        h_t^T hbar_s
  general    h_t^T W_a hbar_s
  concat     v_a^T tanh(W_a [h_t; hbar_s])      (Bahdanau's additive score)
  location   (W_a h_t)_s                        (a_t = softmax(W_a h_t))

Each score precomputes its key side once per sentence (`keys`) and scores a
query against any subset of positions, so windowed kinds score only the
positions they gather.

Coverage (Tu et al. 2016, model.attention.coverage): C_t(s) = sum_{t' < t}
a_t'(s), the attention position s has received so far, kept per hypothesis
in the kind's state ('coverage' [B, S]) and fed into the score:

  concat     v_a^T tanh(W_a [h_t; hbar_s] + w_c C_t(s))    (Tu, OpenNMT-py,
                                                            Sockeye)
  others     score(h_t, hbar_s) + w_c C_t(s)     (w_c a learned scalar)

w_c starts at 0: a model with coverage starts as the one without.
"""

from typing import Dict, Type

import flax.linen as nn
import jax.numpy as jnp

from nmt_jax.attention import base
from nmt_jax.system import errors


class Score(nn.Module):
  """score(query, keys) of G queries per sentence over W positions."""

  hidden_size: int
  max_source_length: int
  coverage: bool = False  # model.attention.coverage: w_c C_t(s) is added
  # Whether `project_query` scores the encoder states themselves: the same
  # scores as __call__ on the keys, from the query side.
  QUERY_SIDE = False

  def setup(self):
    if self.coverage:
      # w_c, a scalar added to the score per unit of coverage.
      self.coverage_weight = self.param(
          'coverage_weight', nn.initializers.zeros_init(), ()
      )

  def add_coverage(self, scores, coverage):
    """scores + w_c C_t(s): scores, coverage [B, G, W] (None: scores)."""
    if coverage is None:
      return scores
    weight = self.coverage_weight.astype(scores.dtype)
    return scores + weight * coverage.astype(scores.dtype)

  def keys(self, memory):
    """memory [B, S, D] -> keys [B, S, A]."""
    return memory

  def project_query(self, query):
    """query [B, G, H] -> [B, G, D] whose products with the memory [B, S, D]
    are the scores (QUERY_SIDE scores only)."""
    raise NotImplementedError

  def __call__(self, query, keys, positions, coverage=None):
    """query [B, G, H], keys [B, W, A], positions [B, W] -> scores [B, G, W].

    coverage [B, G, W]: C_t(s) at the positions (None: no coverage).
    """
    scores = jnp.einsum('bgh,bwh->bgw', query, keys)
    return self.add_coverage(scores, coverage)

  @classmethod
  def cost(cls, hidden: int, max_source_length: int, source_length, width):
    """(FLOPs once per sentence, FLOPs per step scoring `width` positions)."""
    del max_source_length, source_length
    return 0.0, 2.0 * width * hidden


class Dot(Score):
  pass


class General(Score):
  QUERY_SIDE = True

  def setup(self):
    super().setup()
    self.key_proj = nn.Dense(self.hidden_size, use_bias=False)  # W_a

  def keys(self, memory):
    return self.key_proj(memory)

  def project_query(self, query):
    # h_t^T (W_a hbar_s) = (W_a^T h_t)^T hbar_s; W_a is created by `keys`,
    # which `prepare` calls.
    kernel = self.key_proj.variables['params']['kernel']  # [D, A]
    return jnp.einsum('bga,da->bgd', query, kernel.astype(query.dtype))

  @classmethod
  def cost(cls, hidden, max_source_length, source_length, width):
    return 2.0 * hidden * hidden * source_length, 2.0 * width * hidden


class Concat(Score):

  def setup(self):
    self.key_proj = nn.Dense(self.hidden_size, use_bias=False)  # W_a, key half
    self.query_proj = nn.Dense(self.hidden_size, use_bias=False)  # query half
    self.v = nn.Dense(1, use_bias=False)  # v_a
    if self.coverage:
      # w_c [A], inside the tanh (no scalar coverage_weight: not super()).
      self.coverage_proj = nn.Dense(
          self.hidden_size,
          use_bias=False,
          kernel_init=nn.initializers.zeros_init(),
      )

  def keys(self, memory):
    return self.key_proj(memory)

  def __call__(self, query, keys, positions, coverage=None):
    # [B, G, W, A]
    pre = keys[:, None] + self.query_proj(query)[:, :, None]
    if coverage is not None:
      pre = pre + self.coverage_proj(coverage[..., None].astype(pre.dtype))
    return self.v(jnp.tanh(pre))[..., 0]

  @classmethod
  def cost(cls, hidden, max_source_length, source_length, width):
    return (
        2.0 * hidden * hidden * source_length,
        2.0 * hidden * hidden + 2.0 * width * hidden,
    )


class Location(Score):
  """Scores positions, not keys.

  One logit per position, up to max_source_length (positions past it, only
  in a test split kept whole, take the last one's).
  """

  def setup(self):
    super().setup()
    self.location = nn.Dense(self.max_source_length)  # W_a h_t

  def keys(self, memory):
    return memory[..., :0]  # no key side

  def __call__(self, query, keys, positions, coverage=None):
    logits = self.location(query)  # [B, G, S_max]
    positions = jnp.minimum(positions, logits.shape[-1] - 1)[:, None]
    positions = jnp.broadcast_to(
        positions, logits.shape[:2] + positions.shape[2:]
    )
    scores = jnp.take_along_axis(logits, positions, axis=2)
    return self.add_coverage(scores, coverage)

  @classmethod
  def cost(cls, hidden, max_source_length, source_length, width):
    return 0.0, 2.0 * hidden * max_source_length


SCORES: Dict[str, Type[Score]] = {
    'dot': Dot,
    'general': General,
    'concat': Concat,
    'location': Location,
}

# The field every content kind reads (shared, so declared once).
SCORE_FIELD = {
    # score(h_t, hbar_s): 'dot', 'general', 'concat' or 'location'.
    'score': ('general', errors.one_of(*SCORES)),
}
# Shared by the content kinds too: Tu et al.'s coverage C_t(s) in the score
# (see the module docstring); it adds w_c, so it is part of the identity.
COVERAGE_FIELD = {
    'coverage': (False, errors.boolean),
}


def gather_positions(x, positions):
  """x [B, S, ...], positions [B, W] int -> [B, W, ...] (clipped to 0..S-1)."""
  positions = jnp.clip(positions, 0, x.shape[1] - 1)
  index = positions.reshape(positions.shape + (1,) * (x.ndim - 2))
  return jnp.take_along_axis(x, index, axis=1)


def window_buckets(length: int, smallest: int = 8):
  """Static window widths to pick from: smallest, 2 x smallest, ... and the
  full length."""
  widths, width = [], smallest
  while width < length:
    widths.append(width)
    width *= 2
  return widths + [length]


def scatter_positions(weights, positions, valid, length):
  """Window weights [B, W] at positions [B, W] -> source weights [B, length]."""
  rows = jnp.arange(weights.shape[0])[:, None]
  full = jnp.zeros((weights.shape[0], length), weights.dtype)
  return full.at[rows, jnp.clip(positions, 0, length - 1)].add(
      jnp.where(valid, weights, 0.0)
  )


class ContentAttention(base.Attention):
  """Shared by the kinds that score encoder states with `score`."""

  FIELDS = {**SCORE_FIELD, **COVERAGE_FIELD}

  @classmethod
  def validate(cls, config):
    attention = config.model.attention
    longest = config.data.max_length + 1
    if attention.score == 'location' and attention.max_source_length < longest:
      raise errors.config_error(
          'model.attention.max_source_length',
          attention.max_source_length,
          'is shorter than the longest source (data.max_length + 1 = '
          f'{longest}) and the location score has one logit per position up'
          ' to it',
          'raise it or leave it unset',
      )

  def setup(self):
    score = SCORES[self.config.score]
    self.scorer = score(
        self.hidden_size, self.config.max_source_length, self.config.coverage
    )

  def prepare(self, memory, lengths) -> base.Cache:
    cache = base.source_cache(memory, lengths)
    cache['keys'] = self.scorer.keys(memory)
    return cache

  def initial_state(self, cache) -> base.State:
    """With coverage: C_0 = 0 ('coverage' [B, S], at least float32: a sum of
    up to T weights)."""
    if not self.config.coverage:
      return {}
    dtype = base.float32_or_wider(cache['memory'].dtype)
    return {'coverage': jnp.zeros(cache['mask'].shape, dtype)}

  def covered(self, state, weights) -> base.State:
    """state with C_{t+1} = C_t + a_t, weights [N, S] over source positions
    (as it is without coverage)."""
    if not self.config.coverage:
      return state
    coverage = state['coverage']
    return dict(state, coverage=coverage + weights.astype(coverage.dtype))

  def attend_all(
      self, query, cache, logit_offset=None, dtype=None, coverage=None
  ):
    """Masked softmax over all S positions -> weights [N, S].

    query [N, H]: N = B * G rows, G per cache row (base.group); coverage
    [N, S]: C_t (None without coverage).
    """
    mask = cache['mask']
    positions = jnp.broadcast_to(jnp.arange(mask.shape[1]), mask.shape)
    grouped = base.group(query, mask.shape[0])  # [B, G, H]
    if coverage is not None:
      coverage = coverage.reshape(grouped.shape[:2] + coverage.shape[1:])
    if self._query_side(grouped.shape[1]):
      # One query per sentence (training, greedy search): projecting it is a
      # small product per step, after which the step reads the encoder
      # states only, not the keys as well (the precomputed keys are then
      # unused, and XLA drops them). With G > 1 (beam search) every query
      # would be projected: there the shared keys are cheaper.
      # Coverage (general score: w_c C_t(s) outside the product) does not
      # change the key side, so the shortcut holds with it.
      projected = self.scorer.project_query(grouped)
      scores = jnp.einsum('bgd,bwd->bgw', projected, cache['memory'])
      scores = self.scorer.add_coverage(scores, coverage)
    else:
      # [B, G, S]
      scores = self.scorer(grouped, cache['keys'], positions, coverage)
    if logit_offset is not None:
      scores = scores + logit_offset.reshape(scores.shape)
    weights = base.masked_softmax(
        scores, mask[:, None], dtype=dtype or cache['memory'].dtype
    )
    return weights.reshape(query.shape[0], -1)

  def _query_side(self, queries_per_sentence: int) -> bool:
    return (
        self.project_query
        and self.scorer.QUERY_SIDE
        and queries_per_sentence == 1
    )

  def attend_window(
      self,
      query,
      cache,
      positions,
      valid,
      logit_offset=None,
      dtype=None,
      coverage=None,
  ):
    """Masked softmax over gathered positions -> weights [N, W].

    query [N, H]: N = B * G rows, G per cache row (base.group); positions
    [B, W] of each cache row, gathered once for its G queries; valid,
    logit_offset and coverage (C_t at the row's window, or None) [N, W].
    O(W) work, not O(S): only those keys are scored.
    """
    keys = gather_positions(cache['keys'], positions)
    grouped = base.group(query, positions.shape[0])  # [B, G, H]
    if coverage is not None:
      coverage = base.group(coverage, positions.shape[0])  # [B, G, W]
    scores = self.scorer(grouped, keys, positions, coverage)
    scores = scores.reshape(valid.shape)
    if logit_offset is not None:
      scores = scores + logit_offset
    return base.masked_softmax(
        scores, valid, dtype=dtype or cache['memory'].dtype
    )

  def window_rows(self, width, start, first, last):
    """Sentence b's window start[b] .. start[b] + width - 1 -> positions
    [B, W]; the same for its G rows -> rows [N, W], and valid [N, W]: the
    row's kept positions first..last [N]."""
    positions = start[:, None] + jnp.arange(width)
    rows = jnp.repeat(positions, first.shape[0] // start.shape[0], 0)
    valid = (rows >= first[:, None]) & (rows <= last[:, None])
    return positions, rows, valid

  def window_context(
      self,
      query,
      cache,
      positions,
      rows,
      valid,
      offset=None,
      scale=None,
      with_weights=False,
      dtype=None,
      coverage=None,
  ):
    """Each row's attention over its valid positions of its sentence's
    window (window_rows) -> context [N, D], weights [N, W] and, if
    with_weights or coverage is given, the weights at their source
    positions [N, S] (else None).

    offset [N, W] is added to the scores, scale [N, W] multiplies the
    softmax weights (not renormalised). dtype: the weights' (default the
    memory's; the context is computed in the memory's). coverage [N, S]:
    C_t, read at each row's window (None without coverage).
    """
    if coverage is not None:
      coverage = gather_positions(coverage, rows)  # [N, W]
    weights = self.attend_window(
        query, cache, positions, valid, offset, dtype, coverage
    )
    if scale is not None:
      weights = (weights * scale).astype(weights.dtype)
    window_memory = gather_positions(cache['memory'], positions)
    # [N, D]
    context = base.grouped_matmul(
        weights.astype(window_memory.dtype), window_memory
    )
    scattered = None
    if with_weights or coverage is not None:
      length = cache['mask'].shape[1]
      scattered = scatter_positions(weights, rows, valid, length)
    return context, weights, scattered

  def attend_union(self, windowed, widths, sentences, first, last, *operands):
    """windowed(module, width, start, first, last, *operands) on one window
    per sentence.

    first, last [N]: each row's first and last kept position (N = B * G
    rows, G per sentence of the B `sentences`). Sentence b's window starts
    at start [B], the first kept position of its rows, and has the smallest
    of the static `widths` that holds the union of its rows' intervals in
    every sentence of the batch, picked per step (`nn.switch`): a narrow
    focus costs a narrow computation, and the G rows share one gather.
    """
    start = jnp.min(base.group(first, sentences), 1)
    if len(widths) == 1:
      return windowed(self, widths[0], start, first, last, *operands)
    end = jnp.max(base.group(last, sentences), 1)
    # All comparisons at once: the default search is a loop, and on a GPU
    # each iteration of a loop is launched from the host, every step.
    branch = jnp.searchsorted(
        jnp.array(widths), jnp.max(end - start + 1), method='compare_all'
    )
    if self.is_initializing():  # params must exist before the switch
      return windowed(self, widths[-1], start, first, last, *operands)
    branches = [lambda mdl, *ops, w=w: windowed(mdl, w, *ops) for w in widths]
    return nn.switch(branch, branches, self, start, first, last, *operands)

  @classmethod
  def content_cost(cls, model_config, source_length, width) -> base.Cost:
    """Scores and context over `width` of `source_length` positions."""
    attention, hidden = model_config.attention, model_config.hidden_size
    sentence, step = SCORES[attention.score].cost(
        hidden,
        attention.max_source_length or source_length,
        source_length,
        width,
    )
    return base.Cost(sentence, step + 2.0 * width * hidden, float(width))
