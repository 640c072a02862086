"""Greedy search, sampling, teacher-forced decoding, and the jitted decoders.

Each is a pure function of (params, source) compiled with jit; the per-token
loop is a `lax.while_loop`, never Python. The searches take a model or a
scorer (scorers.py: one model or an ensemble, whose params are then a tuple
of the members' parameters). Every row of a batch is decoded apart (its own
length limit, its own stopping test; loop.py), so outputs do not depend on
the batch size or on source padding; sampling draws with keys made from
each sentence's own tokens (sampling.sample_keys), so its samples do not
either. `unroll` runs several steps per loop iteration (fewer iterations,
the same output). Beam search is beam.py; `make_decode_fn` picks one.
"""

import functools
from typing import Optional

import jax
import jax.numpy as jnp

from nmt_jax.data.vocab import BOS
from nmt_jax.data.vocab import EOS
from nmt_jax.data.vocab import PAD
from nmt_jax.decoding import beam
from nmt_jax.decoding import loop
from nmt_jax.decoding import sampling
from nmt_jax.decoding import scorers
from nmt_jax.model import seq2seq


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
) -> loop.DecodeOutput:
  """The loop of greedy search and sampling: each row decoded on its own.

  source [B, S] is decoded as N = B * samples rows, rows b * samples ..
  b * samples + samples - 1 for sentence b (as beam search's hypotheses).
  At each step `pick(log_probs [N, V], step) -> [N]` chooses every row's
  token among those `restrict` allows; a row's score sums the log-probabilities
  of its tokens (with `normalize`, of the scorer's distribution renormalised:
  an ensemble's mean log-probabilities do not sum to 1). Returns the
  loop.DecodeOutput of the N rows, windows summed per sentence [B].
  """
  batch = source.shape[0]
  rows = batch * samples
  steps = loop.max_steps(source.shape[1], ratio, offset)
  limits = loop.length_limits(source, ratio, offset)
  scorer = scorers.as_scorer(model)
  cache, state = scorer.encode(params, source)
  if samples > 1:
    limits = jnp.repeat(limits, samples)
    state = jax.tree_util.tree_map(lambda x: jnp.repeat(x, samples, 0), state)
    cache = scorer.beam_cache(cache, samples)
  prepared = scorer.prepare(params, rows * steps, gate_table)
  step_fn = loop.step_function(
      scorer, prepared, cache, with_diagnostics, alignments, attention_weights
  )
  kept = jax.eval_shape(step_fn, state, jnp.zeros((rows,), jnp.int32))[2]
  history = None if kept is None else loop.history_buffers(kept, steps)

  def cond(carry):
    i, done = carry[0], carry[3]
    return (i < steps) & ~jnp.all(done)

  def body(carry):
    i, state, tokens, done, out, score, windows, history = carry
    state, log_probs, kept, diagnostics = step_fn(state, tokens)
    if normalize:
      log_probs = jax.nn.log_softmax(log_probs)
    log_probs = loop.restrict(log_probs, i, limits)
    picked = pick(log_probs, i)
    live = ~done
    picked_logp = jnp.take_along_axis(log_probs, picked[:, None], -1)[:, 0]
    score = score + jnp.where(live, picked_logp, 0.0)
    windows = windows.add(diagnostics, live.reshape(batch, samples))
    tokens = jnp.where(live, picked, PAD)
    out = out.at[:, i].set(tokens)
    if history is not None:
      # Zeros after a row's EOS, as in beam search.
      put = lambda h, d: h.at[:, i].set(jnp.where(loop.row_mask(live, d), d, 0))
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
      loop.Windows.zeros(batch),
      history,
  )
  _, _, _, _, out, score, windows, history = jax.lax.while_loop(
      cond, loop.unrolled(cond, body, unroll), init
  )
  return loop.DecodeOutput(out, score, windows, history)


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
) -> loop.DecodeOutput:
  """Argmax decoding of source [B, S] -> loop.DecodeOutput."""
  argmax = lambda log_probs, _: loop.argmax(log_probs)
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
) -> loop.DecodeOutput:
  """num_samples samples of each sentence of source [B, S] -> loop.DecodeOutput.

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
  return loop.DecodeOutput(
      nbest_tokens[:, 0],
      nbest_scores[:, 0],
      out.windows,
      history,
      nbest_tokens,
      nbest_scores,
      nbest_history,
  )


def forced_decode(
    model: seq2seq.Seq2Seq, params, source, target_in
) -> loop.DecodeOutput:
  """Teacher-forced decoding (Shu & Nakayama 5.5): all kinds run the same steps.

  source [B, S], target_in [B, T] -> argmax tokens and window statistics.
  """
  logits, diagnostics = model.apply({'params': params}, source, target_in)
  valid = target_in != PAD  # [B, T]
  return loop.DecodeOutput(
      jnp.argmax(logits, -1).astype(jnp.int32),
      jnp.zeros(source.shape[:1]),
      loop.Windows.zeros(source.shape[0]).add(diagnostics, valid),
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
  """Jitted fn(params, source) -> loop.DecodeOutput.

  `method` (default decode.method): 'search', with `beam_size` (default
  decode.beam_size; 1 = greedy), or 'sample' (decode.num_samples samples of
  each sentence, decode.temperature, top_k, top_p, sample_seed).
  `model`: a seq2seq.Seq2Seq or a scorer (scorers.py). `compiler_options`:
  XLA's, for jax.jit (nmt_jax/config/compiler_options.py). `alignments` /
  `attention_weights`: the best hypothesis's argmax source positions /
  attention over the source at each step (loop.DecodeOutput.diagnostics).
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
        beam.beam_search,
        model,
        beam_size=beam_size,
        alpha=decode_config.length_penalty,
        beta=decode_config.coverage_penalty,
        **common
    )
  return jax.jit(fn, compiler_options=compiler_options)
