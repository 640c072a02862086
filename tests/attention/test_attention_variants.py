"""local-m/p, flexible and memory attention against NumPy transcriptions of their papers."""

import functools
import itertools
import math

import jax
import jax.numpy as jnp
from jax.test_util import check_grads
import numpy as np
import pytest

from nmt_jax import attention
from nmt_jax.attention import content
from nmt_jax.attention import flexible
from nmt_jax.attention import memory as memory_kind
from nmt_jax.config import defaults
from nmt_jax.config import validation
from nmt_jax.data.vocab import PAD
from nmt_jax.decoding import beam
from nmt_jax.decoding import loop
from nmt_jax.decoding import search
from nmt_jax.model import seq2seq
from nmt_jax.system import errors
from tests import helpers

B, S, D = 4, 9, 6
LENGTHS = np.array([9, 5, 1, 7])


def _np_softmax(scores, mask, axis=-1):
  scores = np.where(mask, scores, -np.inf)
  top = np.max(np.where(mask, scores, -1e30), axis=axis, keepdims=True)
  e = np.where(mask, np.exp(scores - top), 0.0)
  total = e.sum(axis, keepdims=True)
  return np.where(total > 0, e / np.where(total > 0, total, 1), 0.0)


def _general_scores(p, memory, query):
  return np.einsum(
      'bsd,dh,bh->bs',
      memory,
      np.asarray(p['scorer']['key_proj']['kernel']),
      query,
  )


def _inputs(seed=0):
  rng = np.random.default_rng(seed)
  memory = rng.normal(size=(B, S, D)).astype(np.float32)
  query = rng.normal(size=(B, D)).astype(np.float32)
  prev = rng.normal(size=(B, D)).astype(np.float32)
  inputs = rng.normal(size=(B, 5)).astype(np.float32)
  t = np.array([0, 3, 2, 8], np.int32)
  return memory, query, prev, inputs, t


def _run_module(
    kind, seed=0, state=None, train=False, lengths=LENGTHS, **attention_config
):
  config = defaults.get_config('tiny').model.attention
  config.kind, config.score = kind, 'general'
  for key, value in attention_config.items():
    config[key] = value
  config.max_source_length = S + 2
  module = attention.make(config, D)
  memory, query, prev, inputs, t = _inputs(seed)
  step = attention.StepInputs(
      prev_query=jnp.asarray(prev), inputs=jnp.asarray(inputs), t=jnp.asarray(t)
  )

  def run(mdl, memory, lengths, query):
    cache = mdl.prepare(memory, lengths)
    st = mdl.initial_state(cache) if state is None else state
    return mdl(query, cache, st, step, with_weights=True, train=train)

  init = jax.jit(functools.partial(module.init, method=run))
  params = init(jax.random.key(seed), memory, lengths, query)
  # sharper than init
  params = jax.tree_util.tree_map(lambda x: x * 1.5, params)
  out = jax.jit(functools.partial(module.apply, method=run))(
      params, memory, lengths, query
  )
  return out, params.get('params', {}), (memory, query, prev, inputs, t), module


# ----------------------------------------------------------------- local attention


@pytest.mark.parametrize(
    'kind,half',
    [('local_m', 0), ('local_m', 2), ('local_p', 1), ('local_p', 3)],
)
def test_local_attention_matches_numpy(kind, half):
  (context, _, diagnostics), p, (memory, query, _, _, t), _ = _run_module(
      kind, window=half
  )
  positions = np.arange(S)
  last = LENGTHS - 1
  if kind == 'local_m':
    centre = np.minimum(t, last).astype(np.float64)
  else:  # p_t = (S_b - 1) sigmoid(v_p^T tanh(W_p h_t))
    hidden = np.tanh(query @ np.asarray(p['position_hidden']['kernel']))
    centre = last / (
        1 + np.exp(-(hidden @ np.asarray(p['position_out']['kernel']))[:, 0])
    )
  in_window = np.abs(positions[None] - np.floor(centre)[:, None]) <= half
  # truncated, not shifted
  valid = in_window & (positions[None] < LENGTHS[:, None])
  weights = _np_softmax(_general_scores(p, memory, query), valid)
  if kind == 'local_p':
    weights = weights * np.exp(
        -((positions[None] - centre[:, None]) ** 2) / (2 * (half / 2) ** 2)
    )
  np.testing.assert_allclose(
      diagnostics['weights'], weights, rtol=1e-5, atol=1e-6
  )
  np.testing.assert_allclose(
      context, np.einsum('bs,bsd->bd', weights, memory), rtol=1e-5, atol=1e-5
  )
  np.testing.assert_array_equal(diagnostics['window'], valid.sum(1))
  np.testing.assert_allclose(diagnostics['center'], centre, rtol=1e-5)


