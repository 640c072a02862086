"""The draws of sampling (search.sample_search): keys and words.

Pure functions: `sample_keys` gives every sample of every sentence a PRNG key
of its own, made from the sentence's tokens, and `sample_tokens` draws one
word per row from a step's log-probabilities (temperature, top-k, nucleus).
"""

import jax
import jax.numpy as jnp

from nmt_jax.data.vocab import PAD

NEG_INF = -jnp.inf


def sample_keys(seed: int, source, samples: int):
  """[B * samples] PRNG keys, row b * samples + j for sample j of sentence b.

  Sample j of a sentence gets the key of `seed` with the sentence's token ids
  (PAD skipped) and then j folded in: the same key whatever the batch, the
  row, the padding or the number of samples (two identical sources get the
  same samples). Threefry, whatever JAX's default generator.
  """
  batch = source.shape[0]
  keys = jnp.broadcast_to(jax.random.key(seed, impl='threefry2x32'), (batch,))
  fold = jax.vmap(jax.random.fold_in)

  def add_token(keys, tokens):  # keys [B], tokens [B]
    return jnp.where(tokens != PAD, fold(keys, tokens), keys), None

  keys, _ = jax.lax.scan(add_token, keys, source.T)
  keys = jnp.repeat(keys, samples)
  return fold(keys, jnp.tile(jnp.arange(samples), batch))


def sample_tokens(
    log_probs, keys, temperature: float, top_k: int, top_p: float
):
  """One word per row drawn from log_probs [N, V] with keys [N] -> [N].

  The distribution is softmax(log_probs / temperature), cut to its top_k
  most probable words (0: all), then to its nucleus (Holtzman et al. 2020):
  the fewest most probable words whose probability, in the top-k
  distribution, reaches top_p (1: all), and renormalised. A word at -inf
  (`restrict`) is never drawn.
  """
  logits = log_probs / temperature
  words = None  # the word id of each column of `logits`; None: all
  vocab = logits.shape[-1]
  if 0 < top_k < vocab or top_p < 1:
    # Sorted, most probable first (ties: the lower id first).
    logits, words = jax.lax.top_k(logits, min(top_k or vocab, vocab))
  if top_p < 1:
    probs = jax.nn.softmax(logits, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs  # 0 for the most probable
    logits = jnp.where(before < top_p, logits, NEG_INF)
  drawn = jax.vmap(jax.random.categorical)(keys, logits)
  if words is not None:
    drawn = jnp.take_along_axis(words, drawn[:, None], -1)[:, 0]
  return drawn.astype(jnp.int32)
