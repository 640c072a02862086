"""Coverage (Tu et al. 2016) in the scores, GNMT's coverage penalty in beam
search: against NumPy transcriptions and invariants."""

import functools

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from nmt_jax import attention
from nmt_jax.attention import content
from nmt_jax.config import defaults
from nmt_jax.config import validation
from nmt_jax.data.vocab import BOS
from nmt_jax.data.vocab import EOS
from nmt_jax.data.vocab import PAD
from nmt_jax.decoding import beam
from nmt_jax.decoding import search
from nmt_jax.model import seq2seq
from nmt_jax.system import errors
from nmt_jax.workdir import run_config
from tests import helpers

B, S, D = 3, 7, 6
LENGTHS = np.array([7, 4, 1])


def _np_softmax(scores, mask):
  scores = np.where(mask, scores, -np.inf)
  e = np.exp(scores - scores.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _randomised(params, seed=0):
  """params with the coverage weights (0 at initialisation) drawn at random."""
  rng = np.random.default_rng(seed)
  flat = flax.traverse_util.flatten_dict(params)
  for key, value in flat.items():
    if any(part.startswith('coverage') for part in key):
      flat[key] = jnp.asarray(rng.normal(size=value.shape), value.dtype)
  return flax.traverse_util.unflatten_dict(flat)


def _config(kind, score='general', query='current', **fields):
  config = defaults.get_config('tiny')
  config.model.query = query
  config.model.attention.kind = kind
  config.model.attention.score = score
  config.model.attention.coverage = True
  config.model.embed_size = config.model.hidden_size = 8
  for key, value in fields.items():
    config.model.attention[key] = value
  return validation.resolve(config)


# ------------------------------------------------------- the score equation


def _np_scores(score, p, memory, query, coverage):
  """Tu et al.'s scores with coverage [B, S], transcribed."""
  p = jax.tree_util.tree_map(np.asarray, p)
  if score == 'concat':
    pre = (
        memory @ p['key_proj']['kernel']
        + (query @ p['query_proj']['kernel'])[:, None]
        + coverage[..., None] * p['coverage_proj']['kernel'][0]
    )
    return (np.tanh(pre) @ p['v']['kernel'])[..., 0]
  if score == 'dot':
    plain = np.einsum('bsd,bd->bs', memory, query)
  elif score == 'general':
    plain = np.einsum('bsd,da,ba->bs', memory, p['key_proj']['kernel'], query)
  else:  # location
    plain = (query @ p['location']['kernel'] + p['location']['bias'])[:, :S]
  return plain + p['coverage_weight'] * coverage


@pytest.mark.parametrize(
    'score, project_query',
    [
        ('dot', True),
        ('general', True),  # the query-side shortcut
        ('general', False),
        ('concat', True),
        ('location', True),
    ],
)
def test_global_scores_take_the_coverage_as_the_equation(score, project_query):
  config = defaults.get_config('tiny').model.attention
  config.kind, config.score, config.coverage = 'global', score, True
  config.max_source_length = S + 2
  module = attention.make(config, D, project_query)
  rng = np.random.default_rng(0)
  memory = rng.normal(size=(B, S, D)).astype(np.float32)
  query = rng.normal(size=(B, D)).astype(np.float32)
  coverage = rng.uniform(0, 2, size=(B, S)).astype(np.float32)

  def run(mdl, memory, query, coverage):
    cache = mdl.prepare(memory, LENGTHS)
    return mdl(query, cache, {'coverage': coverage}, None, with_weights=True)

  params = module.init(jax.random.key(0), memory, query, coverage, method=run)
  params = {'params': _randomised(params['params'])}
  context, state, diagnostics = jax.jit(
      functools.partial(module.apply, method=run)
  )(params, memory, query, coverage)

  mask = np.arange(S)[None] < LENGTHS[:, None]
  scores = _np_scores(
      score, params['params']['scorer'], memory, query, coverage
  )
  weights = _np_softmax(scores, mask)
  np.testing.assert_allclose(diagnostics['weights'], weights, atol=1e-5)
  np.testing.assert_allclose(
      context, np.einsum('bs,bsd->bd', weights, memory), atol=1e-5
  )
  np.testing.assert_allclose(state['coverage'], coverage + weights, atol=1e-5)


@pytest.mark.parametrize('score', ['general', 'concat'])
def test_coverage_starts_as_the_attention_without_it(score):
  """w_c = 0 at initialisation: the weights of the same parameters without
  coverage, whatever the coverage."""
  config = defaults.get_config('tiny').model.attention
  config.kind, config.score, config.coverage = 'global', score, True
  rng = np.random.default_rng(1)
  memory = rng.normal(size=(B, S, D)).astype(np.float32)
  query = rng.normal(size=(B, D)).astype(np.float32)
  coverage = rng.uniform(0, 2, size=(B, S)).astype(np.float32)

  def run(mdl, state):
    cache = mdl.prepare(memory, LENGTHS)
    return mdl(query, cache, state, None, with_weights=True)[2]['weights']

  module = attention.make(config, D)
  params = module.init(jax.random.key(0), {'coverage': coverage}, method=run)
  with_coverage = module.apply(params, {'coverage': coverage}, method=run)
  config.coverage = False
  flat = flax.traverse_util.flatten_dict(params)
  plain = flax.traverse_util.unflatten_dict({
      k: v
      for k, v in flat.items()
      if not any(part.startswith('coverage') for part in k)
  })
  without = attention.make(config, D).apply(plain, {}, method=run)
  np.testing.assert_allclose(with_coverage, without, atol=1e-6)
  assert np.abs(without).sum() > 0


# ------------------------------------------- teacher forcing and decoding

MODEL_CASES = [
    ('global', 'concat', 'previous', {}),
    ('global', 'general', 'current', {}),
    ('local_m', 'dot', 'current', dict(window=1)),
    ('local_p', 'general', 'current', dict(window=2)),
    ('flexible', 'general', 'previous', dict(tau=0.5)),  # kept windows
    ('flexible', 'concat', 'previous', {}),  # tau = inf: every position
]


@pytest.mark.parametrize('kind, score, query, fields', MODEL_CASES)
def test_coverage_is_the_sum_of_past_weights_stepwise_as_scanned(
    kind, score, query, fields
):
  """Decoding step by step gives the teacher-forced pass's logits and
  weights; the state's coverage before step t is the NumPy sum of the
  weights of steps < t; padding the source changes nothing."""
  config = _config(kind, score, query, **fields)
  model = helpers.make_model(config)
  params = _randomised(helpers.init_params(model), seed=1)
  source, target_in, _ = helpers.random_batch(np.random.default_rng(2), 3, 7, 6)
  forward = jax.jit(
      lambda src: model.apply(
          {'params': params}, src, target_in, with_weights=True
      )
  )
  logits, diagnostics = forward(source)
  weights = np.asarray(diagnostics['weights'])  # [B, T, S]
  assert np.abs(weights).sum() > 0

  cache, state = model.apply(
      {'params': params}, source, method=seq2seq.Seq2Seq.encode
  )
  step = jax.jit(
      lambda state, tokens: model.apply(
          {'params': params},
          state,
          cache,
          tokens,
          True,
          method=seq2seq.Seq2Seq.decode_step,
      )
  )
  past = np.zeros((source.shape[0], source.shape[1]), np.float32)
  for t in range(target_in.shape[1]):
    np.testing.assert_allclose(state.attention['coverage'], past, atol=1e-5)
    state, step_logits, step_diagnostics = step(state, target_in[:, t])
    np.testing.assert_allclose(step_logits, logits[:, t], atol=1e-4)
    np.testing.assert_allclose(
        step_diagnostics['weights'], weights[:, t], atol=1e-5
    )
    past = past + weights[:, t]

  padded = np.pad(source, ((0, 0), (0, 3)), constant_values=PAD)
  padded_logits, padded_diagnostics = forward(padded)
  np.testing.assert_allclose(padded_logits, logits, atol=1e-5)
  np.testing.assert_allclose(
      padded_diagnostics['weights'][..., : source.shape[1]], weights, atol=1e-5
  )
  np.testing.assert_array_equal(padded_diagnostics['weights'][..., -3:], 0)


def test_gradient_through_the_coverage_matches_finite_differences():
  config = _config('global', 'concat', 'previous')
  model = helpers.make_model(config)
  source, target_in, target_out = helpers.random_batch(
      np.random.default_rng(3), 2, 6, 5
  )
  with jax.enable_x64(True):
    params = jax.tree_util.tree_map(
        lambda x: jnp.asarray(x, jnp.float64),
        _randomised(helpers.init_params(model), seed=4),
    )

    def loss(params):
      logits, _ = model.apply({'params': params}, source, target_in)
      per_token = optax.softmax_cross_entropy_with_integer_labels(
          logits, target_out
      )
      return jnp.sum(per_token * (target_out != PAD))

    loss = jax.jit(loss)
    grads = jax.jit(jax.grad(loss))(params)
    for leaf in jax.tree_util.tree_leaves(grads):
      assert np.all(np.isfinite(leaf))
    # The coverage weights do receive a gradient.
    flat = flax.traverse_util.flatten_dict(grads)
    assert any(
        np.abs(v).sum() > 0
        for k, v in flat.items()
        if any(p.startswith('coverage') for p in k)
    )
    # Central differences along a random direction (float64).
    rng = np.random.default_rng(5)
    direction = jax.tree_util.tree_map(
        lambda x: jnp.asarray(rng.normal(size=x.shape)), params
    )
    moved = lambda eps: jax.tree_util.tree_map(
        lambda x, d: x + eps * d, params, direction
    )
    eps = 1e-5
    numeric = (loss(moved(eps)) - loss(moved(-eps))) / (2 * eps)
    analytic = sum(
        jnp.vdot(g, d)
        for g, d in zip(
            jax.tree_util.tree_leaves(grads),
            jax.tree_util.tree_leaves(direction),
        )
    )
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6)


