"""Mixed precision (model.dtype=bfloat16): bfloat16 compute, float32 state.

Every kind computes its matmuls in bfloat16 and returns float32 logits close
to the float32 model's; gradients, parameters and optimizer state stay
float32; greedy and beam search run; and a model trained in bfloat16 is
stored in float32 and evaluates in float32. That a copy model trained in
bfloat16 reaches the float32 model's BLEU is a benchmark
(python -m experiments.bfloat16_quality.bfloat16_bleu).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax import attention
from nmt_jax import inference
from nmt_jax import train
from nmt_jax.config import defaults
from nmt_jax.decoding import beam
from nmt_jax.decoding import search
from nmt_jax.training import steps
from tests import helpers
from tests.commands import final_params


def _configs(kind):
  f32 = helpers.tiny_config(kind, 'general')
  if 'tau' in f32.model.attention:
    f32.model.attention.tau = 2.0  # decoding takes the pruned path
  bf16 = f32.copy_and_resolve_references()
  bf16.model.dtype = 'bfloat16'
  return f32, bf16


def _bf16_dots(jaxpr) -> int:
  """Matmuls with a bfloat16 result in a jaxpr's text."""
  return sum(
      'dot_general' in line and 'bf16[' in line.split('=')[0]
      for line in str(jaxpr).splitlines()
  )


@pytest.mark.parametrize('kind', attention.kinds())
def test_bfloat16_logits_are_close_to_float32s_and_searches_run(kind):
  f32, bf16 = _configs(kind)
  model32, model16 = helpers.make_model(f32), helpers.make_model(bf16)
  params = helpers.init_params(model32, seed=1)
  source, target_in, _ = helpers.random_batch(np.random.default_rng(0), 3, 7, 6)
  traced = [
      jax.jit(
          lambda p, m=m: m.apply({'params': p}, source, target_in)[0]
      ).trace(params)
      for m in (model32, model16)
  ]
  logits32, logits16 = (t.lower().compile()(params) for t in traced)
  assert logits16.dtype == jnp.float32
  # bfloat16 keeps 8 significant bits: differences of a few 1e-3 per logit.
  np.testing.assert_allclose(logits16, logits32, atol=0.05)
  assert not np.array_equal(logits16, logits32)  # really computed differently
  assert _bf16_dots(traced[1].jaxpr) >= 4
  assert _bf16_dots(traced[0].jaxpr) == 0

  greedy_fn = functools.partial(search.greedy_search, ratio=1.5, offset=2)
  greedy = jax.jit(functools.partial(greedy_fn, model16))(params, source)
  beamed = jax.jit(
      functools.partial(
          beam.beam_search,
          model16,
          beam_size=3,
          alpha=0.6,
          ratio=1.5,
          offset=2,
      )
  )(params, source)
  for out in (greedy, beamed):
    assert out.scores.dtype == jnp.float32
    assert np.all(np.isfinite(out.scores)) and np.all(out.scores <= 0)
  assert greedy.tokens.shape[0] == beamed.tokens.shape[0] == 3


def test_bfloat16_gradients_and_state_stay_float32():
  f32, bf16 = _configs('global')
  model32, model16 = helpers.make_model(f32), helpers.make_model(bf16)
  params = helpers.init_params(model32, seed=1)
  source, target_in, target_out = helpers.random_batch(
      np.random.default_rng(0), 4, 7, 6
  )
  batch = {'source': source, 'target_in': target_in, 'target_out': target_out}

  def grads(model):
    def loss(p):
      logits, _ = model.apply({'params': p}, source, target_in)
      return steps.cross_entropy(logits, target_out)[0]

    return jax.jit(jax.grad(loss))(params)

  g32, g16 = grads(model32), grads(model16)
  for a, b in zip(
      jax.tree_util.tree_leaves(g32), jax.tree_util.tree_leaves(g16)
  ):
    assert b.dtype == jnp.float32
    cosine = np.sum(a * b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30)
    assert cosine > 0.98 or np.linalg.norm(a) < 1e-6

  optimizer, _ = steps.create_optimizer(bf16.train, steps_per_epoch=10)
  state = steps.TrainState(jnp.int32(0), params, optimizer.init(params))
  step = functools.partial(
      steps.train_step, model=model16, optimizer=optimizer, config=bf16
  )
  state, metrics = jax.jit(step)(state, batch)
  dtypes = {x.dtype for x in jax.tree_util.tree_leaves(state) if x.ndim}
  assert dtypes == {jnp.dtype(jnp.float32)}
  assert np.isfinite(metrics['loss_sum'])


