"""A floor under decoding time: the search step's matrix products, each alone.

The matrix products one step of the search loop runs (the LSTM gates,
attention's, W_c, the output layer), read from the decoder's jaxpr, are each
timed alone on this machine: a compiled loop of `count` products of that
shape, each depending on the last. Their sum is the least time a step of
those products takes at the rates this compiler and core give those shapes;
decoding runs them and more (the softmax or argmax, the LSTM's gates'
elementwise work, the search's bookkeeping), so its measured time over the
floor is the share of the products' limit it reaches. `bench decode` reports
both per sentence (`product_floor`). The products are the global batch's,
timed on one device: with a batch split over N devices each runs 1/N of
them, and the floor is N times too high.
"""

import math
from typing import Any, Callable, Dict, List, NamedTuple, Tuple

import jax
import jax.extend.core as jex
import jax.numpy as jnp

from nmt_jax.system import timing


class Product(NamedTuple):
  """One dot_general of a loop body: its operands and parameters."""

  lhs: jax.ShapeDtypeStruct
  rhs: jax.ShapeDtypeStruct
  params: Tuple[Tuple[str, Any], ...]  # the equation's, sorted by name

  @property
  def flops(self) -> float:
    (contract, _), _ = dict(self.params)['dimension_numbers']
    depth = math.prod(self.lhs.shape[d] for d in contract)
    return 2.0 * depth * math.prod(_out_shape(self))


def _out_shape(product: Product) -> Tuple[int, ...]:
  out = jax.eval_shape(
      lambda a, b: jax.lax.dot_general_p.bind(a, b, **dict(product.params)),
      product.lhs,
      product.rhs,
  )
  return out.shape


def _products(jaxpr) -> List[Product]:
  """The dot_generals one run of `jaxpr` executes (a conditional: its branch
  of most FLOPs; a nested loop: one iteration of its body)."""
  found = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'dot_general':
      lhs, rhs = (
          jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars
      )
      found.append(Product(lhs, rhs, tuple(sorted(eqn.params.items()))))
    elif eqn.primitive.name == 'cond':
      branches = [_products(b.jaxpr) for b in eqn.params['branches']]
      found += max(branches, key=lambda b: sum(p.flops for p in b), default=[])
    else:
      for inner in jex.jaxprs_in_params(eqn.params):
        found += _products(inner)
  return found


def _loops(jaxpr) -> List[List[Product]]:
  """The products of one iteration of every while loop under `jaxpr`."""
  loops = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'while':
      loops.append(_products(eqn.params['body_jaxpr'].jaxpr))
    for inner in jex.jaxprs_in_params(eqn.params):
      loops += _loops(inner)
  return loops


def loop_products(fn: Callable, *args) -> List[Product]:
  """The products of one iteration of `fn(*args)`'s loop of most FLOPs: a
  decoder's search loop (nested loops count as one iteration each)."""
  loops = _loops(jax.make_jaxpr(fn)(*args).jaxpr)
  return max(loops, key=lambda ps: sum(p.flops for p in ps), default=[])


def seconds_alone(product: Product, count: int = 20, repeats: int = 3):
  """Seconds one `product` takes alone: the fastest of `repeats` compiled
  loops of `count` products, each depending on the last (the smaller operand
  moved by the previous result, so none is skipped or hoisted)."""
  keys = jax.random.split(jax.random.key(0))
  lhs, rhs = (
      jax.random.normal(k, s.shape).astype(s.dtype)
      for k, s in zip(keys, (product.lhs, product.rhs))
  )
  params = dict(product.params)
  move_lhs = math.prod(product.lhs.shape) <= math.prod(product.rhs.shape)

  @jax.jit
  def loop(lhs, rhs):
    def body(_, previous):
      shift = (previous * 1e-30).astype(lhs.dtype)
      a, b = (lhs + shift, rhs) if move_lhs else (lhs, rhs + shift)
      out = jax.lax.dot_general_p.bind(a, b, **params)
      return out.ravel()[0].astype(jnp.float32)

    return jax.lax.fori_loop(0, count, body, jnp.float32(0))

  loop(lhs, rhs).block_until_ready()
  best = min(timing.timed(lambda: loop(lhs, rhs))[1] for _ in range(repeats))
  return best / count


def step_floor(
    products: List[Product], cache: Dict[Product, float]
) -> Dict[str, Any]:
  """The floor of one loop step: {'step_ms', 'products': per product its
  shapes, GFLOP, GFLOP/s alone and ms}. `cache` keeps seconds by product."""
  rows = []
  for product in products:
    if product not in cache:
      cache[product] = seconds_alone(product)
    seconds = cache[product]
    rows.append({
        'lhs': list(product.lhs.shape),
        'rhs': list(product.rhs.shape),
        'gflop': product.flops / 1e9,
        'gflops_per_sec': product.flops / seconds / 1e9,
        'ms': 1000 * seconds,
    })
  return {'step_ms': sum(r['ms'] for r in rows), 'products': rows}