# ----------------------------------------------------------------- flexible attention


def _np_flexible(p, memory, query, prev, inputs, previous_centre, sigma, tau):
  hidden = np.tanh(
      np.concatenate([prev, inputs], -1)
      @ np.asarray(p['strength_hidden']['kernel'])
  )
  logit = hidden @ np.asarray(p['strength_out']['kernel']) + np.asarray(
      p['strength_out']['bias']
  )
  g = 1 / (1 + np.exp(-logit[:, 0]))
  positions = np.arange(S)[None].astype(np.float64)
  penalty = (
      g[:, None] * (positions - previous_centre[:, None]) ** 2 / (2 * sigma**2)
  )
  valid = positions < LENGTHS[:, None]
  kept = valid & (penalty < tau)
  for b in range(B):  # nothing kept: the position nearest p_{t-1}
    if not kept[b].any():
      kept[b, int(np.clip(np.round(previous_centre[b]), 0, LENGTHS[b] - 1))] = (
          True
      )
  weights = _np_softmax(_general_scores(p, memory, query) - penalty, kept)
  return weights, g, kept


@pytest.mark.parametrize('tau', [math.inf, 5.0])
def test_flexible_token_features_given_equal_the_step_computing_them(tau):
  # The decoder computes W_g^i i_t before its loop (a table in decoding).
  _, params, (memory, query, prev, inputs, t), module = _run_module(
      'flexible', tau=tau
  )
  variables = {'params': params}
  token = module.apply(variables, jnp.asarray(inputs), method='token_features')
  w_g = np.asarray(params['strength_hidden']['kernel'])  # [D + E, D]
  np.testing.assert_allclose(token, inputs @ w_g[D:], rtol=1e-5, atol=1e-6)

  def run(mdl, token_features):
    step = attention.StepInputs(
        jnp.asarray(prev), jnp.asarray(inputs), jnp.asarray(t), token_features
    )
    cache = mdl.prepare(memory, LENGTHS)
    return mdl(query, cache, mdl.initial_state(cache), step, True)

  given = module.apply(variables, token, method=run)
  computed = module.apply(variables, None, method=run)
  for a, b in zip(
      jax.tree_util.tree_leaves(given), jax.tree_util.tree_leaves(computed)
  ):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize('tau', [math.inf, 1e12, 5.0, 1.0, 0.3, 0.01])
def test_flexible_windowed_equals_masked_numpy(tau):
  previous = jnp.array([0.0, 3.4, 0.0, 6.9])
  (context, state, diagnostics), p, (memory, query, prev, inputs, _), _ = (
      _run_module('flexible', state={'center': previous}, tau=tau, sigma=1.5)
  )
  weights, g, kept = _np_flexible(
      p, memory, query, prev, inputs, np.asarray(previous), 1.5, tau
  )
  np.testing.assert_allclose(diagnostics['strength'], g, rtol=1e-5)
  np.testing.assert_allclose(
      diagnostics['weights'], weights, rtol=1e-4, atol=1e-6
  )
  np.testing.assert_allclose(
      context, np.einsum('bs,bsd->bd', weights, memory), rtol=1e-4, atol=1e-5
  )
  np.testing.assert_allclose(
      state['center'], (weights * np.arange(S)).sum(1), rtol=1e-4, atol=1e-5
  )
  np.testing.assert_array_equal(diagnostics['window'], kept.sum(1))
  computed = np.asarray(diagnostics['computed'])
  if math.isinf(tau):
    assert np.all(computed == S)
  else:  # the smallest bucket holding the widest kept interval of the batch
    buckets = content.window_buckets(S)
    assert computed[0] == min(w for w in buckets if w >= kept.sum(1).max())


