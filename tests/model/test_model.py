"""Model invariants: stepwise == scanned, padding never changes a result, gradients."""

import functools

import hypothesis
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax.config import defaults
from nmt_jax.config import validation
from nmt_jax.model import lstm
from nmt_jax.model import seq2seq
from nmt_jax.system import errors
from tests import helpers
from tests.helpers import MAXOUT

# One decoder per distinct path of the forward pass and of a decoding step
# (tests/helpers.py VARIANTS, merged): each score (dot, general, concat,
# location), the query (Luong's current h_t, Bahdanau's previous one), the
# readouts (Luong's W_c with and without attention, maxout with and without a
# context), input feeding of a readout narrower than the LSTM and none, and
# tied embeddings.
DECODERS = [
    ('none', 'dot', 'current', ()),
    ('none', 'dot', 'current', MAXOUT),
    ('global', 'dot', 'current', (('tie_embeddings', True),)),
    ('global', 'general', 'previous', (('readout_size', 6),)),
    # the rnnsearch preset's decoder
    ('global', 'concat', 'previous', MAXOUT + (('input_feeding', False),)),
    ('global', 'location', 'current', ()),
]


def _param_shapes(model):
  """The parameters' tree of `helpers.init_params`, shapes only."""
  src = np.full((2, 6), 5, np.int32)
  return jax.eval_shape(model.init, jax.random.key(0), src, src)['params']


@functools.lru_cache(maxsize=None)
def _setup(kind, score, query, extra=()):
  config = helpers.tiny_config(kind, score, query=query, **dict(extra))
  model = helpers.make_model(config)
  params = helpers.init_params(model, seed=1)
  return (
      model,
      params,
      jax.jit(lambda s, t: model.apply({'params': params}, s, t)[0]),
  )


@pytest.mark.parametrize('kind,score,query,extra', DECODERS)
def test_stepwise_decoding_equals_scanned_forward(kind, score, query, extra):
  model, params, apply = _setup(kind, score, query, extra)
  source, target_in, _ = helpers.random_batch(np.random.default_rng(0), 3, 7, 6)
  logits = apply(source, target_in)
  stepwise = helpers.stepwise_logits(model, params, source, target_in)
  for t in range(target_in.shape[1]):
    np.testing.assert_allclose(stepwise[:, t], logits[:, t], atol=1e-5)


@pytest.mark.parametrize('kind,score,query,extra', DECODERS)
@hypothesis.settings(max_examples=5, deadline=None)
@hypothesis.given(seed=st.integers(0, 2**16))
def test_source_padding_never_changes_logits(kind, score, query, extra, seed):
  _, _, apply = _setup(kind, score, query, extra)
  source, target_in, target_out = helpers.random_batch(
      np.random.default_rng(seed), 3, 5, 5
  )
  # 4 more PAD columns: each row has 4 to 7 PADs after its EOS (the seed
  # draws its length), in one shape (a compile per shape).
  padded = np.pad(source, ((0, 0), (0, 4)))
  mask = (target_out != 0)[..., None]
  np.testing.assert_allclose(
      np.where(mask, apply(padded, target_in), 0),
      np.where(mask, apply(source, target_in), 0),
      atol=1e-5,
  )


def test_rows_are_independent_of_the_batch():
  model, params, _ = _setup('global', 'general', 'current')
  source, target_in, _ = helpers.random_batch(np.random.default_rng(3), 4, 6, 6)
  _, _, apply = _setup('global', 'general', 'current')
  full = apply(source, target_in)
  single = apply(source[2:3], target_in[2:3])
  np.testing.assert_allclose(single[0], full[2], atol=1e-5)


@pytest.mark.parametrize(
    'bridge,bidirectional',
    [('dense', 'all'), ('copy', 'none'), ('zero', 'bottom')],
)
def test_gradients_are_finite_and_reach_every_parameter(bridge, bidirectional):
  config = helpers.tiny_config(
      'global',
      'concat',
      bridge=bridge,
      bidirectional=bidirectional,
      num_encoder_layers=2,
      num_decoder_layers=2,
      output_hidden_size=12,
  )
  model = helpers.make_model(config)
  params = helpers.init_params(model)
  source, target_in, target_out = helpers.random_batch(
      np.random.default_rng(0), 3, 6, 6
  )

  def loss(p):
    logits, _ = model.apply({'params': p}, source, target_in)
    return -jnp.sum(
        jax.nn.log_softmax(logits)
        * jax.nn.one_hot(target_out, logits.shape[-1])
    )

  grads = jax.jit(jax.grad(loss))(params)
  for path, g in jax.tree_util.tree_flatten_with_path(grads)[0]:
    assert np.all(np.isfinite(g)), path
    if bridge == 'zero' and 'bridge' in jax.tree_util.keystr(path):
      continue
    assert np.any(g != 0), f'no gradient reaches {jax.tree_util.keystr(path)}'


