"""Hoisted kernel gradients (nmt_jax/model/hoisting.py) and unrolled training
loops (model.scan_unroll) give plain autodiff's loss and gradients."""

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax import attention
from nmt_jax.model import hoisting
from nmt_jax.model import lstm
from tests import helpers
from tests.helpers import MAXOUT


def _loss_and_grads(kind, score='general', **model):
  return helpers.loss_and_grads(
      helpers.tiny_config(kind, score, dropout=0.3, **model)
  )


def _run(kind, score='general', **model):
  """(loss, gradients) of one jitted backward pass, and its jaxpr."""
  grad, params = _loss_and_grads(kind, score, **model)
  traced = jax.jit(grad).trace(params)
  return traced.lower().compile()(params), traced.jaxpr


def _assert_same_run(a, b, exact_loss=False):
  (loss_a, grads_a), (loss_b, grads_b) = a, b
  # Same forward, dropout masks included.
  if exact_loss:
    np.testing.assert_array_equal(loss_a, loss_b)
  np.testing.assert_allclose(loss_a, loss_b, rtol=1e-6)
  flat_a = jax.tree_util.tree_leaves_with_path(grads_a)
  flat_b = jax.tree_util.tree_leaves(grads_b)
  for (path, x), y in zip(flat_a, flat_b):
    np.testing.assert_allclose(
        x, y, rtol=1e-5, atol=1e-6, err_msg=jax.tree_util.keystr(path)
    )


def _scan_unrolls(jaxpr):
  """The unroll of every scan in a jaxpr, nested ones included."""
  unrolls = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'scan':
      unrolls.append(eqn.params['unroll'])
    for sub in jax.extend.core.jaxprs_in_params(eqn.params):
      unrolls += _scan_unrolls(sub)
  return unrolls


@pytest.mark.parametrize('kind', attention.kinds())
def test_hoisted_unrolled_gradients_equal_plain_autodiffs_for_every_kind(kind):
  """Both levers at once (hoisted kernel gradients, loops unrolled by 3)
  against neither: a wrong loss or gradient from either shows. Hoisting
  alone (not unrolled, the default) is compared per decoder below."""
  plain, _ = _run(kind, hoist_weight_grads=False, scan_unroll=1)
  # 3 divides neither the source (7) nor the target (6) length: the
  # remainder steps run too.
  levers, jaxpr = _run(kind, hoist_weight_grads=True, scan_unroll=3)
  _assert_same_run(plain, levers)
  # The tiny model's bidirectional encoder layer (2 recurrences) and the
  # decoder, each a forward and a backward loop, all unrolled.
  unrolls = _scan_unrolls(jaxpr)
  assert unrolls == [3] * 6, unrolls


# The decoders whose hoisted kernels differ (tests/helpers.py VARIANTS): the
# query timing (the context enters the LSTM with 'previous'), input feeding
# and a readout narrower than the LSTM (W_c's width, the fed-back htilde),
# two decoder layers (two LSTM kernels, dropout between them), and the
# maxout readout (no W_c: only the LSTM kernels are hoisted, as without
# attention, kind 'none' above). The score is the attention's own and is
# left out: every kind above uses 'general'.
DECODERS = [
    (
        'global',
        'general',
        'previous',
        (('readout_size', 6), ('num_decoder_layers', 2)),
    ),
    (
        'global',
        'concat',
        'previous',
        (('input_feeding', False), ('tie_embeddings', True)),
    ),
    ('global', 'concat', 'previous', MAXOUT),
]


@pytest.mark.parametrize('kind,score,query,extra', DECODERS)
def test_hoisted_gradients_equal_autodiffs_for_every_decoder(
    kind, score, query, extra
):
  # Not unrolled (model.scan_unroll=1, the default).
  model = dict(extra, query=query)
  _assert_same_run(
      _run(kind, score, hoist_weight_grads=False, **model)[0],
      _run(kind, score, hoist_weight_grads=True, **model)[0],
      exact_loss=True,
  )


def loop_dot_shapes(jaxpr, inside=False):
  """Output shapes of the dot_generals inside scan/while bodies."""
  shapes = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'dot_general' and inside:
      shapes.append(tuple(eqn.outvars[0].aval.shape))
    loop = eqn.primitive.name in ('scan', 'while')
    for sub in jax.extend.core.jaxprs_in_params(eqn.params):
      shapes += loop_dot_shapes(sub, inside or loop)
  return shapes


@pytest.mark.parametrize('hoist', [False, True])
def test_no_kernel_gradient_is_computed_inside_the_loops(hoist):
  grad, params = _loss_and_grads(
      'global', hoist_weight_grads=hoist, num_decoder_layers=2
  )
  shapes = set(loop_dot_shapes(jax.make_jaxpr(grad)(params).jaxpr))
  decoder = params['decoder']
  kernels = {
      decoder['cell']['kernel_0'].shape,
      decoder['cell']['kernel_1'].shape,
      decoder['combine']['kernel'].shape,
  }
  # Plain autodiff computes each kernel's gradient in the decoder's backward
  # loop; hoisted, no loop has a dot of a kernel's shape.
  assert bool(kernels & shapes) != hoist, (kernels, shapes)


def test_project_gives_the_kernel_gradient_to_the_probe():
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(5, 3)), jnp.float32)
  kernel = jnp.asarray(rng.normal(size=(3, 4)), jnp.float32)
  dy = jnp.asarray(rng.normal(size=(5, 4)), jnp.float32)
  probe = jnp.zeros((5, 4))

  def f(x, kernel, probe):
    return jnp.sum(lstm.project(x, kernel, True, probe) * dy)

  dx, dkernel, dprobe = jax.grad(f, argnums=(0, 1, 2))(x, kernel, probe)
  np.testing.assert_allclose(lstm.project(x, kernel, True), x @ kernel)
  np.testing.assert_allclose(dx, dy @ kernel.T, rtol=1e-6)
  np.testing.assert_array_equal(dkernel, 0)  # left to the caller
  np.testing.assert_array_equal(dprobe, dy)  # dz: the caller's x^T dz


def test_probes_are_keyed_by_parameter_path_and_record_what_they_probe():
  probe = jnp.zeros((2, 4))
  probes = hoisting.Probes({hoisting.key('cell', 'kernel_0'): probe})
  cell = probes.scope('cell')
  x = jnp.ones((2, 3))
  assert cell.take('kernel_0', x) is probe
  assert cell.take('kernel_1', x) is None  # not hoisted: nothing recorded
  assert probes.scope('combine').take('kernel', x) is None
  assert probes.records == {'cell/kernel_0': x}
  assert probes.scope(None) is probes  # a top-level module's own paths
  assert hoisting.NO_PROBES.scope('cell').take('kernel_0', x) is None
  assert hoisting.NO_PROBES.records == {}
