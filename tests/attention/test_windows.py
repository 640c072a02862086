"""Window metrics as the papers define them, through the evaluator.

Shu & Nakayama's window is the mean over sentences of each sentence's mean
over decoding steps; unpruned attention therefore reports the mean source
length (EOS included), whatever the padding or the batch. `avg_computed`
counts the positions actually scored.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax import data
from nmt_jax.data.vocab import PAD
from nmt_jax.decoding import evaluation
from nmt_jax.model import seq2seq
from nmt_jax.system import parallel
from nmt_jax.training import steps
from tests import helpers


@functools.lru_cache(maxsize=None)
def _task():
  return data.load_task(helpers.tiny_config().data, seed=0)


@functools.lru_cache(maxsize=None)
def _translate(kind, beam_size, **attention):
  config = helpers.tiny_config(kind, 'concat')
  for key, value in attention.items():
    config.model.attention[key] = value
  task = _task()
  model = seq2seq.create_model(config, task)
  params = helpers.init_params(model)
  mesh = parallel.make_mesh()
  evaluator = evaluation.Evaluator(config, model, task, mesh)
  _, info = evaluator.translate(params, task.eval, beam_size)
  return config, info


def _mean_source_length():
  source = _task().eval.source
  return float(np.mean([len(s) for s in source]))


@pytest.mark.parametrize('beam_size', [1, 2])
@pytest.mark.parametrize(
    'kind,attention',
    [('global', {}), ('flexible', {'tau': math.inf})],
)
def test_unpruned_window_is_the_mean_source_length(kind, attention, beam_size):
  _, info = _translate(kind, beam_size, **attention)
  assert info['avg_source_length'] == pytest.approx(_mean_source_length())
  assert info['avg_window'] == pytest.approx(_mean_source_length(), rel=1e-6)
  assert info['avg_window_fraction'] == pytest.approx(1.0, rel=1e-6)
  # Sentences are padded to their batch's longest source: scored, then masked.
  assert info['avg_computed'] >= info['avg_window']


def test_local_m_scores_2d_plus_1_positions():
  config, info = _translate('local_m', 1)
  width = 2 * config.model.attention.window + 1
  assert info['avg_computed'] == pytest.approx(width)
  # The window only counts positions inside the sentence.
  assert info['avg_window'] <= width


def test_flexible_computes_a_bucket_at_least_as_wide_as_its_window():
  _, info = _translate('flexible', 1, tau=0.5)
  _, unpruned = _translate('flexible', 1, tau=math.inf)
  assert info['avg_window'] < _mean_source_length()
  # A bucket (8 or the padded length) holds the batch's widest interval.
  assert info['avg_window'] <= info['avg_computed']
  assert info['avg_computed'] <= unpruned['avg_computed']


def test_memory_scores_k_slots():
  config, info = _translate('memory', 2)
  slots = config.model.attention.num_memory
  assert info['avg_window'] == pytest.approx(slots)
  assert info['avg_computed'] == pytest.approx(slots)


def test_strength_reward_normalisations_against_numpy():
  rng = np.random.default_rng(0)
  strength = rng.uniform(size=(3, 5)).astype(np.float32)
  lengths = np.array([5, 2, 0])  # the last row is batch padding
  mask = np.arange(5)[None, :] < lengths[:, None]
  sentence = steps.strength_reward(strength, mask, 'sentence')
  token = steps.strength_reward(strength, mask, 'token')
  per_sentence = [strength[i, :n].mean() for i, n in enumerate(lengths) if n]
  np.testing.assert_allclose(sentence, sum(per_sentence), rtol=1e-6)
  np.testing.assert_allclose(token, (strength * mask).sum(), rtol=1e-6)


def test_finetuning_objective_gradient_matches_the_paper_formula():
  """(sum_i NLL_i - beta sum_i mean_t g_i) / tokens, as eq. 9 scaled."""
  config = helpers.tiny_config('flexible', 'concat')
  config.train.beta = 0.1
  model = helpers.make_model(config)
  params = helpers.init_params(model)
  source, target_in, target_out = helpers.random_batch(
      np.random.default_rng(2), 4, 7, 6
  )
  batch = {'source': source, 'target_in': target_in, 'target_out': target_out}
  state = steps.TrainState(step=0, params=params, opt_state=())

  def paper_objective(params):
    logits, diagnostics = model.apply(
        {'params': params}, source, target_in, train=True
    )  # tiny has no dropout
    mask = target_out != PAD
    log_probs = jax.nn.log_softmax(logits)
    picked = jnp.take_along_axis(log_probs, target_out[..., None], -1)[..., 0]
    nll = -jnp.sum(picked * mask, 1)  # [B] each sentence's summed NLL
    mean_g = jnp.sum(diagnostics['strength'] * mask, 1) / mask.sum(1)
    return jnp.sum(nll - 0.1 * mean_g) / mask.sum()

  expected = jax.jit(jax.grad(paper_objective))(params)

  class Capture:
    """An optimizer whose state is the last gradients it was given."""

    def update(self, grads, opt_state, params):
      del opt_state, params
      return jax.tree_util.tree_map(jnp.zeros_like, grads), grads

  step = functools.partial(
      steps.train_step, model=model, optimizer=Capture(), config=config
  )
  captured, _ = jax.jit(step)(state, batch)
  jax.tree_util.tree_map(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-6),
      captured.opt_state,
      expected,
  )
