"""Greedy search, beam search, sampling and teacher-forced decoding.

All four are pure functions of (params, source) compiled with jit; the
per-token loop is a `lax.while_loop`, never Python. The searches take a model
or a scorer (scorers.py: one model or an ensemble, whose params are then a
tuple of the members' parameters). Every row of a batch is decoded apart
(its own length limit, its own stopping test), so outputs do not depend on
the batch size or on source padding; sampling draws with keys made from
each sentence's own tokens (sampling.sample_keys), so its samples do not
either. `unroll` runs several steps per loop iteration (fewer iterations,
the same output).

Length limit: a hypothesis of a source with n tokens (EOS included) has at
most floor(ratio * n) + offset tokens, EOS included; at that last step only
EOS may be emitted.
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
from nmt_jax.decoding import sampling
from nmt_jax.decoding import scorers
from nmt_jax.model import seq2seq

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


def length_penalty(length, alpha):
  """GNMT (Wu et al. 2016): ((5 + length) / 6) ** alpha."""
  return ((5.0 + length) / 6.0) ** alpha


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


def _recorded(diagnostics, with_diagnostics: bool, alignments: bool, soft):
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


def _stepper(scorer, prepared, cache, with_diagnostics, alignments, soft):
  """fn(state, tokens) -> (state, log_probs, kept diagnostics, diagnostics).

  `prepared`: scorer.prepare's params, made once outside the loop.
  """
  with_weights = with_diagnostics or alignments or soft

  def step_fn(state, tokens):
    state, log_probs, diagnostics = scorer.step(
        prepared, state, cache, tokens, with_weights
    )
    kept = _recorded(diagnostics, with_diagnostics, alignments, soft)
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


def _decode_rows(
    model,
    params,
    source,
    pick,
    *,
    samples: int,
    ratio: float,
    offset: int,
    normalize: bool = False,
    with_diagnostics: bool = False,
    alignments: bool = False,
    attention_weights: bool = False,
    gate_table: str = 'auto',
    unroll: int = 1
) -> DecodeOutput:
  """The loop of greedy search and sampling: each row decoded on its own.

  source [B, S] is decoded as N = B * samples rows, rows b * samples ..
  b * samples + samples - 1 for sentence b (as beam search's hypotheses).
  At each step `pick(log_probs [N, V], step) -> [N]` chooses every row's
  token among those `restrict` allows; a row's score sums the log-probabilities
  of its tokens (with `normalize`, of the scorer's distribution renormalised:
  an ensemble's mean log-probabilities do not sum to 1). Returns the
  DecodeOutput of the N rows, windows summed per sentence [B].
  """
  batch = source.shape[0]
  rows = batch * samples
  steps = max_steps(source.shape[1], ratio, offset)
  limits = length_limits(source, ratio, offset)
  scorer = scorers.as_scorer(model)
  cache, state = scorer.encode(params, source)
  if samples > 1:
    limits = jnp.repeat(limits, samples)
    state = jax.tree_util.tree_map(lambda x: jnp.repeat(x, samples, 0), state)
    cache = scorer.beam_cache(cache, samples)
  prepared = scorer.prepare(params, rows * steps, gate_table)
  step_fn = _stepper(
      scorer, prepared, cache, with_diagnostics, alignments, attention_weights
  )
  kept = jax.eval_shape(step_fn, state, jnp.zeros((rows,), jnp.int32))[2]
  history = None if kept is None else _history(kept, steps)

  def cond(carry):
    i, done = carry[0], carry[3]
    return (i < steps) & ~jnp.all(done)

  def body(carry):
    i, state, tokens, done, out, score, windows, history = carry
    state, log_probs, kept, diagnostics = step_fn(state, tokens)
    if normalize:
      log_probs = jax.nn.log_softmax(log_probs)
    log_probs = restrict(log_probs, i, limits)
    picked = pick(log_probs, i)
    live = ~done
    picked_logp = jnp.take_along_axis(log_probs, picked[:, None], -1)[:, 0]
    score = score + jnp.where(live, picked_logp, 0.0)
    windows = windows.add(diagnostics, live.reshape(batch, samples))
    tokens = jnp.where(live, picked, PAD)
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
      jnp.full((rows,), BOS, jnp.int32),
      jnp.zeros((rows,), bool),
      jnp.full((rows, steps), PAD, jnp.int32),
      jnp.zeros((rows,), jnp.float32),
      Windows.zeros(batch),
      history,
  )
  _, _, _, _, out, score, windows, history = jax.lax.while_loop(
      cond, unrolled(cond, body, unroll), init
  )
  return DecodeOutput(out, score, windows, history)


def greedy_search(
    model: seq2seq.Seq2Seq,
    params,
    source,
    *,
    ratio: float,
    offset: int,
    with_diagnostics: bool = False,
    alignments: bool = False,
    attention_weights: bool = False,
    gate_table: str = 'auto',
    unroll: int = 1
) -> DecodeOutput:
  """Argmax decoding of source [B, S] -> DecodeOutput."""
  argmax = lambda log_probs, _: jnp.argmax(log_probs, -1).astype(jnp.int32)
  return _decode_rows(
      model,
      params,
      source,
      argmax,
      samples=1,
      ratio=ratio,
      offset=offset,
      with_diagnostics=with_diagnostics,
      alignments=alignments,
      attention_weights=attention_weights,
      gate_table=gate_table,
      unroll=unroll,
  )


def sample_search(
    model: seq2seq.Seq2Seq,
    params,
    source,
    *,
    num_samples: int,
    temperature: float,
    top_k: int,
    top_p: float,
    seed: int,
    ratio: float,
    offset: int,
    with_diagnostics: bool = False,
    alignments: bool = False,
    attention_weights: bool = False,
    gate_table: str = 'auto',
    unroll: int = 1
) -> DecodeOutput:
  """num_samples samples of each sentence of source [B, S] -> DecodeOutput.

  Each sample draws its words one by one (sampling.sample_tokens) under the
  length limits and word masks of the searches (`restrict`), with its key
  (sampling.sample_keys) and the step folded in. nbest_tokens [B, N, T] and
  nbest_scores [B, N] hold the samples in order (not ranked); a score is the
  sample's log-probability under the model, untempered and untruncated (the
  teacher-forced log-probability of its tokens). tokens / scores are sample
  0, which does not depend on num_samples.
  """
  keys = sampling.sample_keys(seed, source, num_samples)

  def draw(log_probs, step):
    step_keys = jax.vmap(jax.random.fold_in, (0, None))(keys, step)
    return sampling.sample_tokens(
        log_probs, step_keys, temperature, top_k, top_p
    )

  out = _decode_rows(
      model,
      params,
      source,
      draw,
      samples=num_samples,
      ratio=ratio,
      offset=offset,
      normalize=True,
      with_diagnostics=with_diagnostics,
      alignments=alignments,
      attention_weights=attention_weights,
      gate_table=gate_table,
      unroll=unroll,
  )
  group = lambda x: x.reshape((source.shape[0], num_samples) + x.shape[1:])
  nbest_tokens, nbest_scores = group(out.tokens), group(out.scores)
  nbest_history = jax.tree_util.tree_map(group, out.diagnostics)
  history = jax.tree_util.tree_map(lambda h: h[:, 0], nbest_history)
  return DecodeOutput(
      nbest_tokens[:, 0],
      nbest_scores[:, 0],
      out.windows,
      history,
      nbest_tokens,
      nbest_scores,
      nbest_history,
  )


class BeamState(NamedTuple):
  i: jax.Array  # scalar step
  tokens: jax.Array  # [B, K] last token of each live hypothesis
  live_seqs: jax.Array  # [B, K, T]
  live_logp: jax.Array  # [B, K] log-probability (-inf: no hypothesis)
  fin_seqs: jax.Array  # [B, K, T]
  fin_scores: jax.Array  # [B, K] length-normalised (-inf: empty slot)
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
    attention_weights: bool = False,
    gate_table: str = 'auto',
    unroll: int = 1
) -> DecodeOutput:
  """Batched beam search of source [B, S] -> DecodeOutput with the n-best lists.

  Each step extends the K live hypotheses of a sentence and keeps the best 2K
  candidates. As in fairseq, a candidate ending in EOS among the top K is
  finished (scored logp / length_penalty); the K best candidates not ending in
  EOS stay live. Finished hypotheses are merged into a top-K list and never
  dropped for a worse one. A sentence stops when its worst finished score
  beats the best score any live hypothesis could still reach:
  live_logp / length_penalty(limit) (log-probabilities only fall, the
  penalty only grows), so a length penalty never stops the search early.
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
      scorer, prepared, cache, with_diagnostics, alignments, attention_weights
  )

  live_history = fin_history = None
  _, _, shapes, _ = jax.eval_shape(
      step_fn, decoder, jnp.zeros((batch * k,), jnp.int32)
  )
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
    new_scores = jnp.where(
        is_eos & (jnp.arange(2 * k) < k),
        top_logp / length_penalty(s.i + 1, alpha),
        NEG_INF,
    )
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
    attention_weights: bool = False,
    method: Optional[str] = None,
):
  """Jitted fn(params, source) -> DecodeOutput.

  `method` (default decode.method): 'search', with `beam_size` (default
  decode.beam_size; 1 = greedy), or 'sample' (decode.num_samples samples of
  each sentence, decode.temperature, top_k, top_p, sample_seed).
  `model`: a seq2seq.Seq2Seq or a scorer (scorers.py). `compiler_options`:
  XLA's, for jax.jit (nmt_jax/config/compiler_options.py). `alignments` /
  `attention_weights`: the best hypothesis's argmax source positions /
  attention over the source at each step (DecodeOutput.diagnostics).
  """
  method = decode_config.method if method is None else method
  beam_size = decode_config.beam_size if beam_size is None else beam_size
  common = dict(
      ratio=decode_config.max_length_ratio,
      offset=decode_config.max_length_offset,
      with_diagnostics=with_diagnostics,
      alignments=alignments,
      attention_weights=attention_weights,
      gate_table=decode_config.gate_table,
      unroll=decode_config.unroll,
  )
  if method == 'sample':
    fn = functools.partial(
        sample_search,
        model,
        num_samples=decode_config.num_samples,
        temperature=decode_config.temperature,
        top_k=decode_config.top_k,
        top_p=decode_config.top_p,
        seed=decode_config.sample_seed,
        **common
    )
  elif beam_size == 1:
    fn = functools.partial(greedy_search, model, **common)
  else:
    fn = functools.partial(
        beam_search,
        model,
        beam_size=beam_size,
        alpha=decode_config.length_penalty,
        **common
    )
  return jax.jit(fn, compiler_options=compiler_options)
