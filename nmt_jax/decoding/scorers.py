"""What decoding and scoring see of a model: one model, or an ensemble.

A scorer turns parameters and token ids into target log-probabilities:

  encode(params, source [B, S]) -> (cache, decoder state)
  beam_cache(cache, k) -> the cache for B * k hypotheses (rows b * k ..)
  prepare(params, lookups, gate_table) -> what `step` takes as params
  step(prepared, state, cache, tokens [N], with_weights)
      -> (state, log_probs [N, V], diagnostics)
  log_probs(params, source [B, S], target_in [B, T]) -> [B, T, V]

`prepare` runs once per decoding call, outside its loop: with `gate_table`
'on' (or 'auto' when the vocabulary has fewer words than the loop will look
up, `lookups` = rows x steps) it computes the decoder's token table
(`seq2seq.Decoder.token_table`: the embedding-to-gates projection [V, 4H] of
every target word, and what the attention kind or the readout computes from
the fed-back word alone), so each step gathers rows instead of running GEMMs.

`Single` wraps one seq2seq.Seq2Seq (params: its parameter tree). `Ensemble`
wraps several, possibly of different attention kinds (params: a tuple of their
trees); at each step it averages the members' log-probabilities (the geometric
mean of their distributions, as OpenNMT-py and Marian; `average='probs'`
averages the probabilities, as fairseq). Both are plain Python objects closed
over by jit: the members' steps compile into one loop.
"""

import math
from typing import Sequence

import jax
import jax.numpy as jnp

from nmt_jax import attention
from nmt_jax.data.vocab import PAD
from nmt_jax.model import lstm
from nmt_jax.model import precision
from nmt_jax.model import seq2seq

AVERAGES = ('log_probs', 'probs')


class Single:
  """One model."""

  def __init__(self, model: seq2seq.Seq2Seq):
    self.model = model
    self.members = (model,)

  def encode(self, params, source):
    return self.model.apply(
        {'params': params}, source, method=seq2seq.Seq2Seq.encode
    )

  def beam_cache(self, cache, k: int):
    """The cache repeated k times per sentence, unless the kind reads it
    grouped (attention.base: GROUPED_CACHE): then as it is."""
    if attention.get(self.model.config.attention.kind).GROUPED_CACHE:
      return cache
    return jax.tree_util.tree_map(lambda x: jnp.repeat(x, k, axis=0), cache)

  def prepare(self, params, lookups: int, gate_table: str = 'auto'):
    """(params in the compute dtype, token table {name: [V, ...]} or None)."""
    params = precision.compute_params(self.model.config, params)
    vocab = self.model.target_vocab_size
    if lstm.table_pays(gate_table, vocab, lookups):
      table = self.model.apply(
          {'params': params}, method=seq2seq.Seq2Seq.token_table
      )
      return params, table
    return params, None

  def step(self, prepared, state, cache, tokens, with_weights=False):
    params, table = prepared
    state, logits, diagnostics = self.model.apply(
        {'params': params},
        state,
        cache,
        tokens,
        with_weights,
        table,
        method=seq2seq.Seq2Seq.decode_step,
    )
    return state, jax.nn.log_softmax(logits), diagnostics

  def log_probs(self, params, source, target_in):
    logits, _ = self.model.apply({'params': params}, source, target_in)
    return jax.nn.log_softmax(logits)


class Ensemble:
  """Several models decoding together; params is a tuple of their trees.

  Diagnostics: 'window' and 'computed' are summed over the members (the
  positions the ensemble attends to and scores); the others, the attention
  weights included, are those of the first member with attention.
  """

  def __init__(self, members: Sequence[seq2seq.Seq2Seq], average='log_probs'):
    if average not in AVERAGES:
      raise ValueError(f'average must be one of {AVERAGES}, not {average!r}')
    self.members = tuple(members)
    self.singles = tuple(Single(m) for m in self.members)
    self.average = average
    kinds = [attention.get(m.config.attention.kind) for m in self.members]
    self.lead = next((i for i, k in enumerate(kinds) if k.HAS_CONTEXT), 0)

  def _combine(self, log_probs):
    stacked = jnp.stack(log_probs)
    if self.average == 'probs':
      return jax.nn.logsumexp(stacked, axis=0) - math.log(len(log_probs))
    return jnp.mean(stacked, axis=0)

  def encode(self, params, source):
    encoded = [s.encode(p, source) for s, p in zip(self.singles, params)]
    return tuple(c for c, _ in encoded), tuple(s for _, s in encoded)

  def beam_cache(self, cache, k: int):
    return tuple(s.beam_cache(c, k) for s, c in zip(self.singles, cache))

  def prepare(self, params, lookups: int, gate_table: str = 'auto'):
    return tuple(
        s.prepare(p, lookups, gate_table) for s, p in zip(self.singles, params)
    )

  def step(self, prepared, state, cache, tokens, with_weights=False):
    outs = [
        single.step(p, st, c, tokens, with_weights)
        for single, p, st, c in zip(self.singles, prepared, state, cache)
    ]
    diagnostics = dict(outs[self.lead][2])
    diagnostics['window'] = sum(d['window'] for _, _, d in outs)
    diagnostics['computed'] = sum(
        attention.computed_positions(d) for _, _, d in outs
    )
    return (
        tuple(s for s, _, _ in outs),
        self._combine([lp for _, lp, _ in outs]),
        diagnostics,
    )

  def log_probs(self, params, source, target_in):
    """The combined distribution, normalised: scores and losses read it.

    (The mean of log-probabilities sums to less than 1 over the vocabulary;
    a search's argmax and ranking do not need the normalisation, `step`
    leaves it out, as OpenNMT-py and Marian.)
    """
    combined = self._combine([
        s.log_probs(p, source, target_in) for s, p in zip(self.singles, params)
    ])
    return jax.nn.log_softmax(combined, axis=-1)


def as_scorer(model):
  """A scorer from a scorer or a seq2seq.Seq2Seq."""
  return Single(model) if isinstance(model, seq2seq.Seq2Seq) else model


def target_log_probs(scorer, params, source, target_in, target_out):
  """Teacher-forced log p(target_out[b, t]) [B, T]; 0 at PAD targets."""
  log_probs = as_scorer(scorer).log_probs(params, source, target_in)
  picked = jnp.take_along_axis(log_probs, target_out[..., None], -1)[..., 0]
  return jnp.where(target_out != PAD, picked, 0.0)