def test_flexible_kept_interval_is_the_closed_form():
  rng = np.random.default_rng(0)
  config = defaults.get_config().model.attention
  config.max_source_length = 64
  module = flexible.FlexibleAttention(config, 4)
  kept_interval = jax.jit(module.kept_interval, static_argnums=3)
  for _ in range(100):
    g = jnp.asarray(rng.uniform(0.01, 1.0, 8), jnp.float32)
    previous = jnp.asarray(rng.uniform(-3, 60, 8), jnp.float32)
    lengths = jnp.asarray(rng.integers(1, 64, 8), jnp.int32)
    tau = float(rng.choice([0.05, 0.3, 1.2, 5.0, 50.0]))
    first, last = kept_interval(g, previous, lengths, tau)
    positions = np.arange(64)
    for b in range(8):
      penalty = (
          float(g[b]) * (positions - float(previous[b])) ** 2 / (2 * 1.5**2)
      )
      kept = positions[(penalty < tau) & (positions < int(lengths[b]))]
      if len(kept):
        assert (int(first[b]), int(last[b])) == (kept[0], kept[-1])
      else:
        nearest = int(
            np.clip(np.round(float(previous[b])), 0, int(lengths[b]) - 1)
        )
        assert int(first[b]) == int(last[b]) == nearest
  # tau = 0 keeps only the nearest position, also where g underflowed to 0.
  first, last = kept_interval(
      jnp.array([0.0, 0.5]), jnp.array([3.4, 3.6]), jnp.array([9, 9]), 0.0
  )
  np.testing.assert_array_equal(first, [3, 4])
  np.testing.assert_array_equal(last, [3, 4])


@pytest.mark.parametrize('tau', [0.3, 5.0])
def test_flexible_keeps_nothing_of_an_empty_source(tau):
  """A batch's padding row (no source): a zero context, as in every kind
  (its window was position -1, read as position 0)."""
  lengths = np.array([9, 0, 5, 1])
  (context, _, diagnostics), *_ = _run_module(
      'flexible', tau=tau, lengths=lengths
  )
  assert float(diagnostics['window'][1]) == 0
  assert not np.any(np.asarray(diagnostics['weights'][1]))
  assert not np.any(np.asarray(context[1]))
  assert np.all(np.asarray(diagnostics['window'])[[0, 2, 3]] >= 1)


def test_flexible_training_ignores_tau():
  (ctx_inf, _, _), _, _, _ = _run_module('flexible', train=True, tau=math.inf)
  (ctx_cut, _, diag), _, _, _ = _run_module('flexible', train=True, tau=0.3)
  np.testing.assert_array_equal(ctx_inf, ctx_cut)
  np.testing.assert_array_equal(diag['window'], LENGTHS)


def _flexible_model(tau, params=None):
  config = helpers.tiny_config('flexible', 'concat', query='previous')
  config.model.attention.tau = tau
  model = helpers.make_model(config)
  if params is None:
    params = jax.tree_util.tree_map(
        lambda x: 2.0 * x, helpers.init_params(model, seed=2)
    )
  return model, params


def _logits(model, params, source, target_in):
  return model.apply({'params': params}, source, target_in)[0]


def test_tau_inf_equals_untruncated_model_and_large_tau_matches_it():
  source, target_in, _ = helpers.random_batch(np.random.default_rng(0), 4, 7, 6)
  outputs = {}
  params = None  # tau changes no parameter: the same for both
  for tau in (math.inf, 1e30):
    model, params = _flexible_model(tau, params)
    outputs[tau] = jax.jit(functools.partial(_logits, model))(
        params, source, target_in
    )
    greedy = jax.jit(
        functools.partial(search.greedy_search, model, ratio=1.5, offset=2)
    )
    outputs[(tau, 'greedy')] = greedy(params, source).tokens
  # tau = inf takes the untruncated path; a finite tau keeping everything takes the
  # windowed path with the full bucket and must agree with it.
  np.testing.assert_allclose(outputs[1e30], outputs[math.inf], atol=1e-5)
  np.testing.assert_array_equal(
      outputs[(1e30, 'greedy')], outputs[(math.inf, 'greedy')]
  )


# ----------------------------------------------------------------- memory attention


def _np_position_encoding(lengths, k_slots, max_length, mode):
  k = np.arange(1, k_slots + 1) / k_slots
  s = np.arange(1, S + 1) / max_length
  table = np.broadcast_to(
      (1 - k)[None] * (1 - s)[:, None] + k[None] * s[:, None], (B, S, k_slots)
  ).copy()
  if mode == 'unnormalized':
    return table
  table[np.arange(S)[None, :] >= lengths[:, None]] = 0
  table = table / table.sum(1, keepdims=True)
  return table * lengths[:, None, None] if mode == 'renorm_mean1' else table


