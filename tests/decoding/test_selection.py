"""The searches' selection steps against their one-line definitions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax.decoding import beam
from nmt_jax.decoding import loop


def test_argmax_is_jnps_first_maximum():
  rng = np.random.default_rng(0)
  # Few distinct values: many ties, which both must break to the first.
  x = rng.integers(0, 4, (50, 37)).astype(np.float32)
  x[3] = -np.inf  # a row with nothing allowed
  x[4, [5, 9]] = np.inf
  np.testing.assert_array_equal(loop.argmax(x), jnp.argmax(x, -1))
  assert loop.argmax(x).dtype == jnp.int32
  x[7, 2] = np.nan  # a broken row still gives a token of the vocabulary
  assert 0 <= int(loop.argmax(x)[7]) < 37


def one_stage(live_logp, log_probs):
  """The definition: top 2K of all K * V sums, flat index -> (beam, token)."""
  batch, k = live_logp.shape
  vocab = log_probs.shape[-1]
  sums = live_logp[..., None] + log_probs.reshape(batch, k, vocab)
  scores, index = jax.lax.top_k(sums.reshape(batch, k * vocab), 2 * k)
  return scores, index // vocab, index % vocab


@pytest.mark.parametrize('k, vocab', [(1, 7), (3, 9), (4, 5), (5, 6)])
def test_best_candidates_are_the_top_2k_of_all_sums(k, vocab):
  """Ties included (rounded values): the same scores, beams and tokens."""
  rng = np.random.default_rng(k)
  batch = 6
  log_probs = np.round(rng.normal(size=(batch * k, vocab)), 1).astype(
      np.float32
  )
  log_probs[:, 0] = -np.inf  # masked tokens (restrict)
  live_logp = np.round(rng.normal(size=(batch, k)), 1).astype(np.float32)
  live_logp[0, 1:] = -np.inf  # the first step: one live hypothesis
  got = beam.best_candidates(live_logp, log_probs)
  want = one_stage(live_logp, log_probs)
  np.testing.assert_array_equal(got[0], want[0])
  # Candidates of dead hypotheses (score -inf) are never kept, whichever
  # token they carry; every finite one is the same candidate.
  finite = np.isfinite(np.asarray(want[0]))
  for g, w in zip(got[1:], want[1:]):
    np.testing.assert_array_equal(np.asarray(g)[finite], np.asarray(w)[finite])
  assert got[2].dtype == jnp.int32
