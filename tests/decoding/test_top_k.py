"""loop.top_k selects as jax.lax.top_k; beam search with it decodes the same."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax.decoding import beam
from nmt_jax.decoding import loop
from nmt_jax.model import seq2seq
from tests import helpers


def test_block_size_blocks_only_long_rows():
  assert loop.block_size(100, 4) == 0
  assert loop.block_size(4095, 2) == 0
  # Beam 10 over a 16k vocabulary: 160k candidates, 20 kept.
  assert loop.block_size(160_000, 20) == 64
  block = loop.block_size(5000, 8)
  assert block >= 16 and 4 * 8 * block <= 5000


@pytest.mark.parametrize(
    'n, k, distinct',
    [
        (4096, 8, 3),  # mostly ties
        (5003, 8, 50),  # the last block padded
        (20_000, 20, 1_000_000),
        (8192, 2, 2),
    ],
)
def test_top_k_is_lax_top_k(n, k, distinct):
  assert loop.block_size(n, k)  # the blocked path
  rng = np.random.default_rng(n + k)
  x = rng.integers(0, distinct, (6, n)).astype(np.float32) / 7
  x[1] = -np.inf  # nothing allowed
  x[2, :] = -np.inf
  x[2, [17, n - 1]] = 1.0  # fewer allowed values than k
  x[3, rng.integers(0, n, 40)] = np.inf
  x[4] = rng.standard_normal(n)  # no ties
  values, index = jax.jit(loop.top_k, static_argnums=1)(x, k)
  want_values, want_index = jax.lax.top_k(x, k)
  np.testing.assert_array_equal(index, want_index)
  np.testing.assert_array_equal(values, want_values)
  assert index.dtype == jnp.int32 and values.shape == (6, k)


def test_top_k_keeps_leading_axes():
  x = np.random.default_rng(0).standard_normal((2, 3, 6000)).astype(np.float32)
  values, index = loop.top_k(x, 10)
  want_values, want_index = jax.lax.top_k(x, 10)
  np.testing.assert_array_equal(index, want_index)
  np.testing.assert_array_equal(values, want_values)


def test_beam_search_decodes_as_with_lax_top_k(monkeypatch):
  # 2 x 1,024 candidates per sentence at beam 4 (8 kept): the blocked path.
  vocab, k = 1024, 4
  assert loop.block_size(k * vocab, 2 * k)
  config = helpers.tiny_config()
  model = seq2seq.Seq2Seq(config.model, vocab, vocab)
  rng = np.random.default_rng(1)
  source = rng.integers(4, vocab, (5, 7)).astype(np.int32)
  params = model.init(jax.random.key(2), source, source)['params']
  # Sharper than at initialisation, so that hypotheses part and end.
  params = jax.tree_util.tree_map(lambda p: p * 4.0, params)

  def decode():
    return jax.jit(
        lambda p, s: beam.beam_search(
            model, p, s, beam_size=k, alpha=0.6, ratio=1.5, offset=3
        )
    )(params, source)

  blocked = decode()
  monkeypatch.setattr(loop, 'top_k', jax.lax.top_k)
  plain = decode()
  np.testing.assert_array_equal(blocked.nbest_tokens, plain.nbest_tokens)
  np.testing.assert_array_equal(blocked.nbest_scores, plain.nbest_scores)
  # Not a trivial case: hypotheses differ and some end before the limit.
  assert len({tuple(t) for t in np.asarray(plain.nbest_tokens[0])}) == k