@pytest.mark.parametrize(
    'encoder_scoring,decoder_scoring,pe',
    [
        (e, d, pe)
        for e, d in itertools.product(
            memory_kind.ENCODER_SCORINGS, memory_kind.DECODER_SCORINGS
        )
        for pe in ('none', 'renorm')
    ]
    + [
        ('softmax_time', 'softmax', 'renorm_mean1'),
        ('softmax_slots', 'softmax', 'unnormalized'),
    ],
)
def test_memory_attention_matches_numpy(encoder_scoring, decoder_scoring, pe):
  k_slots = 3
  (context, _, diagnostics), p, (memory, query, _, _, _), module = _run_module(
      'memory',
      num_memory=k_slots,
      encoder_scoring=encoder_scoring,
      decoder_scoring=decoder_scoring,
      position_encoding=pe,
  )
  logits = memory @ np.asarray(p['encoder_scores']['kernel'])  # [B, S, K]
  if pe != 'none':
    logits = logits * _np_position_encoding(LENGTHS, k_slots, S + 2, pe)
  valid = (np.arange(S)[None, :] < LENGTHS[:, None])[..., None]
  if encoder_scoring == 'softmax_slots':
    alpha = np.where(
        valid, _np_softmax(logits, np.ones_like(logits, bool), -1), 0
    )
    np.testing.assert_allclose(alpha.sum(-1), valid[..., 0], rtol=1e-5)
  elif encoder_scoring == 'softmax_time':
    alpha = _np_softmax(logits, np.broadcast_to(valid, logits.shape), axis=1)
    np.testing.assert_allclose(alpha.sum(1), 1.0, rtol=1e-5)
  else:
    alpha = np.where(valid, 1 / (1 + np.exp(-logits)), 0)
  slots = np.einsum('bsk,bsd->bkd', alpha, memory)
  beta_logits = query @ np.asarray(p['decoder_scores']['kernel'])
  beta = (
      _np_softmax(beta_logits, np.ones_like(beta_logits, bool))
      if decoder_scoring == 'softmax'
      else 1 / (1 + np.exp(-beta_logits))
  )
  np.testing.assert_allclose(diagnostics['weights'], beta, rtol=1e-5)
  np.testing.assert_allclose(
      context, np.einsum('bk,bkd->bd', beta, slots), rtol=1e-4, atol=1e-5
  )
  np.testing.assert_array_equal(diagnostics['window'], k_slots)


@pytest.mark.parametrize('encoder_scoring', memory_kind.ENCODER_SCORINGS)
def test_memory_padding_never_enters_the_slots(encoder_scoring):
  config = defaults.get_config().model.attention
  config.kind, config.num_memory, config.encoder_scoring = (
      'memory',
      4,
      encoder_scoring,
  )
  config.position_encoding = 'renorm'
  config.max_source_length = 20
  module = memory_kind.MemoryAttention(config, D)
  memory, _, _, _, _ = _inputs()
  params = module.init(
      jax.random.key(0),
      memory,
      LENGTHS,
      method=memory_kind.MemoryAttention.prepare,
  )
  slots = module.apply(
      params, memory, LENGTHS, method=memory_kind.MemoryAttention.prepare
  )['slots']
  noisy = np.where(
      (np.arange(S)[None, :] < LENGTHS[:, None])[..., None], memory, 1e3
  )
  longer = np.concatenate([noisy, np.full((B, 4, D), -7.0, np.float32)], 1)
  for other in (noisy, longer):
    again = module.apply(
        params, other, LENGTHS, method=memory_kind.MemoryAttention.prepare
    )['slots']
    np.testing.assert_allclose(again, slots, rtol=1e-5, atol=1e-5)


def test_position_encodings_spread_slots_from_start_to_end():
  """Identical encoder states: with PE, slot k's favourite position moves right as k grows."""
  config = defaults.get_config().model.attention
  config.kind, config.num_memory, config.encoder_scoring = (
      'memory',
      6,
      'softmax_time',
  )
  config.position_encoding = 'unnormalized'
  config.max_source_length = 12
  module = memory_kind.MemoryAttention(config, D)
  memory = jnp.ones((1, 12, D))
  params = module.init(
      jax.random.key(0),
      memory,
      jnp.array([12]),
      method=memory_kind.MemoryAttention.prepare,
  )
  params = {'params': {'encoder_scores': {'kernel': jnp.ones((D, 6))}}}
  alpha = module.apply(
      params,
      memory,
      jnp.array([12]),
      method=memory_kind.MemoryAttention.prepare,
  )['alpha']
  favourite = np.argmax(np.asarray(alpha[0]), axis=0)  # per slot
  assert (
      np.all(np.diff(favourite) >= 0)
      and favourite[0] == 0
      and favourite[-1] == 11
  )


