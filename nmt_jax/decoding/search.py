"""Greedy search, beam search and teacher-forced decoding.

All three are pure functions of (params, source) compiled with jit; the
per-token loop is a `lax.while_loop`, never Python. The searches take a model
or a scorer (scorers.py: one model or an ensemble, whose params are then a
tuple of the members' parameters). Every row of a batch is decoded apart
(its own length limit, its own stopping test), so outputs do not depend on
the batch size or on source padding. `unroll` runs several steps per loop
iteration (fewer iterations, the same output).

Length limit: a hypothesis of a source with n tokens (EOS included) has at
most floor(ratio * n) + offset tokens, EOS included; at that last step only
EOS may be emitted.

Beam search scores a finished hypothesis Y of source X (|X| tokens, EOS
included) as log p(Y|X) / lp(|Y|) + cp(X; Y) (Wu et al. 2016), with
lp = length_penalty and cp = coverage_penalty: each of the |X| positions'
attention summed over Y's steps (EOS's included), capped at 1.
"""

import functools
from typing import Any, Dict, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from nmt_jax import attention
from nmt_jax.data.vocab import BOS
from nmt_jax.data.vocab import EOS
from nmt_jax.data.vocab import PAD
from nmt_jax.decoding import scorers
from nmt_jax.model import seq2seq

NEG_INF = -jnp.inf
# The floor of an attention sum in the coverage penalty's log: a position no
# step attended to (windowed kinds leave some at exactly 0) costs
# beta * log(1e-6) = -13.8 beta instead of -inf, so its hypothesis is still
# ranked. (OpenNMT-py takes log(0) = -inf: such a hypothesis always loses.)
COVERAGE_FLOOR = 1e-6


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
  # (with_diagnostics) and/or 'alignment' (alignments: argmax source position).
  diagnostics: Optional[Dict[str, jax.Array]] = None
  nbest_tokens: Optional[jax.Array] = None  # [B, K, T] beam search only
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


def _recorded(diagnostics, with_diagnostics: bool, alignments: bool):
  """What a search keeps of a step's diagnostics [N, ...] (None: nothing)."""
  kept = dict(diagnostics) if with_diagnostics else {}
  if alignments:
    weights = attention.source_weights(diagnostics)
    kept['alignment'] = jnp.argmax(weights, axis=-1).astype(jnp.int32)
  return kept or None


def _stepper(
    scorer, prepared, cache, with_diagnostics, alignments, weights=False
):
  """fn(state, tokens) -> (state, log_probs, kept diagnostics, diagnostics).

  `prepared`: scorer.prepare's params, made once outside the loop. The
  diagnostics hold the attention weights with `weights`, with_diagnostics
  or alignments.
  """
  with_weights = with_diagnostics or alignments or weights

  def step_fn(state, tokens):
    state, log_probs, diagnostics = scorer.step(
        prepared, state, cache, tokens, with_weights
    )
    kept = _recorded(diagnostics, with_diagnostics, alignments)
    return state, log_probs, kept, diagnostics

  return step_fn


def _rows(mask, x):
  """mask [N] broadcastable against x [N, ...]."""
  return mask.reshape(mask.shape + (1,) * (x.ndim - 1))


def _history(diagnostics, length):
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


