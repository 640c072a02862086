"""Hoisted kernel gradients (nmt_jax/hoisting.py) equal plain autodiff's."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from nmt_jax import attention
from nmt_jax import lstm
from tests import helpers
from tests.test_model import VARIANTS


def _loss_and_grads(hoist, kind, score='general', **model):
  config = helpers.tiny_config(
      kind, score, hoist_weight_grads=hoist, dropout=0.3, **model
  )
  net = helpers.make_model(config)
  params = helpers.init_params(net, seed=2)
  source, target_in, target_out = helpers.random_batch(
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


def _assert_same(kind, score='general', **model):
  (loss_plain, grads_plain), (loss_hoisted, grads_hoisted) = [
      jax.jit(fn)(params)
      for fn, params in (
          _loss_and_grads(False, kind, score, **model),
          _loss_and_grads(True, kind, score, **model),
      )
  ]
  # Same forward, dropout masks included.
  np.testing.assert_array_equal(loss_plain, loss_hoisted)
  flat_plain = jax.tree_util.tree_leaves_with_path(grads_plain)
  flat_hoisted = jax.tree_util.tree_leaves(grads_hoisted)
  for (path, a), b in zip(flat_plain, flat_hoisted):
    np.testing.assert_allclose(
        a, b, rtol=1e-5, atol=1e-6, err_msg=jax.tree_util.keystr(path)
    )


@pytest.mark.parametrize('kind', attention.kinds())
def test_hoisted_gradients_equal_autodiffs_for_every_kind(kind):
  _assert_same(kind)


@pytest.mark.parametrize('kind,score,query,extra', VARIANTS)
def test_hoisted_gradients_equal_autodiffs_for_every_decoder(
    kind, score, query, extra
):
  _assert_same(kind, score, query=query, **dict(extra))


def _loop_dot_shapes(jaxpr, inside=False):
  """Output shapes of the dot_generals inside scan/while bodies."""
  shapes = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'dot_general' and inside:
      shapes.append(tuple(eqn.outvars[0].aval.shape))
    loop = eqn.primitive.name in ('scan', 'while')
    for sub in jax.core.jaxprs_in_params(eqn.params):
      shapes += _loop_dot_shapes(sub, inside or loop)
  return shapes


@pytest.mark.parametrize('hoist', [False, True])
def test_no_kernel_gradient_is_computed_inside_the_loops(hoist):
  grad, params = _loss_and_grads(hoist, 'global', num_decoder_layers=2)
  shapes = set(_loop_dot_shapes(jax.make_jaxpr(grad)(params).jaxpr))
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