def test_memory_decoding_cost_does_not_grow_with_source_length():
  def step_flops(kind, lengths):
    """The flops of one decoding step after sources of each length."""
    config = helpers.tiny_config(kind, 'general')
    config.data.max_length = 400
    config.model.attention.max_source_length = 401
    model = helpers.make_model(config)
    params = helpers.init_params(model)
    step = jax.jit(
        lambda s, c, tok: model.apply(
            {'params': params}, s, c, tok, method=seq2seq.Seq2Seq.decode_step
        )
    )
    flops = []
    for length in lengths:
      source = jax.ShapeDtypeStruct((2, length), jnp.int32)
      # Shapes only: the step is compiled, never run.
      cache, state = jax.eval_shape(
          lambda s: model.apply(
              {'params': params}, s, method=seq2seq.Seq2Seq.encode
          ),
          source,
      )
      tokens = jax.ShapeDtypeStruct((2,), jnp.int32)
      cost = step.lower(state, cache, tokens).compile().cost_analysis()
      cost = cost[0] if isinstance(cost, list) else cost
      flops.append(cost['flops'])
    return flops

  short, long = step_flops('memory', (10, 400))
  assert short == long
  # the check can fail
  short, long = step_flops('global', (10, 400))
  assert short < long


# ----------------------------------------------------------------- gradients and beams


@pytest.mark.parametrize(
    'kind,extra',
    [
        ('local_p', dict(window=2)),
        ('flexible', dict(tau=math.inf)),
        (
            'memory',
            dict(
                num_memory=3,
                position_encoding='renorm',
                encoder_scoring='softmax_time',
            ),
        ),
        (
            'memory',
            dict(
                num_memory=3,
                encoder_scoring='sigmoid',
                decoder_scoring='sigmoid',
            ),
        ),
    ],
)
def test_gradient_check(kind, extra):
  with jax.enable_x64(True):
    _, params, (memory, query, prev, inputs, t), module = _run_module(
        kind, **extra
    )
    params = jax.tree_util.tree_map(
        lambda x: jnp.asarray(x, jnp.float64), params
    )
    step = attention.StepInputs(
        prev_query=jnp.asarray(prev, jnp.float64),
        inputs=jnp.asarray(inputs, jnp.float64),
        t=jnp.asarray(t),
    )
    weights = jnp.asarray(np.random.default_rng(1).normal(size=(B, D)))

    def loss(params, memory, query):
      def run(mdl):
        cache = mdl.prepare(memory, LENGTHS)
        context, state, _ = mdl(query, cache, mdl.initial_state(cache), step)
        return jnp.sum(context * weights) + sum(
            jnp.sum(jnp.sin(v)) for v in state.values()
        )

      return module.apply({'params': params}, method=run)

    check_grads(
        jax.jit(loss),
        (
            params,
            jnp.asarray(memory, jnp.float64),
            jnp.asarray(query, jnp.float64),
        ),
        order=1,
        modes=['rev'],
        atol=1e-4,
        rtol=1e-4,
    )


BEAM_VARIANTS = [
    ('local_m', {}),
    ('local_p', {}),
    ('flexible', dict(tau=1.0)),
    ('memory', dict(position_encoding='renorm')),
]


@functools.lru_cache(maxsize=None)
def _variant_model(kind, frozen):
  config = helpers.tiny_config(
      kind, 'general', query='previous' if kind == 'flexible' else 'current'
  )
  for key, value in frozen:
    config.model.attention[key] = value
  model = helpers.make_model(config)
  params = jax.tree_util.tree_map(
      lambda x: 3.0 * x, helpers.init_params(model, seed=4)
  )
  return model, params