def greedy_search(
    model: seq2seq.Seq2Seq,
    params,
    source,
    *,
    ratio: float,
    offset: int,
    with_diagnostics: bool = False,
    alignments: bool = False,
    gate_table: str = 'auto',
    unroll: int = 1
) -> DecodeOutput:
  """Argmax decoding of source [B, S] -> DecodeOutput."""
  batch = source.shape[0]
  steps = max_steps(source.shape[1], ratio, offset)
  limits = length_limits(source, ratio, offset)
  scorer = scorers.as_scorer(model)
  cache, state = scorer.encode(params, source)
  prepared = scorer.prepare(params, batch * steps, gate_table)
  step_fn = _stepper(scorer, prepared, cache, with_diagnostics, alignments)
  kept = jax.eval_shape(step_fn, state, jnp.zeros((batch,), jnp.int32))[2]
  history = None if kept is None else _history(kept, steps)

  def cond(carry):
    i, done = carry[0], carry[3]
    return (i < steps) & ~jnp.all(done)

  def body(carry):
    i, state, tokens, done, out, score, windows, history = carry
    state, log_probs, kept, diagnostics = step_fn(state, tokens)
    log_probs = restrict(log_probs, i, limits)
    best = jnp.argmax(log_probs, axis=-1).astype(jnp.int32)
    live = ~done
    score = score + jnp.where(live, jnp.max(log_probs, axis=-1), 0.0)
    windows = windows.add(diagnostics, live[:, None])
    tokens = jnp.where(live, best, PAD)
    out = out.at[:, i].set(tokens)
    if history is not None:
      # Zeros after a row's EOS, as in beam search.
      put = lambda h, d: h.at[:, i].set(jnp.where(_rows(live, d), d, 0))
      history = jax.tree_util.tree_map(put, history, kept)
    done = done | (tokens == EOS)
    return (i + 1, state, tokens, done, out, score, windows, history)

  init = (
      jnp.int32(0),
      state,
      jnp.full((batch,), BOS, jnp.int32),
      jnp.zeros((batch,), bool),
      jnp.full((batch, steps), PAD, jnp.int32),
      jnp.zeros((batch,), jnp.float32),
      Windows.zeros(batch),
      history,
  )
  _, _, _, _, out, score, windows, history = jax.lax.while_loop(
      cond, unrolled(cond, body, unroll), init
  )
  return DecodeOutput(out, score, windows, history)


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
  windows: Windows
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
    gate_table: str = 'auto',
    unroll: int = 1,
    beta: float = 0.0
) -> DecodeOutput:
  """Batched beam search of source [B, S] -> DecodeOutput with the n-best lists.

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
  steps = max_steps(source.shape[1], ratio, offset)
  limits = length_limits(source, ratio, offset)
  scorer = scorers.as_scorer(model)
  cache, decoder = scorer.encode(params, source)
  repeat = lambda x: jnp.repeat(x, k, axis=0)  # [B, ...] -> [B*K, ...]
  decoder = jax.tree_util.tree_map(repeat, decoder)
  cache = scorer.beam_cache(cache, k)
  flat_limits = repeat(limits)
  batch_offset = (jnp.arange(batch) * k)[:, None]  # [B, 1]
  prepared = scorer.prepare(params, batch * k * steps, gate_table)
  step_fn = _stepper(
      scorer, prepared, cache, with_diagnostics, alignments, beta > 0
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
        lambda h: h.reshape((batch, k) + h.shape[1:]), _history(shapes, steps)
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
    log_probs = restrict(log_probs, s.i, flat_limits)
    candidates = s.live_logp[..., None] + log_probs.reshape(batch, k, vocab)
    # [B, 2K]
    top_logp, top_index = jax.lax.top_k(
        candidates.reshape(batch, k * vocab), 2 * k
    )
    top_beam, top_token = top_index // vocab, (top_index % vocab).astype(
        jnp.int32
    )
    # [B, 2K, T]
    top_seqs = gather(s.live_seqs, top_beam).at[:, :, s.i].set(top_token)
    is_eos = top_token == EOS

    # Live: the K best candidates that did not end.
    # [B, K]
    live_logp, live_pos = jax.lax.top_k(jnp.where(is_eos, NEG_INF, top_logp), k)
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
    new_scores = jnp.where(is_eos & (jnp.arange(2 * k) < k), finished, NEG_INF)
    fin_scores, fin_pos = jax.lax.top_k(
        jnp.concatenate([s.fin_scores, new_scores], 1), k
    )
    fin_seqs = gather(jnp.concatenate([s.fin_seqs, top_seqs], 1), fin_pos)

    # Statistics over the hypotheses that were live at this step.
    was_live = (s.live_logp > NEG_INF) & ~rows_done(s)[:, None]  # [B, K]

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
      live_logp=jnp.tile(jnp.array([0.0] + [NEG_INF] * (k - 1)), (batch, 1)),
      fin_seqs=seqs,
      fin_scores=jnp.full((batch, k), NEG_INF),
      attention_sums=attention_sums,
      decoder=decoder,
      windows=Windows.zeros(batch),
      live_history=live_history,
      fin_history=fin_history,
  )
  s = jax.lax.while_loop(cond, unrolled(cond, body, unroll), init)

  # A sentence with no finished hypothesis (only if the loop bound cut it)
  # falls back to live ones.
  has_finished = s.fin_scores[:, 0] > NEG_INF  # [B]
  pick = lambda fin, live: jnp.where(_rows(has_finished, fin), fin, live)
  nbest_tokens = pick(s.fin_seqs, s.live_seqs)
  nbest_scores = pick(s.fin_scores, s.live_logp)
  nbest_history = history = None
  if s.fin_history is not None:
    nbest_history = jax.tree_util.tree_map(pick, s.fin_history, s.live_history)
    history = jax.tree_util.tree_map(lambda h: h[:, 0], nbest_history)
  return DecodeOutput(
      nbest_tokens[:, 0],
      nbest_scores[:, 0],
      s.windows,
      history,
      nbest_tokens,
      nbest_scores,
      nbest_history,
  )


def forced_decode(
    model: seq2seq.Seq2Seq, params, source, target_in
) -> DecodeOutput:
  """Teacher-forced decoding (Shu & Nakayama 5.5): all kinds run the same steps.

  source [B, S], target_in [B, T] -> argmax tokens and window statistics.
  """
  logits, diagnostics = model.apply({'params': params}, source, target_in)
  valid = target_in != PAD  # [B, T]
  return DecodeOutput(
      jnp.argmax(logits, -1).astype(jnp.int32),
      jnp.zeros(source.shape[:1]),
      Windows.zeros(source.shape[0]).add(diagnostics, valid),
  )


def make_decode_fn(
    model: seq2seq.Seq2Seq,
    decode_config,
    beam_size: Optional[int] = None,
    with_diagnostics: bool = False,
    alignments: bool = False,
    compiler_options=None,
):
  """Jitted fn(params, source) -> DecodeOutput for `beam_size` (1 = greedy).

  `model`: a seq2seq.Seq2Seq or a scorer (scorers.py). `compiler_options`:
  XLA's, for jax.jit (nmt_jax/config/compiler_options.py).
  """
  beam_size = decode_config.beam_size if beam_size is None else beam_size
  common = dict(
      ratio=decode_config.max_length_ratio,
      offset=decode_config.max_length_offset,
      with_diagnostics=with_diagnostics,
      alignments=alignments,
      gate_table=decode_config.gate_table,
      unroll=decode_config.unroll,
  )
  if beam_size == 1:
    fn = functools.partial(greedy_search, model, **common)
  else:
    fn = functools.partial(
        beam_search,
        model,
        beam_size=beam_size,
        alpha=decode_config.length_penalty,
        beta=decode_config.coverage_penalty,
        **common
    )
  return jax.jit(fn, compiler_options=compiler_options)
