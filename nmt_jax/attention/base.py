"""The interface every attention kind implements, and the registry of kinds.

A kind is a linen module with three methods, called by the decoder
(`seq2seq.Decoder`) and nothing else:

  prepare(memory [B, S, D], lengths [B]) -> cache
      Once per sentence, after encoding: precomputed keys, memory, masks.
      Beam search never reorders the cache. It repeats it K times (one row
      per hypothesis) unless the kind sets GROUPED_CACHE: the kind then gets
      the cache of B sentences with queries and states of B * G rows, the G
      hypotheses of sentence b in rows b * G .. b * G + G - 1 (`group`), and
      reads each sentence's keys once for its G queries.
  initial_state(cache) -> state
      Per-hypothesis recurrent state of the kind (e.g. the focus p_{t-1},
      the coverage C_t of content.py);
      a dict of [B, ...] arrays that beam search reorders with the beams.
  token_features(inputs [..., E]) -> [..., F] or None
      What a step needs of the fed-back word's embedding i_t alone, computed
      outside the decoder loop: over all target positions at once in
      training, and once per target word (a [V, F] table) in decoding. The
      step finds it in `step.token_features` (None: compute from
      `step.inputs`). Default: None (nothing).
  __call__(query [B, H], cache, state, step: StepInputs, with_weights, train)
      -> context [B, D], new state, diagnostics
      One decoder step. `diagnostics` always holds 'window' [B] (the number
      of source positions the step attends to) and should hold 'computed'
      [B] (the number of positions or slots it actually scored, padding of
      its static shapes included; `computed_positions` falls back to
      'window'), plus cheap kind-specific values; 'weights' only when
      `with_weights`: over source positions [B, S], or over memory slots
      [B, K] for `memory`, which then adds 'source_weights' [B, S]
      (`source_weights` reads either). `train` is True in training steps
      (flexible attention never truncates then).

and a class-level description that config validation, `bench` and run
inspection read from the registry, so that nothing outside the kind's module
names it:

  FIELDS          model.attention.<name>: (default, check) of the
                  fields it reads
  validate()      rules that hold when the kind is selected
  cost()          matmul FLOPs and positions scored, for `bench`
  source_attention(), PLOT, RANK   what run inspection shows of it

Positions are 0-based: s = 0 is the first source token, S_b - 1 its EOS.
Adding a kind is one module in this package that subclasses `Attention` and
decorates it with `@register('name')` (see docs/design.md).
"""

from typing import Any, Callable, ClassVar, Dict, NamedTuple, Tuple, Type

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
from ml_collections import config_dict

from nmt_jax.system import errors

Cache = Dict[str, jax.Array]
State = Dict[str, jax.Array]


class StepInputs(NamedTuple):
  """What a decoder step offers an attention kind besides the query."""

  prev_query: jax.Array  # [B, H] top decoder state h_{t-1}
  inputs: jax.Array  # [B, E] embedding of the fed-back word (i_t)
  t: jax.Array  # [B] int32 index of the target token being produced
  # [B, F] the kind's token_features(inputs), computed before the loop; None
  # when the caller did not (the step then computes it from `inputs`).
  token_features: Any = None


class Cost(NamedTuple):
  """Forward matmul FLOPs of one sentence (elementwise work not counted)."""

  sentence_flops: float  # once per sentence, after encoding (prepare)
  step_flops: float  # per decoder step
  positions: float  # source positions (or memory slots) scored per step


def computed_positions(diagnostics) -> jax.Array:
  """[B] positions a step scored: 'computed', else its 'window'."""
  return diagnostics.get('computed', diagnostics['window'])


def source_weights(diagnostics) -> jax.Array:
  """[B, S] attention over source positions of a step run with_weights.

  'source_weights' where a kind attends to something else (memory: its slots,
  beta alpha^T), else 'weights'.
  """
  return diagnostics.get('source_weights', diagnostics.get('weights'))