# ------------------------------------------------- the coverage penalty


def _forced_scores(model, params, source, nbest, alpha, beta):
  """NumPy scores of the n-best [B, K, T] from teacher-forced passes: log p /
  lp(|Y|) + beta sum_{i < |X|} log(min(sum_t a_t(i), 1)), with a floor at
  beam.COVERAGE_FLOOR (-inf for an empty slot)."""
  batch, k, steps = nbest.shape
  scores = np.full((batch, k), -np.inf)
  rows = np.repeat(source, k, 0)
  out = nbest.reshape(batch * k, steps)
  target_in = np.concatenate([np.full((batch * k, 1), BOS), out[:, :-1]], 1)
  target_in[out == PAD] = PAD
  logits, diagnostics = model.apply(
      {'params': params}, rows, target_in, with_weights=True
  )
  log_probs = np.asarray(jax.nn.log_softmax(logits))
  weights = np.asarray(attention.source_weights(diagnostics))  # [N, T, S]
  for n in range(batch * k):
    length = int(np.sum(out[n] != PAD))
    if not length or out[n, length - 1] != EOS:
      continue
    logp = sum(log_probs[n, t, out[n, t]] for t in range(length))
    lp = ((5.0 + length) / 6.0) ** alpha
    attended = weights[n, :length].sum(0)[: int(np.sum(rows[n] != PAD))]
    cp = beta * np.sum(np.log(np.clip(attended, beam.COVERAGE_FLOOR, 1.0)))
    scores[n // k, n % k] = logp / lp + cp
  return scores


@functools.lru_cache(maxsize=None)
def _penalty_model(kind):
  if kind == 'memory':
    config = defaults.get_config('tiny')
    config.model.attention.kind = 'memory'
    config.model.attention.num_memory = 3
    config.model.embed_size = config.model.hidden_size = 8
    config = validation.resolve(config)
  else:
    config = _config(kind, 'concat', 'previous')
  model = helpers.make_model(config)
  params = _randomised(helpers.init_params(model), seed=5)
  # A tiny model is unsure: sharper outputs make beams finish early.
  params = jax.tree_util.tree_map(lambda x: 3 * x, params)
  return model, params


@pytest.mark.parametrize('kind', ['global', 'memory'])
def test_coverage_penalty_scores_finished_hypotheses_as_numpy(kind):
  """Beam search's finished scores against a NumPy recomputation from
  teacher-forced attention (with coverage in the model: the beams' coverage
  state is reordered with them, or the recomputed attention would differ)."""
  model, params = _penalty_model(kind)
  source, _, _ = helpers.random_batch(np.random.default_rng(6), 3, 6, 5)
  alpha, beta, k = 0.6, 0.7, 3
  decode = jax.jit(
      functools.partial(
          beam.beam_search,
          model,
          beam_size=k,
          alpha=alpha,
          ratio=1.0,
          offset=2,
          beta=beta,
      )
  )
  out = decode(params, source)
  nbest, scores = np.asarray(out.nbest_tokens), np.asarray(out.nbest_scores)
  expected = _forced_scores(model, params, source, nbest, alpha, beta)
  finished = np.isfinite(expected)
  assert finished.sum() >= 3
  np.testing.assert_allclose(scores[finished], expected[finished], rtol=1e-4)
  # The penalty is there to be tested: without it the scores differ.
  plain = _forced_scores(model, params, source, nbest, alpha, 0.0)
  assert np.max(np.abs(plain - expected)[finished]) > 1e-2


def test_a_zero_coverage_penalty_is_plain_beam_search():
  """A beta too small to change a ranking leaves the tokens and scores of
  beta = 0 (the search without the penalty) as they are."""
  model, params = _penalty_model('global')
  source, _, _ = helpers.random_batch(np.random.default_rng(7), 3, 6, 5)
  config = defaults.get_config('tiny').decode
  config.beam_size = 3
  plain = search.make_decode_fn(model, config)(params, source)
  assert config.coverage_penalty == 0
  config.coverage_penalty = 1e-9
  tiny = search.make_decode_fn(model, config)(params, source)
  np.testing.assert_array_equal(tiny.nbest_tokens, plain.nbest_tokens)
  np.testing.assert_allclose(tiny.nbest_scores, plain.nbest_scores, atol=1e-6)


def test_coverage_penalty_is_at_most_zero_and_skips_padding():
  sums = jnp.array([[0.0, 0.5, 3.0, 0.0], [1.0, 1.0, 0.2, 7.0]])
  lengths = jnp.array([3, 2])
  got = beam.coverage_penalty(sums, lengths, 2.0)
  want = 2.0 * np.array([np.log(1e-6) + np.log(0.5), 0.0])
  np.testing.assert_allclose(got, want, rtol=1e-6)


# ------------------------------------------------------------- config


def test_coverage_config_errors_are_one_line():
  for kind, words in (('memory', 'memory slots'), ('none', 'no attention')):
    config = defaults.get_config('tiny')
    config.model.attention.kind = kind
    config.model.attention.coverage = True
    with pytest.raises(errors.ConfigError, match=words) as e:
      validation.resolve(config)
    assert '\n' not in str(e.value)
  # A ConfigDict refuses 1 for a bool; a config.json could still hold one.
  check = content.COVERAGE_FIELD['coverage'][1]
  with pytest.raises(errors.ConfigError, match='True or False'):
    check('model.attention.coverage', 1)
  config = defaults.get_config('tiny')
  config.decode.coverage_penalty = -0.1
  with pytest.raises(errors.ConfigError, match='>= 0'):
    validation.resolve(config)
  config = defaults.get_config('tiny')
  config.decode.coverage_penalty, config.decode.beam_size = 0.2, 1
  with pytest.raises(errors.ConfigError, match='greedy'):
    validation.resolve(config)
  config.decode.beam_size = 4
  config.model.attention.kind = 'none'
  with pytest.raises(errors.ConfigError, match='decode.coverage_penalty'):
    validation.resolve(config)


def test_coverage_is_part_of_the_identity_and_the_penalty_is_not():
  fields = run_config.identity_fields(_config('local_p'))
  assert fields['model.attention.coverage'] is True
  assert not any(k.startswith('decode.') for k in fields)
  config = defaults.get_config('tiny')
  config.model.attention.kind = 'memory'
  assert 'model.attention.coverage' not in run_config.identity_fields(
      validation.resolve(config)
  )
