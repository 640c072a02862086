"""Small models and batches shared by the tests."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from nmt_jax.config import defaults
from nmt_jax.config import validation
from nmt_jax.data.vocab import BOS
from nmt_jax.data.vocab import EOS
from nmt_jax.data.vocab import PAD
from nmt_jax.model import seq2seq
from nmt_jax.training import steps

VOCAB = 10  # 4 reserved ids + 6 symbols, as the 'tiny' preset
# Decoders the model-level tests run: (kind, score, query, model fields).
MAXOUT = (('readout', 'bahdanau_maxout'),)
VARIANTS = [
    ('none', 'dot', 'current', ()),
    ('global', 'dot', 'current', ()),
    ('global', 'general', 'current', ()),
    ('global', 'concat', 'previous', ()),
    ('global', 'location', 'current', ()),
    ('global', 'general', 'previous', ()),
    ('global', 'concat', 'previous', MAXOUT),
    ('none', 'dot', 'current', MAXOUT),
    # input feeding of a readout narrower than the LSTM
    ('global', 'general', 'current', (('readout_size', 6),)),
    # the rnnsearch preset's decoder
    ('global', 'concat', 'previous', (('input_feeding', False),)),
    ('global', 'general', 'current', (('tie_embeddings', True),)),
]


def tiny_config(kind='global', score='general', **model):
  config = defaults.get_config('tiny')
  config.model.attention.kind = kind
  config.model.attention.score = score
  for key, value in model.items():
    config.model[key] = value
  return validation.resolve(config)


def make_model(config):
  return seq2seq.Seq2Seq(config.model, VOCAB, VOCAB)


def init_params(model, seed=0, length=6):
  src = np.full((2, length), 5, np.int32)
  return model.init(jax.random.key(seed), src, src)['params']


def random_batch(rng, batch, src_len, tgt_len, min_len=1):
  """Source/target with random lengths, EOS-terminated, PAD after."""
  source = np.full((batch, src_len), PAD, np.int32)
  target_out = np.full((batch, tgt_len), PAD, np.int32)
  for b in range(batch):
    n = rng.integers(min_len, src_len)  # tokens before EOS
    source[b, :n] = rng.integers(4, VOCAB, n)
    source[b, n] = EOS
    m = rng.integers(min_len, tgt_len)
    target_out[b, :m] = rng.integers(4, VOCAB, m)
    target_out[b, m] = EOS
  target_in = np.concatenate(
      [np.full((batch, 1), BOS, np.int32), target_out[:, :-1]], 1
  )
  target_in[target_out == PAD] = PAD
  return source, target_in, target_out


def loss_and_grads(config):
  """(jax.value_and_grad of a training loss, params) for a tiny model.

  The loss is summed over a fixed random batch (3 sentences) with dropout
  drawn from a fixed key, so two configs with the same parameters can be
  compared value for value.
  """
  net = make_model(config)
  params = init_params(net, seed=2)
  source, target_in, target_out = random_batch(
      np.random.default_rng(1), 3, 7, 6
  )

  def loss(p):
    logits, _ = net.apply(
        {'params': p},
        source,
        target_in,
        train=True,
        rngs={'dropout': jax.random.key(3)},
    )
    per_token = optax.softmax_cross_entropy_with_integer_labels(
        logits, target_out
    )
    return jnp.sum(per_token * (target_out != 0))

  return jax.value_and_grad(loss), params


def stepwise_logits(model, params, source, target_in, table=None):
  """Logits [B, T, V] of decoding target_in [B, T] one token at a time:
  Seq2Seq.encode, then decode_step per token (with `table`, the decoders'
  per-word table of Seq2Seq.token_table)."""
  encode = jax.jit(
      lambda s: model.apply(
          {'params': params}, s, method=seq2seq.Seq2Seq.encode
      )
  )
  step = jax.jit(
      lambda state, cache, tokens, table: model.apply(
          {'params': params},
          state,
          cache,
          tokens,
          table=table,
          method=seq2seq.Seq2Seq.decode_step,
      )
  )
  cache, state = encode(source)
  logits = []
  for t in range(target_in.shape[1]):
    state, step_logits, _ = step(state, cache, target_in[:, t], table)
    logits.append(step_logits)
  return np.stack(logits, axis=1)


def jitted_train_step(setup, config=None):
  """steps.train_step of a train.build `setup` under `config` (its own)."""
  return jax.jit(
      functools.partial(
          steps.train_step,
          model=setup.model,
          optimizer=setup.optimizer,
          config=setup.config if config is None else config,
      )
  )