@pytest.mark.parametrize('kind,extra', BEAM_VARIANTS)
def test_beam_one_equals_greedy_and_state_follows_the_beams(kind, extra):
  model, params = _variant_model(kind, tuple(sorted(extra.items())))
  source = helpers.random_batch(np.random.default_rng(1), 4, 7, 4)[0]
  greedy = jax.jit(
      functools.partial(search.greedy_search, model, ratio=1.5, offset=2)
  )(params, source)
  beam1 = jax.jit(
      functools.partial(
          beam.beam_search, model, beam_size=1, alpha=0.0, ratio=1.5, offset=2
      )
  )(params, source)
  np.testing.assert_array_equal(greedy.tokens, beam1.tokens)
  for field in loop.Windows._fields:
    np.testing.assert_allclose(
        getattr(greedy.windows, field),
        getattr(beam1.windows, field),
        rtol=1e-6,
        err_msg=field,
    )
  # With K = 3 the per-step diagnostics returned for the best hypothesis must equal those of
  # teacher-forcing it: its recurrent attention state (p_{t-1}, ...) was reordered with it.
  beam3 = jax.jit(
      functools.partial(
          beam.beam_search,
          model,
          beam_size=3,
          alpha=0.6,
          ratio=1.5,
          offset=2,
          with_diagnostics=True,
      )
  )(params, source)
  hyps = []
  for row in range(source.shape[0]):
    tokens = list(np.asarray(beam3.tokens[row]))
    hyps.append(tokens[: tokens.index(2) + 1])
  length = max(len(h) for h in hyps)
  target_in = np.array(
      [[1] + h[:-1] + [PAD] * (length - len(h)) for h in hyps], np.int32
  )
  forced = jax.jit(
      lambda s, t: model.apply({'params': params}, s, t, with_weights=True)[1]
  )(source, target_in)
  for row, hyp in enumerate(hyps):
    np.testing.assert_allclose(
        beam3.diagnostics['weights'][row, : len(hyp)],
        forced['weights'][row, : len(hyp)],
        atol=1e-5,
    )
    np.testing.assert_allclose(
        beam3.diagnostics['window'][row, : len(hyp)],
        forced['window'][row, : len(hyp)],
    )


@pytest.mark.parametrize('kind,extra', BEAM_VARIANTS)
def test_source_padding_never_changes_any_kind(kind, extra):
  model, params = _variant_model(kind, tuple(sorted(extra.items())))
  source, target_in, target_out = helpers.random_batch(
      np.random.default_rng(2), 3, 6, 5
  )
  apply = jax.jit(lambda s, t: model.apply({'params': params}, s, t)[0])
  mask = (target_out != PAD)[..., None]
  padded = np.pad(source, ((0, 0), (0, 2)))
  np.testing.assert_allclose(
      np.where(mask, apply(padded, target_in), 0),
      np.where(mask, apply(source, target_in), 0),
      atol=1e-5,
  )


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    'field,value,message',
    [
        ('num_memory', 0, 'num_memory=0 must be > 0'),
        ('window', -1, 'window=-1 must be >= 0'),
        ('sigma', 0.0, 'sigma=0.0 must be > 0'),
        ('tau', -0.5, 'tau=-0.5 must be >= 0'),
        ('encoder_scoring', 'tanh', 'encoder_scoring'),
        ('decoder_scoring', 'relu', 'decoder_scoring'),
        ('position_encoding', 'yes', 'position_encoding'),
    ],
)
def test_attention_config_errors(field, value, message):
  config = defaults.get_config('tiny')
  config.model.attention[field] = value
  with pytest.raises(errors.ConfigError, match=message):
    validation.resolve(config)


def test_position_encodings_need_room_for_the_longest_source():
  config = defaults.get_config('tiny')
  config.model.attention.kind, config.model.attention.position_encoding = (
      'memory',
      'renorm',
  )
  config.model.attention.max_source_length = 4
  with pytest.raises(errors.ConfigError, match='position encodings cover only'):
    validation.resolve(config)
  # A longer source (a test split is kept whole): positions past S = 4 take
  # position S's encoding.
  table = memory_kind.position_encoding(
      jnp.array([6]), 6, 3, 4, 'unnormalized'
  )[0]
  np.testing.assert_array_equal(table[4:], jnp.stack([table[3]] * 2))
  np.testing.assert_allclose(
      table[3],
      memory_kind.position_encoding(jnp.array([4]), 4, 3, 4, 'unnormalized')[
          0, 3
      ],
  )


def test_the_location_score_needs_room_for_the_longest_source():
  for kind in ('global', 'local_m', 'local_p', 'flexible'):
    config = defaults.get_config('tiny')
    config.model.attention.kind, config.model.attention.score = (
        kind,
        'location',
    )
    config.model.attention.max_source_length = 4
    with pytest.raises(errors.ConfigError, match='one logit per position'):
      validation.resolve(config)