def float32_or_wider(dtype):
  """float32 for a narrower float dtype (bfloat16); float64 stays."""
  return jnp.promote_types(dtype, jnp.float32)


def at_least_float32(x):
  """x in float32 if it is in a narrower float (bfloat16); float64 stays."""
  return x.astype(float32_or_wider(x.dtype))


def masked_softmax(scores, mask, axis=-1, dtype=None):
  """Softmax over `mask`ed entries; masked entries and all-masked rows get 0.

  Computed in at least float32 whatever the scores' dtype (bfloat16 rounds
  the exponentials' sum), returned as `dtype` (default: the scores' dtype).
  """
  weights = jax.nn.softmax(at_least_float32(scores), axis=axis, where=mask)
  return weights.astype(dtype or scores.dtype)


def softmax(scores, axis=-1):
  """Softmax computed in at least float32, returned in the scores' dtype."""
  return masked_softmax(scores, None, axis)


def group(x, rows: int):
  """x [rows * G, ...] -> [rows, G, ...]: each cache row's queries."""
  return x.reshape((rows, -1) + x.shape[1:])


def row_lengths(cache, rows: int):
  """The source length of each of `rows` query rows (G per cache row) [rows]."""
  lengths = cache['lengths']
  return jnp.repeat(lengths, rows // lengths.shape[0])


def grouped_matmul(weights, values):
  """sum_k weights[n, k] values[b, k, :] for the G rows n of each cache row b.

  weights [B * G, K], values [B, K, D] -> [B * G, D].
  """
  grouped = group(weights, values.shape[0])  # [B, G, K]
  out = jnp.einsum('bgk,bkd->bgd', grouped, values)
  return out.reshape(weights.shape[0], -1)


def length_mask(lengths, length: int):
  """lengths [B] -> [B, length] bool, True at a sentence's positions."""
  return jnp.arange(length)[None, :] < lengths[:, None]


def source_cache(memory, lengths) -> Cache:
  """The part of every cache describing the source: memory, mask, lengths."""
  mask = length_mask(lengths, memory.shape[1])  # [B, S]
  return {'memory': memory, 'mask': mask, 'lengths': lengths}


class Attention(nn.Module):
  """Base class of the attention kinds (see the module docstring)."""

  config: Any  # model.attention
  hidden_size: int
  # model.project_query: content kinds with the general score score one
  # query per sentence from the query side (content.py). A speed switch.
  project_query: bool = True

  # model.attention.<name>: (default, check(field, value)) of every field the
  # kind reads. Kinds sharing a field declare the same default and check.
  FIELDS: ClassVar[Dict[str, Tuple[Any, Callable]]] = {}
  # Whether the kind produces a context vector: the decoder then forms the
  # attentional state htilde_t = tanh(W_c [c_t; h_t]) and feeds it back
  # (input feeding). `none` has no context: htilde_t = h_t.
  HAS_CONTEXT = True
  # Whether diagnostics hold 'strength' [B], g(t) of flexible attention, which
  # the fine-tuning objective (train.beta) rewards.
  HAS_STRENGTH = False
  # Whether __call__ takes a cache of fewer rows than the query (see
  # `prepare` above); beam search then does not repeat the cache.
  GROUPED_CACHE = False
  # FIELDS that only steer decoding (e.g. flexible attention's tau): they may
  # differ between the training run and an evaluation of its workdir.
  DECODING_FIELDS: ClassVar[Tuple[str, ...]] = ()
  # Row order in results tables, as in Britz et al.'s Table 1: none first,
  # global last.
  RANK = 100
  # The plot run inspection draws of a translation, or None: 'heatmap'
  # (weights over the source), 'vision_span' or 'memory_maps'
  # (nmt_jax/analysis/plots.py).
  PLOT = 'heatmap'

  def prepare(self, memory, lengths) -> Cache:
    return source_cache(memory, lengths)

  def initial_state(self, cache) -> State:
    del cache
    return {}

  def token_features(self, inputs):
    del inputs
    return None

  def __call__(
      self, query, cache, state, step, with_weights=False, train=False
  ):
    raise NotImplementedError

  @classmethod
  def validate(cls, config):
    """Raises ConfigError for a rule of the whole config this kind needs."""
    del config

  @classmethod
  def identity(cls, attention_config) -> set:
    """The model.attention fields that say what trained parameters mean.

    A workdir is evaluated or resumed only with the same values.
    """
    del attention_config
    return {f for f in cls.FIELDS if f not in cls.DECODING_FIELDS}

  @classmethod
  def cost(cls, model_config, source_length: int) -> Cost:
    """FLOPs and positions of a training step on a source of `source_length`."""
    raise NotImplementedError

  @classmethod
  def source_attention(cls, weights, cache, row: int, length: int):
    """One sentence's per-step weights [T, W] -> ([T, length], extras).

    The [T, length] weights are over its source. `cache` is the (NumPy) cache
    of the whole batch, `row` the sentence's row.
    """
    del cache, row
    return weights[:, :length], {}


def refuse_coverage(config, why: str):
  """A one-line ConfigError if model.attention.coverage is on for a kind
  that cannot keep it (`why`: what the kind attends to instead)."""
  attention = config.model.attention
  if attention.get('coverage'):
    raise errors.config_error(
        'model.attention.coverage',
        attention.coverage,
        'sums the attention each source position has received (Tu et al.'
        f' 2016), but kind {attention.kind!r} {why}',
        'set it to False, or use a kind that scores source positions',
    )


# ----------------------------------------------------------------- registry

_KINDS: Dict[str, Type[Attention]] = {}


def register(name: str):
  """Class decorator: makes `name` a value of model.attention.kind."""

  def add(cls):
    if name in _KINDS and _KINDS[name] is not cls:
      raise ValueError(f'attention kind {name!r} is registered twice')
    _KINDS[name] = cls
    return cls

  return add


def names() -> Tuple[str, ...]:
  """The registered kinds, in table order."""
  return tuple(sorted(_KINDS, key=lambda name: (_KINDS[name].RANK, name)))


def get(kind: str) -> Type[Attention]:
  """A registered kind's class; a one-line ConfigError for any other name."""
  if kind not in _KINDS:
    raise errors.config_error(
        'model.attention.kind',
        kind,
        'is not one of the known values',
        f'use one of {", ".join(names())}',
    )
  return _KINDS[kind]


def make(
    attention_config, hidden_size: int, project_query: bool = True
) -> Attention:
  """The module of `attention_config.kind`."""
  return get(attention_config.kind)(
      attention_config, hidden_size, project_query
  )


def fields() -> Dict[str, Tuple[Any, Callable]]:
  """The union of every kind's FIELDS (a field shared by kinds appears once)."""
  merged = {}
  for name in names():
    for field, spec in _KINDS[name].FIELDS.items():
      if field in merged and merged[field] != spec:
        raise ValueError(
            f'attention kinds disagree on model.attention.{field}: '
            f'{merged[field]} vs {spec} ({name})'
        )
      merged[field] = spec
  return merged


def default_config() -> ml_collections.ConfigDict:
  """model.attention: the kind, the source length bound, every kind's fields."""
  config = ml_collections.ConfigDict()
  # The attention kind: one of names() ('none', 'memory', 'local_m', ...).
  config.kind = 'global'
  # Longest source (incl. EOS) for 'location' scores and position encodings.
  # None: set from the data (data.max_length + 1) when the config is resolved.
  config.max_source_length = config_dict.placeholder(int)
  for field, (default, _) in fields().items():
    config[field] = default
  return config


def validate(config):
  """Every kind's field values, then the selected kind's own rules."""
  attention = config.model.attention
  kind = get(attention.kind)
  for field, (_, check) in fields().items():
    check(f'model.attention.{field}', attention[field])
  kind.validate(config)
