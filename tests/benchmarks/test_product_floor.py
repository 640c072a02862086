"""benchmarks/product_floor.py: the products of a loop's step, timed alone."""

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import product_floor
from nmt_jax.decoding import search
from tests import helpers


def _search_like(weights, x):
  """A product before the loop, and a loop whose step runs two products and
  a conditional of one product or two (the larger counts)."""
  x = x @ weights['encode']  # outside the loop: not in a step's floor

  def body(state):
    i, h = state
    h = jnp.tanh(h @ weights['cell'])
    logits = h @ weights['output']
    h = jax.lax.cond(
        i % 2 == 0,
        lambda h: h @ weights['small'] @ weights['small'],
        lambda h: h @ weights['small'],
        h,
    )
    return i + 1, h + logits[:, :8].sum()

  return jax.lax.while_loop(lambda s: s[0] < 5, body, (0, x))[1]


def test_the_products_of_the_loop_of_most_flops_with_its_larger_branch():
  weights = {
      'encode': jnp.ones((8, 8)),
      'cell': jnp.ones((8, 8)),
      'output': jnp.ones((8, 100)),
      'small': jnp.ones((8, 8)),
  }
  x = jax.ShapeDtypeStruct((4, 8), jnp.float32)
  products = product_floor.loop_products(jax.jit(_search_like), weights, x)
  shapes = sorted((p.lhs.shape, p.rhs.shape) for p in products)
  assert shapes == sorted([
      ((4, 8), (8, 8)),  # cell
      ((4, 8), (8, 100)),  # output
      ((4, 8), (8, 8)),  # the larger branch: two products
      ((4, 8), (8, 8)),
  ])
  assert sum(p.flops for p in products) == 2 * 4 * 8 * (8 + 100 + 8 + 8)
  # A batched product (attention's): the batch dimension counts once.
  batched = jax.make_jaxpr(
      lambda q, k: jax.lax.while_loop(
          lambda s: s[1] < 1,
          lambda s: (jnp.einsum('bqh,bsh->bqs', s[0], k)[..., :4], s[1] + 1),
          (q, 0),
      )[0]
  )(jnp.ones((3, 1, 4)), jnp.ones((3, 6, 4)))
  (product,) = product_floor._loops(batched.jaxpr)[0]
  assert product.flops == 2 * 3 * 1 * 6 * 4


def test_a_step_floor_sums_its_products_timed_alone():
  products = product_floor.loop_products(
      jax.jit(_search_like),
      {
          'encode': jnp.ones((8, 8)),
          'cell': jnp.ones((8, 8)),
          'output': jnp.ones((8, 100)),
          'small': jnp.ones((8, 8)),
      },
      jnp.ones((4, 8)),
  )
  cache = {}
  floor = product_floor.step_floor(products, cache)
  rows = floor['products']
  assert len(rows) == 4 and len(cache) == 2  # two distinct shapes, timed once
  assert floor['step_ms'] == sum(r['ms'] for r in rows) > 0
  for row, product in zip(rows, products):
    assert row['gflop'] * 1e9 == product.flops
    assert np.isclose(row['gflops_per_sec'] * row['ms'], product.flops / 1e6)


def test_a_decoders_loop_runs_the_output_layer_once_a_step():
  """Greedy search of a tiny model: the output layer's product is in the
  search loop, once per step (twice an iteration with decode.unroll=2)."""
  config = helpers.tiny_config()
  model = helpers.make_model(config)
  params = helpers.init_params(model)
  source = jax.ShapeDtypeStruct((3, 7), jnp.int32)
  output = (config.model.hidden_size, helpers.VOCAB)

  def products(unroll):
    decode_config = config.decode.copy_and_resolve_references()
    decode_config.unroll = unroll
    decode = search.make_decode_fn(model, decode_config, beam_size=1)
    found = product_floor.loop_products(decode, params, source)
    return [p for p in found if p.lhs.shape[0] == 3]

  one, two = products(1), products(2)
  assert [p.rhs.shape for p in one].count(output) == 1
  assert [p.rhs.shape for p in two].count(output) == 2
  assert sum(p.flops for p in two) == 2 * sum(p.flops for p in one)
