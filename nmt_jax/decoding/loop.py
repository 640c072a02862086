"""What every decoding loop shares: length limits, the word masks, the step
function, per-step records and the statistics of the attention window.

Length limit: a hypothesis of a source with n tokens (EOS included) has at
most floor(ratio * n) + offset tokens, EOS included; at that last step only
EOS may be emitted (`restrict`).
"""

import functools
from typing import Dict, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from nmt_jax import attention
from nmt_jax.data.vocab import BOS
from nmt_jax.data.vocab import EOS
from nmt_jax.data.vocab import PAD

NEG_INF = -jnp.inf


class Windows(NamedTuple):
  """Per-sentence sums over the (step, hypothesis) pairs decoded.

  A pair counts while its hypothesis is live (greedy: until EOS; beam: every
  live beam at each step until the sentence stops).
  """

  window: jax.Array  # [B] source positions attended ('window')
  computed: jax.Array  # [B] positions actually scored ('computed')
  steps: jax.Array  # [B] number of (step, hypothesis) pairs summed

  @classmethod
  def zeros(cls, batch: int) -> 'Windows':
    zeros = jnp.zeros((batch,), jnp.float32)
    return cls(zeros, zeros, zeros)

  def add(self, diagnostics, live) -> 'Windows':
    """Adds one step: live [B, N] hypotheses with diagnostics of [B * N]."""
    shape = live.shape
    total = lambda x: jnp.where(live, x.reshape(shape), 0.0).sum(1)
    return Windows(
        self.window + total(diagnostics['window']),
        self.computed + total(attention.computed_positions(diagnostics)),
        self.steps + live.sum(1),
    )


class DecodeOutput(NamedTuple):
  tokens: jax.Array  # [B, T] best hypothesis, EOS-terminated, PAD after
  scores: jax.Array  # [B] its log-probability (length-normalised in beams)
  windows: Windows
  # Per step [B, T, ...] of the best hypothesis: every diagnostic
  # (with_diagnostics), 'alignment' (alignments: argmax source position) and
  # 'attention' [B, T, S] (attention: the weights over source positions,
  # float32; zeros on padding and after EOS).
  diagnostics: Optional[Dict[str, jax.Array]] = None
  # Beam search: the K best, best first; sampling: the samples in order.
  nbest_tokens: Optional[jax.Array] = None  # [B, K, T] not for greedy
  nbest_scores: Optional[jax.Array] = None  # [B, K] (-inf: empty slot)
  nbest_diagnostics: Optional[Dict[str, jax.Array]] = None  # [B, K, T, ...]


def max_steps(source_length: int, ratio: float, offset: int) -> int:
  """Static loop bound for a padded source length; float32 as length_limits
  (a row filling its width gets the loop's last step, its forced EOS)."""
  return int(np.floor(np.float32(ratio) * np.float32(source_length))) + offset


def length_limits(source, ratio, offset):
  """[B] largest number of tokens (EOS included) each row may produce."""
  lengths = jnp.sum(source != PAD, axis=-1).astype(jnp.float32)
  limits = jnp.floor(jnp.float32(ratio) * lengths)
  return limits.astype(jnp.int32) + offset


def argmax(x):
  """jnp.argmax over the last axis (the first of equal maxima), int32.

  As two reductions XLA:CPU vectorises, a max and a min over the indices
  where it is reached: its argmax, one reduction over (value, index) pairs,
  took 3.3 ms of a 12 ms greedy step at a 16k vocabulary and 64 sentences
  (`bench ops`), these about 0.7 ms. A row with a NaN gives its last index.
  """
  size = x.shape[-1]
  best = jnp.max(x, axis=-1, keepdims=True)
  index = jnp.arange(size, dtype=jnp.int32)
  first = jnp.min(jnp.where(x == best, index, size), axis=-1)
  return jnp.minimum(first, size - 1)


def restrict(log_probs, step, limits):
  """Masks tokens a hypothesis may not emit at `step`: PAD and BOS always,
  everything but EOS at its last allowed step, everything after it.

  log_probs [N, V], step scalar, limits [N] -> [N, V].
  """
  vocab = jnp.arange(log_probs.shape[-1])
  never = (vocab == PAD) | (vocab == BOS)
  last = (step >= limits - 1)[:, None] & (vocab != EOS)
  over = (step >= limits)[:, None]
  return jnp.where(never | last | over, NEG_INF, log_probs)


def recorded(diagnostics, with_diagnostics: bool, alignments: bool, soft):
  """What a search keeps of a step's diagnostics [N, ...] (None: nothing).

  `soft`: the weights over source positions [N, S] as 'attention'.
  """
  kept = dict(diagnostics) if with_diagnostics else {}
  if alignments:
    weights = attention.source_weights(diagnostics)
    kept['alignment'] = jnp.argmax(weights, axis=-1).astype(jnp.int32)
  if soft:
    weights = attention.source_weights(diagnostics)
    kept['attention'] = weights.astype(jnp.float32)
  return kept or None


def step_function(
    scorer,
    prepared,
    cache,
    with_diagnostics,
    alignments,
    soft=False,
    weights=False,
):
  """fn(state, tokens) -> (state, log_probs, kept diagnostics, diagnostics).

  `prepared`: scorer.prepare's params, made once outside the loop. The
  diagnostics hold the attention weights with `weights`, `soft`,
  with_diagnostics or alignments; the kept ones hold them as 'attention'
  with `soft`.
  """
  with_weights = with_diagnostics or alignments or soft or weights

  def step_fn(state, tokens):
    state, log_probs, diagnostics = scorer.step(
        prepared, state, cache, tokens, with_weights
    )
    kept = recorded(diagnostics, with_diagnostics, alignments, soft)
    return state, log_probs, kept, diagnostics

  return step_fn


def row_mask(mask, x):
  """mask [N] broadcastable against x [N, ...]."""
  return mask.reshape(mask.shape + (1,) * (x.ndim - 1))


def history_buffers(diagnostics, length):
  """Zero buffers [N, length, ...] for per-step diagnostics [N, ...]."""
  return jax.tree_util.tree_map(
      lambda x: jnp.zeros((x.shape[0], length) + x.shape[1:], x.dtype),
      diagnostics,
  )


def unrolled(cond, body, unroll: int):
  """A while-loop body of `unroll` steps; each after the first is kept only
  where `cond` still holds, so the loop's result is the plain loop's."""
  if unroll == 1:
    return body

  def body_unrolled(carry):
    carry = body(carry)
    for _ in range(unroll - 1):
      keep = functools.partial(jnp.where, cond(carry))
      carry = jax.tree_util.tree_map(keep, body(carry), carry)
    return carry

  return body_unrolled