def test_the_bridge_lines_up_the_top_layers():
  """With fewer decoder layers, the decoder starts from the encoder's top
  layers (it started from the bottom ones and never read the top)."""
  lined_up = lambda enc, dec: [
      seq2seq.bridged_layer(i, enc, dec) for i in range(dec)
  ]
  assert lined_up(2, 2) == [0, 1]
  assert lined_up(4, 2) == [2, 3]
  assert lined_up(2, 3) == [0, 0, 1]
  config = helpers.tiny_config(num_encoder_layers=2, num_decoder_layers=1)
  model = helpers.make_model(config)
  params = helpers.init_params(model)
  source = helpers.random_batch(np.random.default_rng(0), 2, 5, 5)[0]
  encode = jax.jit(
      lambda p: model.apply(
          {'params': p}, source, method=seq2seq.Seq2Seq.encode
      )[1]
  )
  moved = jax.tree_util.tree_map(lambda x: x, params)
  moved['encoder']['layer_1'] = jax.tree_util.tree_map(
      lambda x: x + 0.5, params['encoder']['layer_1']
  )
  c, h = encode(params).lstm[0]
  c_moved, h_moved = encode(moved).lstm[0]
  assert np.abs(np.asarray(h_moved) - np.asarray(h)).max() > 1e-3
  assert np.abs(np.asarray(c_moved) - np.asarray(c)).max() > 1e-3


# Parameter paths are the checkpoint format: a workdir trained before a
# refactoring must still restore after it.
SHARED_PARAMS = {
    'decoder/bridge_c_0/bias',
    'decoder/bridge_c_0/kernel',
    'decoder/bridge_h_0/bias',
    'decoder/bridge_h_0/kernel',
    'decoder/cell/kernel_0',
    'decoder/embed/embedding',
    'decoder/input_proj/bias',
    'decoder/input_proj/kernel',
    'decoder/output/bias',
    'decoder/output/kernel',
    'encoder/embed/embedding',
    'encoder/layer_0/backward/bias',
    'encoder/layer_0/backward/input_kernel',
    'encoder/layer_0/backward/recurrent_kernel',
    'encoder/layer_0/forward/bias',
    'encoder/layer_0/forward/input_kernel',
    'encoder/layer_0/forward/recurrent_kernel',
}
CONCAT = {
    'scorer/key_proj/kernel',
    'scorer/query_proj/kernel',
    'scorer/v/kernel',
}
KIND_PARAMS = {
    'none': set(),
    'global': CONCAT,
    'local_m': CONCAT,
    'local_p': CONCAT | {'position_hidden/kernel', 'position_out/kernel'},
    'flexible': (
        CONCAT
        | {'strength_hidden/kernel', 'strength_out/bias', 'strength_out/kernel'}
    ),
    'memory': {'decoder_scores/kernel', 'encoder_scores/kernel'},
}


@pytest.mark.parametrize('kind', sorted(KIND_PARAMS))
def test_parameter_paths_are_stable(kind):
  config = helpers.tiny_config(kind, 'concat')
  params = _param_shapes(helpers.make_model(config))
  paths = {
      '/'.join(str(key.key) for key in path)
      for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]
  }
  expected = SHARED_PARAMS | {
      f'decoder/attention/{p}' for p in KIND_PARAMS[kind]
  }
  if kind != 'none':
    expected.add('decoder/combine/kernel')  # W_c
  assert paths == expected


@pytest.mark.parametrize('kind', ['global', 'none'])
def test_bahdanau_maxout_readout_against_numpy(kind):
  """maxout_2(U_o q + V_o E y + C_o c): the max of units 2j and 2j+1."""
  config = helpers.tiny_config(
      kind,
      'concat',
      query='previous',
      readout='bahdanau_maxout',
      readout_size=5,
  )
  model = helpers.make_model(config)
  params = helpers.init_params(model)
  rng = np.random.default_rng(0)
  context, h, query = (
      rng.normal(size=(3, 16)).astype(np.float32) for _ in range(3)
  )
  emb = rng.normal(size=(3, 16)).astype(np.float32)
  out = model.apply(
      {'params': params},
      context,
      h,
      query,
      emb,
      method=lambda m, c, h, q, e: m.decoder.readout(
          c, h, q, m.decoder.token_features(e)
      ),
  )
  p = params['decoder']
  assert 'combine' not in p
  pre = (
      query @ p['readout_state']['kernel'] + emb @ p['readout_input']['kernel']
  )
  if kind != 'none':
    pre = pre + context @ p['readout_context']['kernel']
  assert pre.shape == (3, 10)
  expected = np.maximum(pre[:, 0::2], pre[:, 1::2])
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_readout_size_sets_the_one_layer_before_the_softmax():
  # The rnnsearch/shu_de_en decoder: one readout layer of readout_size units.
  config = helpers.tiny_config(
      'global',
      'concat',
      query='previous',
      input_feeding=False,
      readout_size=6,
  )
  params = _param_shapes(helpers.make_model(config))['decoder']
  assert params['combine']['kernel'].shape == (32, 6)  # [c_t; h_t] -> 6
  assert params['output']['kernel'].shape == (6, helpers.VOCAB)
  assert 'output_hidden' not in params


