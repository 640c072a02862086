"""Each global score against a NumPy transcription of its equation; masking."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from nmt_jax import attention
from nmt_jax.attention import content
from nmt_jax.attention import global_
from nmt_jax.decoding import search
from nmt_jax.system import errors
from tests import helpers


def _np_softmax(scores, mask):
  scores = np.where(mask, scores, -np.inf)
  e = np.exp(scores - scores.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _np_scores(score, p, memory, query):
  """Luong eq. 8 / Bahdanau, written out with NumPy from the module's parameters."""
  if score == 'dot':  # h_t^T hbar_s
    return np.einsum('bsd,bd->bs', memory, query)
  if score == 'general':  # h_t^T W_a hbar_s
    w_a = np.asarray(p['key_proj']['kernel'])  # [D, H]: keys = hbar W_a
    return np.einsum('bsd,dh,bh->bs', memory, w_a, query)
  if score == 'concat':  # v_a^T tanh(W_a [h_t; hbar_s])
    w_key, w_query = np.asarray(p['key_proj']['kernel']), np.asarray(
        p['query_proj']['kernel']
    )
    v = np.asarray(p['v']['kernel'])[:, 0]
    hidden = np.tanh(
        np.einsum('bsd,da->bsa', memory, w_key) + (query @ w_query)[:, None, :]
    )
    return hidden @ v
  logits = query @ np.asarray(p['location']['kernel']) + np.asarray(
      p['location']['bias']
  )
  return logits[:, : memory.shape[1]]  # softmax(W_a h_t) over the first |S|


@pytest.mark.parametrize('project_query', [True, False])
@pytest.mark.parametrize('queries_per_sentence', [1, 3])
@pytest.mark.parametrize('score', content.SCORES)
def test_global_attention_matches_numpy(
    score, queries_per_sentence, project_query
):
  # One query per sentence (training, greedy search) or several (a beam's
  # hypotheses sharing their sentence's cache row); the general score's
  # query-side form (project_query) takes the first.
  rng = np.random.default_rng(0)
  batch, src, dim = 3, 5, 4
  memory = rng.normal(size=(batch, src, dim)).astype(np.float32)
  query = rng.normal(size=(batch * queries_per_sentence, dim))
  query = query.astype(np.float32)
  lengths = np.array([5, 2, 1])
  config = helpers.tiny_config('global', score).model.attention
  config.max_source_length = 7
  module = global_.GlobalAttention(config, dim, project_query)

  def run(mdl, memory, lengths, query):
    cache = mdl.prepare(memory, lengths)
    return mdl(query, cache, mdl.initial_state(cache), None, with_weights=True)

  params = module.init(jax.random.key(0), memory, lengths, query, method=run)
  context, _, diagnostics = module.apply(
      params, memory, lengths, query, method=run
  )
  # Each query row against its sentence's memory.
  memory = np.repeat(memory, queries_per_sentence, 0)
  lengths = np.repeat(lengths, queries_per_sentence)
  mask = np.arange(src)[None, :] < lengths[:, None]
  weights = _np_softmax(
      _np_scores(score, params.get('params', {}).get('scorer'), memory, query),
      mask,
  )
  np.testing.assert_allclose(
      diagnostics['weights'], weights, rtol=1e-5, atol=1e-6
  )
  np.testing.assert_allclose(
      context, np.einsum('bs,bsd->bd', weights, memory), rtol=1e-5, atol=1e-6
  )
  np.testing.assert_array_equal(diagnostics['window'], lengths)


def _loss_and_grads(project_query):
  config = helpers.tiny_config(
      'global', 'general', dropout=0.0, project_query=project_query
  )
  net = helpers.make_model(config)
  params = helpers.init_params(net, seed=2)
  source, target_in, target_out = helpers.random_batch(
      np.random.default_rng(1), 3, 7, 6
  )

  def loss(p):
    logits, _ = net.apply({'params': p}, source, target_in)
    per_token = optax.softmax_cross_entropy_with_integer_labels(
        logits, target_out
    )
    return jnp.sum(per_token * (target_out != 0))

  return jax.jit(jax.value_and_grad(loss))(params)


def test_query_side_general_score_gives_the_same_loss_and_gradients():
  (loss_a, grads_a), (loss_b, grads_b) = map(_loss_and_grads, (True, False))
  np.testing.assert_allclose(loss_a, loss_b, rtol=1e-6)
  flat_b = jax.tree_util.tree_leaves(grads_b)
  for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(grads_a), flat_b):
    np.testing.assert_allclose(
        x, y, rtol=1e-5, atol=1e-6, err_msg=jax.tree_util.keystr(path)
    )


@pytest.mark.parametrize('project_query', [True, False])
def test_greedy_search_reads_no_keys_with_the_query_side_score(project_query):
  config = helpers.tiny_config('global', 'general', project_query=project_query)
  net = helpers.make_model(config)
  params = helpers.init_params(net)
  source = np.full((2, 6), 5, np.int32)
  greedy = jax.jit(
      functools.partial(search.greedy_search, net, ratio=1.0, offset=2)
  )
  compiled = greedy.lower(params, source).compile().as_text()
  # The keys W_a hbar_s are computed once per sentence only where a step
  # reads them: with the query-side score XLA drops them.
  assert ('key_proj/dot_general' in compiled) != project_query


def test_masked_softmax_zero_on_padding_and_empty_rows():
  scores = jnp.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
  mask = jnp.array([[True, True, False], [False, False, False]])
  weights = attention.masked_softmax(scores, mask)
  np.testing.assert_allclose(
      weights[0],
      _np_softmax(np.asarray(scores[:1]), np.asarray(mask[:1]))[0],
      rtol=1e-6,
  )
  np.testing.assert_array_equal(weights[1], [0, 0, 0])
  grad = jax.grad(lambda s: attention.masked_softmax(s, mask)[:, 0].sum())(
      scores
  )
  assert np.all(np.isfinite(grad))


def test_unknown_kind_and_score_are_rejected():
  config = helpers.tiny_config().model.attention
  config.kind = 'bogus'
  with pytest.raises(
      errors.ConfigError, match="model.attention.kind='bogus' is not one"
  ):
    attention.make(config, 8)