def test_bfloat16_training_stores_float32_and_evaluates_in_float32(tmp_path):
  """A few bfloat16 training steps, as a user runs them.

  That bfloat16 training reaches the float32 model's BLEU (a copy task, 1,000
  steps) is a benchmark: python -m experiments.bfloat16_quality.bfloat16_bleu.
  """
  config = defaults.get_config('tiny')
  config.model.dtype = 'bfloat16'
  config.decode.beam_size = 1
  config.train.eval_num_sentences = 8
  config.data.num_buckets = 1  # one training step to compile
  workdir = str(tmp_path / 'run')
  trained = train.train_and_evaluate(config, workdir)
  # Parameters (and the optimizer state) are stored in float32.
  params = final_params(workdir, config.train.num_steps)
  floats = {
      x.dtype
      for x in jax.tree_util.tree_leaves(params)
      if np.issubdtype(x.dtype, np.floating)
  }
  assert floats == {np.dtype(np.float32)}
  # The compute dtype is not part of the model's identity: the bfloat16 run
  # evaluates in float32 too, to nearly the same loss.
  config.model.dtype = 'float32'
  evaluated = inference.evaluate(config, [workdir])
  assert evaluated['checkpoint_step'] == trained['checkpoint_step']
  assert evaluated['loss'] == pytest.approx(trained['loss'], rel=0.01)
  assert evaluated['loss'] != trained['loss']  # really computed differently


def _bf16_module_run(kind, run, **fields):
  """`run(module, memory, query)` applied with bfloat16 params and inputs.

  201 source positions: a position in [0, 200] needs more than bfloat16's 8
  significant bits.
  """
  config = helpers.tiny_config(kind, 'dot').model.attention
  for key, value in fields.items():
    config[key] = value
  config.max_source_length = 201
  module = attention.make(config, 16)
  rng = np.random.default_rng(0)
  memory = jnp.asarray(rng.normal(size=(64, 201, 16)) * 0.3, jnp.float32)
  query = jnp.asarray(rng.normal(size=(64, 16)), jnp.float32)
  params = module.init(jax.random.key(0), memory, query, method=run)
  to_bf16 = lambda x: x.astype(jnp.bfloat16)
  return module.apply(
      jax.tree_util.tree_map(to_bf16, params),
      to_bf16(memory),
      to_bf16(query),
      method=run,
  ), (to_bf16(memory), to_bf16(query), jax.tree_util.tree_map(to_bf16, params))


def test_bfloat16_window_centres_are_computed_in_float32():
  lengths = jnp.full((64,), 201, jnp.int32)
  step = lambda q: attention.StepInputs(q, q, jnp.zeros((64,), jnp.int32))
  previous = jnp.asarray(np.random.default_rng(1).uniform(0, 200, 64))

  # local-p: p_t = (S - 1) sigmoid(v_p^T tanh(W_p h_t)), the sigmoid in
  # float32 of the bfloat16 logit.
  def local_center(module, memory, query):
    cache = module.prepare(memory, lengths)
    return module(query, cache, {}, step(query))[2]['center']

  center, (_, query, params) = _bf16_module_run(
      'local_p', local_center, window=10
  )
  p = params['params']
  logit = jnp.tanh(query @ p['position_hidden']['kernel'])
  logit = logit @ p['position_out']['kernel']
  expected = 200 * jax.nn.sigmoid(logit[:, 0].astype(jnp.float32))
  np.testing.assert_allclose(center, expected, rtol=1e-6)

  # flexible: p_t = sum_s a_t(s) s from float32 weights of the bfloat16
  # scores and the penalty around the previous centre.
  def flexible_center(module, memory, query):
    cache = module.prepare(memory, lengths)
    state = {'center': previous.astype(jnp.float32)}
    return module(query, cache, state, step(query))[2]

  out, (memory, query, _) = _bf16_module_run(
      'flexible', flexible_center, tau=float('inf')
  )
  scores = jnp.einsum('bd,bsd->bs', query, memory).astype(jnp.float32)
  positions = jnp.arange(201)
  offset = -out['strength'][:, None] * (positions - previous[:, None]) ** 2
  offset = offset / (2 * 1.5**2)
  weights = jax.nn.softmax(scores + offset, -1)
  np.testing.assert_allclose(
      out['center'], jnp.sum(weights * positions, -1), atol=2e-3
  )
