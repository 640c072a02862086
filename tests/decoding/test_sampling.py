"""Sampling (decode.method='sample') against greedy search, NumPy and the
teacher-forced model: its limits, its keys, its nucleus and its scores."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax.config import defaults
from nmt_jax.config import validation
from nmt_jax.data.vocab import BOS
from nmt_jax.data.vocab import EOS
from nmt_jax.data.vocab import PAD
from nmt_jax.decoding import loop
from nmt_jax.decoding import sampling
from nmt_jax.decoding import scorers
from nmt_jax.decoding import search
from nmt_jax.system import errors
from tests import helpers


@functools.lru_cache(maxsize=None)
def _model(seed=0):
  """(config, model, params) of a tiny global-attention model."""
  config = helpers.tiny_config('global', 'concat')
  model = helpers.make_model(config)
  return config, model, helpers.init_params(model, seed)


def _source():
  """[5, 7]: four random sentences and the first one again."""
  source, _, _ = helpers.random_batch(np.random.default_rng(3), 4, 7, 6, 2)
  return np.concatenate([source, source[:1]])


def _decode_fn(model, **decode):
  """make_decode_fn of sampling with these decode.* fields."""
  config = defaults.get_config('tiny')
  config.decode.method = 'sample'
  for key, value in decode.items():
    config.decode[key] = value
  return search.make_decode_fn(model, validation.resolve(config).decode)


def _nbest(out):
  return np.asarray(out.nbest_tokens), np.asarray(out.nbest_scores)


def test_top_k_1_and_a_cold_temperature_are_greedy():
  config, model, params = _model()
  source = _source()
  greedy = search.make_decode_fn(model, config.decode, 1)(params, source)
  assert np.any(np.sum(np.asarray(greedy.tokens) != PAD, 1) > 3)  # not all EOS
  for decode in ({'top_k': 1}, {'temperature': 1e-4, 'top_p': 0.5}):
    tokens, scores = _nbest(
        _decode_fn(model, num_samples=2, **decode)(params, source)
    )
    for k in range(2):
      np.testing.assert_array_equal(tokens[:, k], greedy.tokens)
      np.testing.assert_allclose(scores[:, k], greedy.scores, rtol=1e-5)


def test_samples_are_the_sentences_own_whatever_the_batch():
  _, model, params = _model()
  source = _source()
  sample = _decode_fn(model, num_samples=3, top_k=6, temperature=1.5)
  tokens, scores = _nbest(sample(params, source))
  again = _nbest(sample(params, source))
  np.testing.assert_array_equal(again[0], tokens)  # reproducible
  np.testing.assert_array_equal(again[1], scores)
  # Samples differ between sentences and between the samples of one; an
  # identical source line gets identical samples.
  assert len({tuple(t) for t in tokens[:4].reshape(12, -1)}) > 6
  np.testing.assert_array_equal(tokens[4], tokens[0])

  def check(rows, out, width):
    """rows: {row of `out`: sentence of `source`}."""
    got_tokens, got_scores = _nbest(out)
    steps = tokens.shape[-1]
    assert got_tokens.shape[-1] == loop.max_steps(width, 2.0, 10) >= steps
    for row, sentence in rows.items():
      np.testing.assert_array_equal(
          got_tokens[row, :, :steps], tokens[sentence]
      )
      assert np.all(got_tokens[row, :, steps:] == PAD)
      np.testing.assert_allclose(got_scores[row], scores[sentence], rtol=1e-5)

  # Alone; then among other sentences, at other rows, with more padding.
  check({0: 2}, sample(params, source[2:3]), 7)
  others, _, _ = helpers.random_batch(np.random.default_rng(9), 2, 10, 6)
  rows = {0: 3, 2: 1, 3: 2, 5: 0}
  wider = np.zeros((6, 10), np.int32)
  wider[[1, 4]] = others
  for row, sentence in rows.items():
    wider[row, :7] = source[sentence]
  check(rows, sample(params, wider), 10)
  # Sample j does not depend on how many are drawn.
  fewer = _decode_fn(model, num_samples=2, top_k=6, temperature=1.5)
  np.testing.assert_array_equal(_nbest(fewer(params, source))[0], tokens[:, :2])


def _nucleus_reference(log_probs, temperature, top_k, top_p):
  """NumPy: the distribution sample_tokens draws from, float64 [V]."""
  logits = np.asarray(log_probs, np.float64) / temperature
  probs = np.exp(logits - logits.max())
  probs /= probs.sum()
  order = np.argsort(-probs, kind='stable')
  kept = np.zeros(len(probs), bool)
  kept[order[: top_k or len(probs)]] = True
  probs = np.where(kept, probs, 0.0) / probs[kept].sum()
  # The fewest most probable words whose mass reaches top_p.
  mass, nucleus = 0.0, np.zeros(len(probs), bool)
  for word in order:
    if mass >= top_p or not kept[word]:
      break
    nucleus[word] = True
    mass += probs[word]
  probs = np.where(nucleus, probs, 0.0)
  return probs / probs.sum()


@pytest.mark.parametrize(
    'temperature, top_k, top_p, size',
    [
        (1.0, 0, 0.65, 2),  # 0.4 + 0.3 reaches 0.65: two words
        (1.0, 0, 0.75, 3),
        (0.7, 4, 0.8, 2),  # tempered, top 4, then the nucleus
        (1.3, 0, 1.0, 8),  # everything but the masked words
    ],
)
def test_top_p_draws_from_exactly_the_nucleus(temperature, top_k, top_p, size):
  probs = np.array([0.0, 0.3, 0.0, 0.05, 0.4, 0.02, 0.1, 0.03, 0.06, 0.04])
  log_probs = np.log(np.where(probs > 0, probs, 1.0)).astype(np.float32)
  log_probs[[0, 2]] = -np.inf  # as `restrict` masks PAD and BOS
  want = _nucleus_reference(log_probs, temperature, top_k, top_p)
  assert np.count_nonzero(want) == size
  draws = 20_000
  keys = jax.random.split(jax.random.key(7), draws)
  drawn = jax.jit(
      functools.partial(
          sampling.sample_tokens,
          temperature=temperature,
          top_k=top_k,
          top_p=top_p,
      )
  )(jnp.broadcast_to(log_probs, (draws, 10)), keys)
  counts = np.bincount(np.asarray(drawn), minlength=10)
  assert set(np.flatnonzero(counts)) == set(np.flatnonzero(want))
  # Each frequency within 5 standard deviations of its probability.
  bound = 5 * np.sqrt(want * (1 - want) / draws) + 1e-9
  np.testing.assert_array_less(np.abs(counts / draws - want), bound)


def _teacher_forced(scorer, params, source, tokens):
  """Summed teacher-forced log p of the samples tokens [B, N, T] -> [B, N]."""
  batch, n, _ = tokens.shape
  target_out = tokens.reshape(batch * n, -1)
  target_in = np.concatenate(
      [np.full((batch * n, 1), BOS, np.int32), target_out[:, :-1]], 1
  )
  target_in[target_out == PAD] = PAD
  per_token = jax.jit(functools.partial(scorers.target_log_probs, scorer))(
      params, np.repeat(source, n, 0), target_in, target_out
  )
  return np.asarray(per_token).sum(-1).reshape(batch, n)


def test_scores_are_the_teacher_forced_log_probability_of_the_samples():
  # Untempered and untruncated, of one model and of an ensemble (its
  # distribution normalised, as scoring reads it).
  _, model, params = _model()
  _, second, second_params = _model(seed=1)
  source = _source()[:4]
  ensemble = scorers.Ensemble([model, second])
  for scorer, p in ((model, params), (ensemble, (params, second_params))):
    out = _decode_fn(scorer, num_samples=3, temperature=0.6, top_p=0.9)(
        p, source
    )
    tokens, scores = _nbest(out)
    assert np.all(np.any(tokens == EOS, -1))  # every sample ended
    want = _teacher_forced(scorer, p, source, tokens)
    np.testing.assert_allclose(scores, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(out.tokens, tokens[:, 0])  # the first
    np.testing.assert_array_equal(out.scores, scores[:, 0])


@pytest.mark.parametrize(
    'fields, message',
    [
        ({'temperature': 0.0}, 'decode.temperature=0.0 must be > 0'),
        ({'top_k': -1}, 'decode.top_k=-1 must be >= 0'),
        ({'top_p': 0.0}, 'decode.top_p=0.0 must be > 0'),
        ({'top_p': 1.5}, 'decode.top_p=1.5 must be in (0, 1]'),
        ({'num_samples': 0}, 'decode.num_samples=0 must be > 0'),
        ({'sample_seed': -1}, 'decode.sample_seed=-1 must be an integer'),
        ({'num_samples': 2, 'nbest': 3}, 'exceeds decode.num_samples=2'),
        (
            {'method': 'search', 'top_k': 5},
            (
                'decode.top_k=5 is a sampling setting, but decode.method is'
                " 'search'"
            ),
        ),
        ({'method': 'beam'}, "decode.method='beam' is not one of"),
    ],
)
def test_bad_sampling_fields_are_one_line(fields, message):
  config = defaults.get_config('tiny')
  config.decode.method = 'sample'
  for key, value in fields.items():
    config.decode[key] = value
  with pytest.raises(errors.ConfigError) as error:
    validation.resolve(config)
  assert message in str(error.value) and '\n' not in str(error.value)
  config.decode.method = 'sample'
  config.decode.nbest = config.decode.num_samples = 4
  for key in ('temperature', 'top_k', 'top_p', 'sample_seed'):
    config.decode[key] = defaults.get_config().decode[key]
  validation.resolve(config)  # sampling with an n-best list of its samples