def test_tied_embeddings_share_one_parameter():
  config = helpers.tiny_config('global', 'general', tie_embeddings=True)
  model = helpers.make_model(config)
  params = helpers.init_params(model)
  decoder = params['decoder']
  assert 'output' not in decoder and decoder['output_bias'].shape == (
      helpers.VOCAB,
  )
  htilde = np.random.default_rng(0).normal(size=(3, 16)).astype(np.float32)
  logits = model.apply(
      {'params': params}, htilde, method=lambda m, h: m.decoder.logits(h)
  )
  expected = htilde @ np.asarray(decoder['embed']['embedding']).T
  np.testing.assert_allclose(
      logits, expected + decoder['output_bias'], rtol=1e-5, atol=1e-6
  )
  # The softmax layer's gradient reaches the (shared) embedding matrix.
  source, target_in, target_out = helpers.random_batch(
      np.random.default_rng(1), 3, 6, 6
  )

  def output_loss(embedding):
    tied = jax.tree_util.tree_map(lambda x: x, params)
    tied['decoder']['embed']['embedding'] = embedding
    logits, _ = model.apply({'params': tied}, source, target_in)
    return jnp.sum(jax.nn.log_softmax(logits)[..., 4])

  grad = jax.jit(jax.grad(output_loss))(decoder['embed']['embedding'])
  # The softmax layer reads row 4 of the shared matrix: its gradient gets there.
  assert np.any(np.asarray(grad[4]) != 0)


def test_tied_embeddings_need_a_matching_width():
  config = helpers.tiny_config('global', 'general')
  config.model.tie_embeddings = True
  config.model.readout_size = 8
  with pytest.raises(errors.ConfigError, match='model.tie_embeddings'):
    validation.resolve(config)


def test_no_attention_needs_a_bridge_to_read_the_source():
  config = defaults.get_config('tiny')
  config.model.attention.kind, config.model.bridge = 'none', 'zero'
  with pytest.raises(errors.ConfigError, match='never lets the decoder read'):
    validation.resolve(config)
  helpers.tiny_config('global', 'general', bridge='zero')  # attention reads it


def test_decoder_dropout_masks_drop_their_rate():
  config = helpers.tiny_config('global', dropout=0.3, num_decoder_layers=3)
  model = helpers.make_model(config)
  params = helpers.init_params(model)
  source, target_in, _ = helpers.random_batch(
      np.random.default_rng(0), 64, 9, 12
  )
  rngs = {'dropout': jax.random.key(5)}
  masks = model.apply(
      {'params': params},
      12,
      64,
      True,
      rngs=rngs,
      method=lambda m, *a: m.decoder.dropout_masks(*a),
  )
  assert sorted(masks) == ['htilde', 'layer_1', 'layer_2']
  for keep in masks.values():
    assert keep.shape == (12, 64, 16) and keep.dtype == jnp.bool_
    assert abs(float(jnp.mean(keep)) - 0.7) < 0.02
  assert (
      model.apply(
          {'params': params},
          12,
          64,
          False,
          method=lambda m, *a: m.decoder.dropout_masks(*a),
      )
      is None
  )
  # Teacher forcing drops htilde at the rate (tanh is never exactly 0).
  features = jax.jit(
      lambda s, t: model.apply(
          {'params': params},
          s,
          t,
          True,
          rngs=rngs,
          method=seq2seq.Seq2Seq.features,
      )[0]
  )
  htilde = features(source, target_in)
  assert abs(float(jnp.mean(htilde == 0)) - 0.3) < 0.02


def test_dropout_scales_what_it_keeps():
  x = jnp.arange(1.0, 7.0).reshape(2, 3)
  keep = jnp.array([[True, False, True], [False, True, True]])
  expected = np.where(np.asarray(keep), np.asarray(x) / 0.75, 0.0)
  np.testing.assert_allclose(lstm.dropout(x, keep, 0.25), expected)
  assert lstm.dropout(x, None, 0.25) is x
