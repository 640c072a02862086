"""The RNN regularisers (model.layer_norm, recurrent_dropout, residual,
word_dropout): the cells against NumPy, stepwise == scanned, padding
invariance, hoisted gradients == autodiff, training-only switches, checks.

The encoder recurrence's custom VJP with layer normalisation and recurrent
dropout is checked against autodiff in tests/model/test_lstm.py.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax.config import defaults
from nmt_jax.config import validation
from nmt_jax.model import decoder_cell
from nmt_jax.model import lstm
from nmt_jax.model import seq2seq
from nmt_jax.system import errors
from nmt_jax.training import steps
from nmt_jax.workdir import run_config
from tests import helpers
from tests.model import test_hoisting

# (kind, score, query, model fields): layer normalisation with step inputs in
# layer 0 (the context, input feeding) and residual layers; without any (no
# input kernel in layer 0) over a bidirectional two-layer encoder; residual
# connections alone.
SETUPS = [
    (
        'global',
        'concat',
        'previous',
        (('layer_norm', True), ('num_decoder_layers', 2), ('residual', 1)),
    ),
    (
        'none',
        'dot',
        'current',
        (
            ('layer_norm', True),
            ('residual', 1),
            ('num_encoder_layers', 2),
            ('num_decoder_layers', 2),
            ('bidirectional', 'all'),
        ),
    ),
    (
        'global',
        'general',
        'current',
        (('residual', 1), ('num_encoder_layers', 2), ('num_decoder_layers', 2)),
    ),
]


def _np_layer_norm(x, scale, bias, eps=1e-5):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * scale + bias


def _np_update(c, gates, cell_norm):
  """Ba et al.'s LSTM update: (c', o * tanh(LN(c')))."""
  sigmoid = lambda z: 1 / (1 + np.exp(-z))
  i, f, g, o = np.split(gates, 4, axis=-1)
  c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
  return c, sigmoid(o) * np.tanh(_np_layer_norm(c, *cell_norm))


def _perturbed(params, seed):
  """params moved off their init (LN gains 1, biases 0) so every one shows."""
  leaves, treedef = jax.tree_util.tree_flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree_util.tree_unflatten(
      treedef,
      [
          x + 0.3 * jax.random.normal(k, x.shape, x.dtype)
          for x, k in zip(leaves, keys)
      ],
  )


def _norm(p, name):
  return np.asarray(p[f'{name}_scale'], np.float64), np.asarray(
      p[f'{name}_bias'], np.float64
  )


def test_layer_norm_lstm_against_numpy():
  rng = np.random.default_rng(0)
  t, b, h = 5, 3, 6
  x = rng.normal(size=(t, b, 4)).astype(np.float32)
  lengths = np.array([5, 2, 4])
  layer = lstm.LSTM(h, layer_norm=True)
  params = _perturbed(
      layer.init(jax.random.key(0), x, lengths)['params'], seed=1
  )
  out, (c_last, h_last) = jax.jit(layer.apply)({'params': params}, x, lengths)
  p = jax.tree_util.tree_map(lambda v: np.asarray(v, np.float64), params)
  c = hid = np.zeros((b, h))
  for step in range(t):
    gates = (
        _np_layer_norm(x[step] @ p['input_kernel'], *_norm(p, 'input_norm'))
        + _np_layer_norm(
            hid @ p['recurrent_kernel'], *_norm(p, 'recurrent_norm')
        )
        + p['bias']
    )
    c_new, h_new = _np_update(c, gates, _norm(p, 'cell_norm'))
    valid = (step < lengths)[:, None]
    np.testing.assert_allclose(
        np.where(valid, out[step], 0), np.where(valid, h_new, 0), atol=2e-5
    )
    c, hid = np.where(valid, c_new, c), np.where(valid, h_new, hid)
  np.testing.assert_allclose(c_last, c, atol=2e-5)
  np.testing.assert_allclose(h_last, hid, atol=2e-5)


def test_layer_norm_decoder_cell_against_numpy():
  """Two layers: layer 0 normalises its embedding gates plus its step
  inputs' product, layer 1 is residual (adds its input to its output)."""
  rng = np.random.default_rng(1)
  b, h, e = 3, 4, 5
  cell = decoder_cell.StackedLSTMCell(
      h, 2, dropout=0.0, forget_bias=1.0, layer_norm=True, residual=1
  )
  carries = tuple(
      tuple(rng.normal(size=(b, h)).astype(np.float32) for _ in range(2))
      for _ in range(2)
  )
  x_gates = rng.normal(size=(b, 4 * h)).astype(np.float32)
  extra = [rng.normal(size=(b, e)).astype(np.float32)]
  params = _perturbed(
      cell.init(jax.random.key(0), carries, x_gates, extra)['params'], seed=2
  )
  new, output = cell.apply({'params': params}, carries, x_gates, extra)
  p = jax.tree_util.tree_map(lambda v: np.asarray(v, np.float64), params)
  below = extra[0]
  for layer in range(2):
    c, hid = carries[layer]
    x_part = below @ p[f'input_kernel_{layer}']
    if layer == 0:
      x_part = x_part + x_gates
    gates = (
        _np_layer_norm(x_part, *_norm(p, f'input_norm_{layer}'))
        + _np_layer_norm(
            hid @ p[f'recurrent_kernel_{layer}'],
            *_norm(p, f'recurrent_norm_{layer}'),
        )
        + p[f'bias_{layer}']
    )
    c_new, h_new = _np_update(c, gates, _norm(p, f'cell_norm_{layer}'))
    np.testing.assert_allclose(new[layer][0], c_new, atol=2e-5)
    np.testing.assert_allclose(new[layer][1], h_new, atol=2e-5)
    below = h_new + (below if layer else 0)
  np.testing.assert_allclose(output, below, atol=2e-5)


@functools.lru_cache(maxsize=None)
def _setup(kind, score, query, extra):
  config = helpers.tiny_config(kind, score, query=query, **dict(extra))
  model = helpers.make_model(config)
  params = _perturbed(helpers.init_params(model, seed=1), seed=4)
  return (
      model,
      params,
      jax.jit(lambda s, t: model.apply({'params': params}, s, t)[0]),
  )


@pytest.mark.parametrize('kind,score,query,extra', SETUPS)
def test_stepwise_decoding_equals_scanned_forward(kind, score, query, extra):
  model, params, apply = _setup(kind, score, query, extra)
  source, target_in, _ = helpers.random_batch(np.random.default_rng(0), 3, 7, 6)
  logits = apply(source, target_in)
  stepwise = helpers.stepwise_logits(model, params, source, target_in)
  # Also from the decoders' per-word gate table (layer 0's embedding gates;
  # without a bias under layer normalisation).
  table = model.apply({'params': params}, method=seq2seq.Seq2Seq.token_table)
  tabled = helpers.stepwise_logits(model, params, source, target_in, table)
  for t in range(target_in.shape[1]):
    np.testing.assert_allclose(stepwise[:, t], logits[:, t], atol=1e-5)
    np.testing.assert_allclose(tabled[:, t], logits[:, t], atol=1e-5)


@pytest.mark.parametrize('kind,score,query,extra', SETUPS)
def test_padding_never_changes_logits(kind, score, query, extra):
  _, _, apply = _setup(kind, score, query, extra)
  source, target_in, target_out = helpers.random_batch(
      np.random.default_rng(1), 3, 7, 6
  )
  # 3 more PAD columns on both sides: one compile.
  padded = apply(
      np.pad(source, ((0, 0), (0, 3))), np.pad(target_in, ((0, 0), (0, 3)))
  )
  mask = (target_out != 0)[..., None]
  np.testing.assert_allclose(
      np.where(mask, padded[:, :6], 0),
      np.where(mask, apply(source, target_in), 0),
      atol=1e-5,
  )


# Every switch at once, dropout included (the same masks both ways), in a
# decoder with and without step inputs in layer 0.
ALL_ON = (
    ('layer_norm', True),
    ('residual', 1),
    ('recurrent_dropout', 0.3),
    ('word_dropout', 0.2),
    ('num_decoder_layers', 2),
)


@pytest.mark.parametrize(
    'kind,query', [('global', 'previous'), ('none', 'current')]
)
def test_hoisted_gradients_equal_autodiffs(kind, query):
  runs = []
  for hoist in (False, True):
    config = helpers.tiny_config(
        kind,
        'general',
        query=query,
        dropout=0.3,
        hoist_weight_grads=hoist,
        **dict(ALL_ON),
    )
    grad, params = helpers.loss_and_grads(config)
    traced = jax.jit(grad).trace(params)
    runs.append(traced.lower().compile()(params))
  # Hoisted, no loop computes a kernel's gradient (the probes reach the
  # split kernels).
  cell = params['decoder']['cell']
  kernels = {v.shape for k, v in cell.items() if 'kernel' in k}
  assert len(kernels) == 2 if kind == 'global' else 1, kernels
  assert not kernels & set(test_hoisting.loop_dot_shapes(traced.jaxpr))
  (loss_a, grads_a), (loss_b, grads_b) = runs
  np.testing.assert_allclose(loss_a, loss_b, rtol=1e-6)
  assert ('input_kernel_0' in cell) == (kind == 'global')
  for (path, x), y in zip(
      jax.tree_util.tree_leaves_with_path(grads_a),
      jax.tree_util.tree_leaves(grads_b),
  ):
    name = jax.tree_util.keystr(path)
    # Float32 sums in another order: near-zero entries of an array are
    # compared on the array's scale (a wrong gradient is off by far more).
    scale = float(np.abs(y).max())
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5 * scale, err_msg=name)
    assert np.all(np.isfinite(x)) and np.any(x != 0), name


def test_dropouts_act_in_training_only():
  """recurrent_dropout and word_dropout leave evaluation as without them
  (same parameters) and change the training loss."""
  source, target_in, _ = helpers.random_batch(np.random.default_rng(2), 3, 7, 6)
  logits, losses = {}, {}
  for on in (False, True):
    fields = dict(recurrent_dropout=0.5, word_dropout=0.5) if on else {}
    config = helpers.tiny_config('global', dropout=0.0, **fields)
    model = helpers.make_model(config)
    params = helpers.init_params(model)
    logits[on] = model.apply({'params': params}, source, target_in)[0]
    grad, params = helpers.loss_and_grads(config)
    losses[on] = jax.jit(grad)(params)[0]
  np.testing.assert_array_equal(logits[True], logits[False])
  assert abs(float(losses[True]) - float(losses[False])) > 1e-3


def test_recurrent_dropout_masks_are_locked_over_time():
  config = helpers.tiny_config(
      'global', dropout=0.0, recurrent_dropout=0.4, num_decoder_layers=2
  )
  model = helpers.make_model(config)
  params = helpers.init_params(model)
  masks = model.apply(
      {'params': params},
      5,
      64,
      True,
      rngs={'dropout': jax.random.key(0)},
      method=lambda m, *a: m.decoder.dropout_masks(*a),
  )
  assert sorted(masks) == ['recurrent_0', 'recurrent_1']
  for keep in masks.values():
    assert keep.shape == (5, 64, 16)
    np.testing.assert_array_equal(keep, np.broadcast_to(keep[0], keep.shape))
    assert abs(float(jnp.mean(keep)) - 0.6) < 0.05
  assert not np.array_equal(masks['recurrent_0'], masks['recurrent_1'])
  # The encoder's: h's multiplier, keep / (1 - rate).
  keep = jax.jit(
      lambda key: lstm.LSTM(4, recurrent_dropout=0.4).apply(
          {},
          0.4,
          (64, 16),
          jnp.float32,
          True,
          rngs={'dropout': key},
          method=lambda m, *a: lstm.recurrent_keep(m, *a),
      )
  )(jax.random.key(1))
  assert set(np.unique(np.asarray(keep))) == {0.0, np.float32(1 / 0.6)}


def test_word_dropout_zeroes_whole_words_unscaled():
  x = jnp.asarray(
      np.random.default_rng(3).normal(size=(40, 50, 6)), jnp.float32
  )
  out = lstm.drop_words(jax.random.key(0), x, 0.25)
  dropped = np.all(np.asarray(out) == 0, axis=-1)
  kept = np.all(np.asarray(out) == np.asarray(x), axis=-1)
  assert np.all(dropped | kept)
  assert abs(dropped.mean() - 0.25) < 0.03
  assert lstm.drop_words(None, x, 0.0) is x
  # The gate tables hold undropped embeddings: none in training with it.
  config = helpers.tiny_config(dropout=0.0, word_dropout=0.1)  # 'auto'
  assert not lstm.uses_gate_table(config.model, 10, 100, train=True)
  assert lstm.uses_gate_table(config.model, 10, 100, train=False)


@pytest.mark.parametrize(
    'field,value,message',
    [
        ('recurrent_dropout', 1.0, 'must be below 1'),
        ('word_dropout', -0.1, 'must be >= 0'),
        ('residual', -1, 'must be >= 0'),
        ('residual', 2, 'is no layer of a stack'),
    ],
)
def test_bad_values_are_one_line_config_errors(field, value, message):
  config = defaults.get_config('tiny')
  config.model.num_encoder_layers = config.model.num_decoder_layers = 2
  config.model[field] = value
  with pytest.raises(errors.ConfigError, match=f'model.{field}=.*{message}'):
    validation.resolve(config)
  config = defaults.get_config('tiny')
  config.model.gate_table, config.model.dropout = 'on', 0.0
  config.model.word_dropout = 0.1
  with pytest.raises(errors.ConfigError, match='model.word_dropout=0.1'):
    validation.resolve(config)


def test_identity_has_the_parameters_switches_not_the_dropouts():
  fields = run_config.identity_fields(defaults.get_config('tiny'))
  assert {'model.layer_norm', 'model.residual'} <= set(fields)
  assert not {'model.recurrent_dropout', 'model.word_dropout'} & set(fields)


def test_uniform_init_keeps_layer_norm_gains_near_one():
  params = {'cell_norm_scale': jnp.ones(50), 'cell_norm_bias': jnp.zeros(50)}
  drawn = steps.uniform_init(params, jax.random.key(0), 0.1)
  assert np.all(np.abs(np.asarray(drawn['cell_norm_scale']) - 1) < 0.1)
  assert np.any(np.asarray(drawn['cell_norm_scale']) != 1)
  assert np.all(np.abs(np.asarray(drawn['cell_norm_bias'])) < 0.1)


def test_switches_off_keep_the_models_values_from_before_they_existed():
  """With every switch off, a 2-layer model starts from the parameters and
  computes the training loss (dropout on) it did before the switches were
  added: the values below were computed then. Parameters draw their initial
  values in the order they are created, so a reordered `self.param` shows
  here, as a shifted dropout stream does."""
  config = helpers.tiny_config(
      'global',
      hidden_size=16,
      embed_size=16,
      dropout=0.2,
      num_encoder_layers=2,
      num_decoder_layers=2,
  )
  loss_and_grads, params = helpers.loss_and_grads(config)
  total = sum(
      np.sum(np.abs(np.asarray(x)), dtype=np.float64)
      for x in jax.tree_util.tree_leaves(params)
  )
  np.testing.assert_allclose(total, 1942.098370331456, rtol=1e-6)
  loss, _ = jax.jit(loss_and_grads)(params)
  np.testing.assert_allclose(float(loss), 16.148740768432617, rtol=1e-5)
