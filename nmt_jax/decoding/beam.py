"""Batched beam search, with GNMT's length and coverage penalties.

A finished hypothesis Y of source X (|X| tokens, EOS included) scores
log p(Y|X) / lp(|Y|) + cp(X; Y) (Wu et al. 2016), with lp = length_penalty
and cp = coverage_penalty: each of the |X| positions' attention summed over
Y's steps (EOS's included), capped at 1.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from nmt_jax import attention
from nmt_jax.data.vocab import BOS
from nmt_jax.data.vocab import EOS
from nmt_jax.data.vocab import PAD
from nmt_jax.decoding import loop
from nmt_jax.decoding import scorers
from nmt_jax.model import seq2seq

# The floor of an attention sum in the coverage penalty's log: a position no
# step attended to (windowed kinds leave some at exactly 0) costs
# beta * log(1e-6) = -13.8 beta instead of -inf, so its hypothesis is still
# ranked. (OpenNMT-py takes log(0) = -inf: such a hypothesis always loses.)
COVERAGE_FLOOR = 1e-6


def length_penalty(length, alpha):
  """GNMT (Wu et al. 2016): ((5 + length) / 6) ** alpha."""
  return ((5.0 + length) / 6.0) ** alpha


def coverage_penalty(attention_sums, lengths, beta):
  """GNMT: beta * sum_{i < |X|} log(min(sum_t a_t(i), 1)) <= 0.

  attention_sums [..., S] (each source position's attention summed over a
  hypothesis' steps), lengths [...] (|X|, padding excluded) -> [...].
  """
  capped = jnp.clip(attention_sums, COVERAGE_FLOOR, 1.0)
  inside = jnp.arange(attention_sums.shape[-1]) < lengths[..., None]
  return beta * jnp.sum(jnp.where(inside, jnp.log(capped), 0.0), -1)


def best_candidates(live_logp, log_probs, n: int):
  """The n best extensions of K hypotheses: live_logp[b, k] + log_probs[b, k, v].

  live_logp [B, K], log_probs [B, K, V] -> (scores, beams, tokens), each
  [B, n], best first: the same as one top_k over the K x V candidates
  flattened (ties go to the lower beam, then the lower token).

  One top_k over the K x V candidates sorts K x V values. Here a token's
  best candidate over the K hypotheses ranks the token: the n best of the
  K x V candidates lie in the n best-ranked tokens (each lies in a token
  whose best is at least as good, and a token's best is one of the
  candidates), so top_k runs over V token bests, then over those n tokens'
  K x n candidates. Tokens rank as their best candidates do in the flat
  order: by score, then by flat index k * V + v of the best (the first
  hypothesis reaching it), which decides among tokens tied at the n-th
  score (untrained models tie often; -inf ties at every step past a limit).
  """
  batch, k, vocab = log_probs.shape
  # The flat top_k where the token ranking below cannot run: too few tokens,
  # or flat indices past float32's exact integers (2^24).
  if vocab <= n or k * vocab > 2**24:
    scores, index = jax.lax.top_k(
        (live_logp[..., None] + log_probs).reshape(batch, k * vocab), n
    )
    return scores, index // vocab, (index % vocab).astype(jnp.int32)
  # Each token's best score and the first hypothesis reaching it: [B, V].
  # Elementwise over K slices, so XLA makes it one vectorised pass.
  token_best = live_logp[:, 0, None] + log_probs[:, 0]
  best_beam = jnp.zeros(token_best.shape, jnp.int32)
  for beam_index in range(1, k):
    candidate = live_logp[:, beam_index, None] + log_probs[:, beam_index]
    best_beam = jnp.where(candidate > token_best, beam_index, best_beam)
    token_best = jnp.maximum(token_best, candidate)
  # The n-th best token score. (The barrier keeps this read out of the
  # top_k's slice: XLA:CPU sorts all V values for a top_k whose sort is read
  # other than by one slice from 0.)
  nth = jax.lax.optimization_barrier(jax.lax.top_k(token_best, n)[0])
  nth = nth[:, n - 1 :]  # [B, 1]
  # Above the n-th score every token is taken; at it, the lowest flat indices
  # of their best candidates (exact in float32: K x V <= 2^24).
  flat_index = best_beam * vocab + jnp.arange(vocab, dtype=jnp.int32)
  rank = jnp.where(
      token_best > nth,
      float(k * vocab),
      jnp.where(token_best == nth, -flat_index.astype(jnp.float32), -jnp.inf),
  )
  # The n tokens in id order, so that the positions of their K x n
  # candidates order ties as the flat index does.
  chosen = jnp.sort(jax.lax.top_k(rank, n)[1], axis=-1)  # [B, n]
  picked = live_logp[..., None] + jnp.take_along_axis(
      log_probs, chosen[:, None, :], axis=2
  )  # [B, K, n]
  scores, index = jax.lax.top_k(picked.reshape(batch, k * n), n)
  tokens = jnp.take_along_axis(chosen, index % n, axis=1)
  return scores, index // n, tokens.astype(jnp.int32)


class BeamState(NamedTuple):
  i: jax.Array  # scalar step
  tokens: jax.Array  # [B, K] last token of each live hypothesis
  live_seqs: jax.Array  # [B, K, T]
  live_logp: jax.Array  # [B, K] log-probability (-inf: no hypothesis)
  fin_seqs: jax.Array  # [B, K, T]
  fin_scores: jax.Array  # [B, K] length-normalised (-inf: empty slot)
  # [B, K, S] each live hypothesis' attention summed over its steps
  # (coverage penalty), or None
  attention_sums: Any
  decoder: Any  # DecoderState, leaves [B * K, ...]
  windows: loop.Windows
  live_history: Any  # diagnostics [B, K, T, ...] or None
  fin_history: Any


def beam_search(
    model: seq2seq.Seq2Seq,
    params,
    source,
    *,
    beam_size: int,
    alpha: float,
    ratio: float,
    offset: int,
    with_diagnostics: bool = False,
    alignments: bool = False,
    attention_weights: bool = False,
    gate_table: str = 'auto',
    unroll: int = 1,
    beta: float = 0.0
) -> loop.DecodeOutput:
  """Batched beam search of source [B, S] -> loop.DecodeOutput with the n-best lists.

  Each step extends the K live hypotheses of a sentence and keeps the best 2K
  candidates. As in fairseq, a candidate ending in EOS among the top K is
  finished (scored logp / length_penalty + coverage_penalty, the latter with
  weight `beta`, 0 = off); the K best candidates not ending in EOS stay live.
  Finished hypotheses are merged into a top-K list and never dropped for a
  worse one. A sentence stops when its worst finished score beats the best
  score any live hypothesis could still reach: live_logp /
  length_penalty(limit) (log-probabilities only fall, the penalty only
  grows, and the coverage penalty is never above 0), so neither penalty
  stops the search early.
  """
  batch, k = source.shape[0], beam_size
  steps = loop.max_steps(source.shape[1], ratio, offset)
  limits = loop.length_limits(source, ratio, offset)
  scorer = scorers.as_scorer(model)
  cache, decoder = scorer.encode(params, source)
  repeat = lambda x: jnp.repeat(x, k, axis=0)  # [B, ...] -> [B*K, ...]
  decoder = jax.tree_util.tree_map(repeat, decoder)
  cache = scorer.beam_cache(cache, k)
  flat_limits = repeat(limits)
  batch_offset = (jnp.arange(batch) * k)[:, None]  # [B, 1]
  prepared = scorer.prepare(params, batch * k * steps, gate_table)
  step_fn = loop.step_function(
      scorer,
      prepared,
      cache,
      with_diagnostics,
      alignments,
      attention_weights,
      beta > 0,
  )
  source_lengths = jnp.sum(source != PAD, axis=-1)[:, None]  # [B, 1]

  live_history = fin_history = None
  _, _, shapes, step_diagnostics = jax.eval_shape(
      step_fn, decoder, jnp.zeros((batch * k,), jnp.int32)
  )
  attention_sums = None
  if beta > 0:
    if attention.source_weights(step_diagnostics) is None:
      raise ValueError('the coverage penalty needs attention weights')
    attention_sums = jnp.zeros((batch, k, source.shape[1]), jnp.float32)
  if shapes is not None:
    live_history = jax.tree_util.tree_map(
        lambda h: h.reshape((batch, k) + h.shape[1:]),
        loop.history_buffers(shapes, steps),
    )
    fin_history = live_history

  def gather(x, index):
    """x [B, N, ...], index [B, M] -> [B, M, ...]."""
    return jnp.take_along_axis(
        x, index.reshape(index.shape + (1,) * (x.ndim - 2)), axis=1
    )

  def rows_done(s: BeamState):
    """[B] True where no live hypothesis can beat the worst finished one."""
    best_possible = s.live_logp[:, 0] / length_penalty(limits, alpha)
    return (s.fin_scores[:, -1] >= best_possible) | (s.i >= limits)

  def cond(s: BeamState):
    return (s.i < steps) & ~jnp.all(rows_done(s))

  def body(s: BeamState):
    decoder, log_probs, kept, diagnostics = step_fn(
        s.decoder, s.tokens.reshape(-1)
    )
    vocab = log_probs.shape[-1]
    # [B*K, V]
    log_probs = loop.restrict(log_probs, s.i, flat_limits)
    top_logp, top_beam, top_token = best_candidates(
        s.live_logp, log_probs.reshape(batch, k, vocab), 2 * k
    )
    # [B, 2K, T]
    top_seqs = gather(s.live_seqs, top_beam).at[:, :, s.i].set(top_token)
    is_eos = top_token == EOS

    # Live: the K best candidates that did not end.
    # [B, K]
    live_logp, live_pos = jax.lax.top_k(
        jnp.where(is_eos, loop.NEG_INF, top_logp), k
    )
    live_beam = gather(top_beam, live_pos)
    live_seqs = gather(top_seqs, live_pos)
    tokens = gather(top_token, live_pos)

    # Finished: EOS candidates ranked in the top K join the finished list.
    finished = top_logp / length_penalty(s.i + 1, alpha)
    attention_sums = s.attention_sums
    if attention_sums is not None:
      weights = attention.source_weights(diagnostics).astype(jnp.float32)
      stepped = attention_sums + weights.reshape(attention_sums.shape)
      top_sums = gather(stepped, top_beam)  # [B, 2K, S]
      finished = finished + coverage_penalty(top_sums, source_lengths, beta)
      attention_sums = gather(top_sums, live_pos)
    new_scores = jnp.where(
        is_eos & (jnp.arange(2 * k) < k), finished, loop.NEG_INF
    )
    fin_scores, fin_pos = jax.lax.top_k(
        jnp.concatenate([s.fin_scores, new_scores], 1), k
    )
    fin_seqs = gather(jnp.concatenate([s.fin_seqs, top_seqs], 1), fin_pos)

    # Statistics over the hypotheses that were live at this step.
    was_live = (s.live_logp > loop.NEG_INF) & ~rows_done(s)[:, None]  # [B, K]

    live_history, fin_history = s.live_history, s.fin_history
    if live_history is not None:
      stepped = jax.tree_util.tree_map(
          lambda h, d: h.at[:, :, s.i].set(d.reshape((batch, k) + d.shape[1:])),
          live_history,
          kept,
      )
      top_history = jax.tree_util.tree_map(
          lambda h: gather(h, top_beam), stepped
      )
      live_history = jax.tree_util.tree_map(
          lambda h: gather(h, live_pos), top_history
      )
      fin_history = jax.tree_util.tree_map(
          lambda f, t: gather(jnp.concatenate([f, t], 1), fin_pos),
          fin_history,
          top_history,
      )

    flat_beam = (live_beam + batch_offset).reshape(-1)  # [B*K]
    decoder = jax.tree_util.tree_map(lambda x: x[flat_beam], decoder)
    return BeamState(
        s.i + 1,
        tokens,
        live_seqs,
        live_logp,
        fin_seqs,
        fin_scores,
        attention_sums,
        decoder,
        s.windows.add(diagnostics, was_live),
        live_history,
        fin_history,
    )

  seqs = jnp.full((batch, k, steps), PAD, jnp.int32)
  init = BeamState(
      i=jnp.int32(0),
      tokens=jnp.full((batch, k), BOS, jnp.int32),
      live_seqs=seqs,
      live_logp=jnp.tile(
          jnp.array([0.0] + [loop.NEG_INF] * (k - 1)), (batch, 1)
      ),
      fin_seqs=seqs,
      fin_scores=jnp.full((batch, k), loop.NEG_INF),
      attention_sums=attention_sums,
      decoder=decoder,
      windows=loop.Windows.zeros(batch),
      live_history=live_history,
      fin_history=fin_history,
  )
  s = jax.lax.while_loop(cond, loop.unrolled(cond, body, unroll), init)

  # A sentence with no finished hypothesis (only if the loop bound cut it)
  # falls back to live ones.
  has_finished = s.fin_scores[:, 0] > loop.NEG_INF  # [B]
  pick = lambda fin, live: jnp.where(
      loop.row_mask(has_finished, fin), fin, live
  )
  nbest_tokens = pick(s.fin_seqs, s.live_seqs)
  nbest_scores = pick(s.fin_scores, s.live_logp)
  nbest_history = history = None
  if s.fin_history is not None:
    nbest_history = jax.tree_util.tree_map(pick, s.fin_history, s.live_history)
    history = jax.tree_util.tree_map(lambda h: h[:, 0], nbest_history)
  return loop.DecodeOutput(
      nbest_tokens[:, 0],
      nbest_scores[:, 0],
      s.windows,
      history,
      nbest_tokens,
      nbest_scores,
      nbest_history,
  )
