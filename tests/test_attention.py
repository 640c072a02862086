"""Each global score against a NumPy transcription of its equation; masking."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax import attention
from nmt_jax import errors
from nmt_jax.attention import content
from nmt_jax.attention import global_
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


@pytest.mark.parametrize('score', content.SCORES)
def test_global_attention_matches_numpy(score):
  rng = np.random.default_rng(0)
  batch, src, dim = 3, 5, 4
  memory = rng.normal(size=(batch, src, dim)).astype(np.float32)
  query = rng.normal(size=(batch, dim)).astype(np.float32)
  lengths = np.array([5, 2, 1])
  config = helpers.tiny_config('global', score).model.attention
  config.max_source_length = 7
  module = global_.GlobalAttention(config, dim)

  def run(mdl, memory, lengths, query):
    cache = mdl.prepare(memory, lengths)
    return mdl(query, cache, mdl.initial_state(cache), None, with_weights=True)

  params = module.init(jax.random.key(0), memory, lengths, query, method=run)
  context, _, diagnostics = module.apply(
      params, memory, lengths, query, method=run
  )
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
