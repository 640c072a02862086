"""model.gate_table: layer 0's input gates looked up in a per-word table give
the plain projection's losses, gradients and decodings."""

import jax
import jax.extend
import numpy as np
import pytest

from nmt_jax.model import lstm
from nmt_jax.system import errors
from tests import helpers
from tests.helpers import MAXOUT


def _loss_and_grads(gate_table, kind, score='general', dropout=0.0, **model):
  return helpers.loss_and_grads(
      helpers.tiny_config(
          kind, score, dropout=dropout, gate_table=gate_table, **model
      )
  )


def _gate_projections(jaxpr, rows):
  """dot_generals producing [rows, ...]-position gates (time-major [T, B])."""
  found = []
  for eqn in jaxpr.eqns:
    shape = tuple(eqn.outvars[0].aval.shape) if eqn.outvars else ()
    if eqn.primitive.name == 'dot_general' and shape[:2] in rows:
      found.append(shape)
    for sub in jax.extend.core.jaxprs_in_params(eqn.params):
      found += _gate_projections(sub, rows)
  return found


def _gates_over_positions(jaxpr):
  """The gate projections over source [7, 3] or target [6, 3] positions."""
  found = _gate_projections(jaxpr, {(7, 3), (6, 3)})
  hidden = helpers.tiny_config().model.hidden_size
  return [s for s in found if s[-1] in (2 * hidden, 4 * hidden)]


# The table replaces layer 0's input projections, so what matters is what
# reaches layer 0 and the embeddings: the query timing (the context enters
# the LSTM with 'previous'), input feeding and the readout's width, the
# maxout readout (its V_o E y is a column of the table), tied embeddings,
# and flexible attention (its strength network reads the embeddings too).
# The score and the other kinds' attention do not; they are left out (each
# case is a compile of two backward passes), and the cases of
# tests/helpers.py VARIANTS that differ only there are merged.
TABLE_VARIANTS = [
    (
        'global',
        'general',
        'current',
        (('bidirectional', 'all'), ('tie_embeddings', True)),
    ),
    ('flexible', 'general', 'current', (('bidirectional', 'all'),)),
    ('global', 'concat', 'previous', (('readout_size', 6),)),
    # the rnnsearch preset's decoder
    ('global', 'concat', 'previous', MAXOUT + (('input_feeding', False),)),
    ('none', 'dot', 'current', ()),
]


@pytest.mark.parametrize('kind,score,query,extra', TABLE_VARIANTS)
def test_table_gives_the_projections_loss_and_gradients(
    kind, score, query, extra
):
  model = dict(extra, query=query)
  table_grad, params = _loss_and_grads('on', kind, score, **model)
  plain_grad, _ = _loss_and_grads('off', kind, score, **model)
  table, plain = (jax.jit(g).trace(params) for g in (table_grad, plain_grad))
  loss_a, grads_a = table.lower().compile()(params)
  loss_b, grads_b = plain.lower().compile()(params)
  np.testing.assert_allclose(loss_a, loss_b, rtol=1e-6)
  flat_b = jax.tree_util.tree_leaves(grads_b)
  for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(grads_a), flat_b):
    np.testing.assert_allclose(
        x, y, rtol=1e-5, atol=1e-6, err_msg=jax.tree_util.keystr(path)
    )
  # 'on' replaces the gate projections over positions by the table, 'off'
  # keeps them.
  assert not _gates_over_positions(table.jaxpr)
  assert _gates_over_positions(plain.jaxpr)


def test_auto_takes_the_table_for_a_small_vocabulary():
  grad, params = _loss_and_grads('auto', 'global', bidirectional='all')
  jaxpr = jax.make_jaxpr(grad)(params).jaxpr
  # 'auto': 10 words < 18 and 21 positions: the table.
  gates = _gates_over_positions(jaxpr)
  assert not gates, gates


def test_auto_uses_the_table_only_where_it_is_the_smaller_gemm():
  config = helpers.tiny_config(dropout=0.0).model
  assert lstm.uses_gate_table(config, 10, 11, train=True)
  assert not lstm.uses_gate_table(config, 10, 10, train=True)
  with_dropout = helpers.tiny_config(dropout=0.2).model
  assert not lstm.uses_gate_table(with_dropout, 10, 100, train=True)
  assert lstm.uses_gate_table(with_dropout, 10, 100, train=False)


def test_table_and_projection_encode_alike_outside_training():
  source, _, _ = helpers.random_batch(np.random.default_rng(4), 4, 9, 9)
  outputs = []
  params = None
  for mode in ('on', 'off'):
    config = helpers.tiny_config('global', dropout=0.0, gate_table=mode)
    net = helpers.make_model(config)
    if params is None:  # the same for both (the table is computed from them)
      params = helpers.init_params(net, seed=5)
    encode = jax.jit(
        lambda p, s, net=net: net.apply({'params': p}, s, method=net.encode)
    )
    outputs.append(jax.tree_util.tree_leaves(encode(params, source)))
  for a, b in zip(*outputs):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_on_with_dropout_is_a_config_error():
  with pytest.raises(errors.ConfigError, match='model.gate_table'):
    helpers.tiny_config(dropout=0.2, gate_table='on')
