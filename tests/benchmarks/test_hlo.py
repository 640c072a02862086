"""benchmarks.hlo: operations per loop iteration of compiled programs."""

import jax
import jax.numpy as jnp

from benchmarks import decode_speed
from benchmarks import hlo
from nmt_jax import train
from nmt_jax.data import batching
from nmt_jax.system import parallel
from tests import helpers

HLO = """HloModule m

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[4]{0} get-tuple-element(%p), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %ynn_fusion.1 = f32[4]{0} fusion(%x), kind=kCustom, calls=%f, metadata={op_name="a"}
  %tanh_fusion = f32[4]{0} fusion(%ynn_fusion.1), kind=kLoop, calls=%g, metadata={op_name="dot_general"}
  ROOT %t = (s32[], f32[4]{0}) tuple(%next, %tanh_fusion)
}

ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  %w = (s32[], f32[4]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"7"}}
  ROOT %r = f32[4]{0} get-tuple-element(%w), index=1
}
"""


def test_loop_ops_counts_what_one_iteration_runs():
  # add, the dot fusion and the tanh fusion; the metadata naming a jax dot
  # does not make the tanh fusion a matrix product.
  assert hlo.loop_ops(HLO) == [{'trip_count': 7, 'ops': 3, 'dots': 1}]


BRANCHING = """HloModule m

%light (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%a)
}

%heavy (b: f32[4]) -> f32[4] {
  %b = f32[4]{0} parameter(0)
  %e = f32[4]{0} exponential(%b)
  %dot.1 = f32[4]{0} dot(%e, %e)
  ROOT %t = f32[4]{0} tanh(%dot.1)
}

%outlined (c: f32[4]) -> f32[4] {
  %c = f32[4]{0} parameter(0)
  %s = f32[4]{0} sine(%c)
  ROOT %q = f32[4]{0} sqrt(%s)
}

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[4]{0} get-tuple-element(%p), index=1
  %k = f32[4]{0} call(%x), to_apply=%outlined
  %y = f32[4]{0} conditional(%i, %k, %k), branch_computations={%light, %heavy}
  ROOT %t = (s32[], f32[4]{0}) tuple(%i, %y)
}

ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  %w = (s32[], f32[4]{0}) while(%init), condition=%cond, body=%body
  ROOT %r = f32[4]{0} get-tuple-element(%w), index=1
}
"""


def test_a_loop_counts_its_calls_and_largest_branch():
  # The call's sine and sqrt, the conditional, and its heavy branch's three.
  assert hlo.loop_ops(BRANCHING) == [{'trip_count': 0, 'ops': 6, 'dots': 1}]


def test_loop_ops_of_a_compiled_switch_see_the_branch_taken():
  def f(x, heavy):
    def body(h, i):
      light = lambda h: -h
      if heavy:
        branch = lambda h: jnp.tanh(jnp.sin(h) @ x) * jnp.cos(h).sum()
      else:
        branch = light
      # The index comes from the loop's input: no constant folds the switch.
      return jax.lax.switch(i % 2, [light, branch], h), None

    return jax.lax.scan(body, x, jnp.arange(5))[0]

  ops = lambda heavy: max(
      loop['ops']
      for loop in hlo.loop_ops(
          jax.jit(f, static_argnums=1)
          .lower(jnp.ones((4, 4)), heavy)
          .compile()
          .as_text()
      )
  )
  assert ops(True) > ops(False)


def test_loop_ops_of_a_compiled_scan_and_its_gradient():
  def f(w, x):
    def body(h, x_t):
      h = jnp.tanh(h @ w + x_t)
      return h, h

    return jax.lax.scan(body, jnp.zeros((4, 8)), x)[1].sum()

  args = jnp.ones((8, 8)), jnp.ones((5, 4, 8))
  forward = hlo.loop_ops(jax.jit(f).lower(*args).compile().as_text())
  assert [(loop['trip_count'], loop['dots']) for loop in forward] == [(5, 1)]
  both = hlo.loop_ops(jax.jit(jax.grad(f)).lower(*args).compile().as_text())
  assert len(both) == 2 and all(loop['trip_count'] == 5 for loop in both)
  # The backward loop adds dh W^T and the weight gradient's x^T dz.
  assert max(loop['dots'] for loop in both) >= 2


def _training_step_loops(hoist):
  config = helpers.tiny_config(
      'global', hoist_weight_grads=hoist, num_decoder_layers=2
  )
  setup = train.build(config, None)
  length = setup.batches.boundaries[-1]
  batch = parallel.shard_batch(
      batching.dummy_batch(setup.batches.sizes[-1], length), setup.mesh
  )
  text = jax.jit(setup.step_fn()).lower(setup.state, batch).compile().as_text()
  # The loops over time (how XLA's CPU code generator emits a fusion may
  # add loops over elements).
  return [loop for loop in hlo.loop_ops(text) if loop['trip_count'] == length]


def test_hoisting_takes_three_matrix_products_out_of_the_backward_loop():
  hoisted, plain = _training_step_loops(True), _training_step_loops(False)
  # The same loops, and one loop body (the decoder's backward) has the
  # three kernel gradients (two LSTM layers, W_c) fewer.
  assert len(hoisted) == len(plain)
  differences = sorted(p['dots'] - h['dots'] for h, p in zip(hoisted, plain))
  assert differences[-1] == 3 and differences[:-1] == [0] * (len(plain) - 1)


def test_dropout_adds_no_random_number_kernels_to_the_loops():
  def loops(rate):
    config = helpers.tiny_config('global', dropout=rate, num_decoder_layers=3)
    setup = train.build(config, None)
    length = setup.batches.boundaries[-1]
    batch = parallel.shard_batch(
        batching.dummy_batch(setup.batches.sizes[-1], length), setup.mesh
    )
    step = jax.jit(setup.step_fn()).lower(setup.state, batch).compile()
    # The loops over time (drawing random bits runs loops of its own).
    return [
        loop
        for loop in hlo.loop_ops(step.as_text())
        if loop['trip_count'] == length
    ]

  with_dropout, without = loops(0.3), loops(0.0)
  # The decoder's masks are drawn before its loop: each loop body over time
  # has at most a few ops more (applying three masks), no random bits.
  assert len(with_dropout) == len(without) >= 4
  for a, b in zip(with_dropout, without):
    assert a['ops'] - b['ops'] <= 3, (a, b)


def test_a_windowed_decoder_step_runs_no_loop_of_its_own():
  def loops(kind, **fields):
    config = helpers.tiny_config(kind)
    config.model.attention.update(fields)
    return decode_speed.DecodeBench(config, None, 8).time('greedy')['loop_ops']

  # Flexible attention picks its window's width per step (a conditional);
  # picking it must not run a loop (on a GPU each iteration of a loop is
  # launched from the host), so it has the loops global attention has: the
  # encoder's and the search's.
  windowed, plain = loops('flexible', tau=1.2), loops('global')
  assert len(windowed) == len(plain)
  assert max(w['ops'] for w in windowed) > max(p['ops'] for p in plain)
