"""Speed and memory benchmarks of training, for `benchmarks.bench`.

train_memory: XLA's memory plan of one training step (no data, nothing run).
train:  steady-state target tokens/s (real, non-PAD tokens), compile time,
        peak RSS, the step's dense GFLOP/s next to XLA's rate on a plain
        [128, 768] x [768, 1024] matmul at the same thread count, and the
        operations (kernels) one iteration of each of its loops runs.

Decoding's benchmark is in `decode_speed.py`.
"""

import functools
import os
import resource
import statistics
from typing import Any, Dict, Optional

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import hlo
from nmt_jax import attention
from nmt_jax import train
from nmt_jax.config import compiler_options
from nmt_jax.config import validation
from nmt_jax.data import batching
from nmt_jax.model import seq2seq
from nmt_jax.system import parallel
from nmt_jax.system import timing
from nmt_jax.training import steps


def cpu_name() -> str:
  """This machine's CPU model and core count ('unknown CPU' if not Linux)."""
  if os.path.exists('/proc/cpuinfo'):
    with open('/proc/cpuinfo') as f:
      names = [
          line.split(':', 1)[1].strip()
          for line in f
          if line.startswith('model name')
      ]
    if names:
      return f'{names[0]}, {len(names)} cores'
  return 'unknown CPU'


def peak_rss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def peak_device_memory_mb() -> Optional[float]:
  """The first device's peak allocation (GPU/TPU); None where not reported.

  XLA:CPU reports no device memory: its arrays are in peak_rss_mb.
  """
  stats = jax.devices()[0].memory_stats() or {}
  peak = stats.get('peak_bytes_in_use')
  return None if peak is None else peak / 2**20


def matmul_gflops() -> float:
  """XLA's fp32 rate on the decoder gate matmul [128, 768] x [768, 1024]."""
  a = jax.random.normal(jax.random.key(0), (128, 768))
  b = jax.random.normal(jax.random.key(1), (768, 1024))
  count = 50

  @jax.jit
  def loop(a, b):
    # Each product depends on the last, so XLA cannot drop or merge iterations.
    body = lambda _, c: c + (a + c[0, 0] * 1e-9) @ b
    return jax.lax.fori_loop(0, count, body, jnp.zeros((128, 1024)))

  loop(a, b).block_until_ready()
  seconds = min(timing.timed(lambda: loop(a, b))[1] for _ in range(3))
  return 2 * 128 * 768 * 1024 * count / seconds / 1e9


def dense_flops(
    model_config, batch: int, source_len: int, target_len: int, vocab: int
) -> float:
  """Forward matmul FLOPs of one padded batch (elementwise work not counted)."""
  m = model_config
  h, e = m.hidden_size, m.embed_size
  flops, width = 0.0, e
  for layer in range(m.num_encoder_layers):
    bi = m.bidirectional == 'all' or (
        m.bidirectional == 'bottom' and layer == 0
    )
    units, directions = (h // 2, 2) if bi else (h, 1)
    flops += directions * 2 * (width + units) * 4 * units * source_len
    width = h
  kind = attention.get(m.attention.kind)
  cost = kind.cost(m, source_len)
  flops += cost.sentence_flops
  per_step = 2 * e * 4 * h + 2 * h * vocab  # input projection, softmax
  extra = 0
  if kind.HAS_CONTEXT:
    extra = h * (int(m.input_feeding) + int(m.query == 'previous'))
    per_step += 2 * 2 * h * h  # W_c [c; h]
  per_step += 2 * (extra + h) * 4 * h
  per_step += (m.num_decoder_layers - 1) * 2 * 2 * h * 4 * h
  if m.output_hidden_size:
    per_step += 2 * h * m.output_hidden_size
    per_step += 2 * (m.output_hidden_size - h) * vocab
  per_step += cost.step_flops
  return batch * (flops + per_step * target_len)


# ----------------------------------------------------------------- train


def median_repetition(results):
  """The repetition of median rate (real target tokens per second).

  results: `TrainBench.time()` tuples (seconds, real tokens, ...). Each
  repetition runs the next batches of the stream, so their token counts
  differ and the repetition of median seconds need not have the median rate.
  """
  rates = [r[1] / r[0] for r in results]
  return results[rates.index(statistics.median_high(rates))]


class TrainBench:
  """One config's compiled training step and batches.

  `time()` runs the next `num_steps` batches of the training stream and
  returns (seconds, real target tokens, padded target tokens, dense FLOPs,
  CPU seconds, of which in the kernel).
  """

  def __init__(self, config, num_steps: int, workdir: Optional[str] = None):
    config = validation.resolve(config)
    setup = train.build(config, workdir)
    self.config, self.setup, self.num_steps = config, setup, num_steps
    self.state, self.batches = setup.state, setup.batches
    step_fn = jax.jit(
        setup.step_fn(),
        donate_argnums=0,
        compiler_options=compiler_options.get(config),
    )
    samples = [
        parallel.shard_batch(batching.dummy_batch(rows, length), setup.mesh)
        for length, rows in zip(self.batches.boundaries, self.batches.sizes)
    ]
    # Every bucket shape, ahead of time (donated state: compile only).
    self.step, self.compile_s = timing.compile_by_shape(
        step_fn, [(self.state, sample) for sample in samples], warm=False
    )
    longest = self.step.executables[timing.shape_key((self.state, samples[-1]))]
    self.loop_ops = hlo.loop_ops(longest.as_text())
    self.next_step = 0
    self._warm_up(len(samples))

  def _warm_up(self, shapes: int, horizon: int = 1000):
    """One stream batch of each bucket, from the first `horizon` steps.

    A shape's first execution is slower (2-10x on a CPU): the first
    `num_steps` batches can miss buckets (16 fitted buckets in 10 steps),
    whose first runs would land in a timed repetition.
    """
    seen = set()
    for s in range(horizon):
      _, length = self.batches.examples(s)
      if length in seen:
        continue
      seen.add(length)
      batch = parallel.shard_batch(self.batches.batch(s), self.setup.mesh)
      self.state, metrics = self.step(self.state, batch)
      jax.block_until_ready(metrics)
      if len(seen) == shapes:
        break
    self.warm_lengths = sorted(seen)

  def time(self):
    first, count = self.next_step, self.num_steps
    self.next_step += count
    host = [self.batches.batch(s) for s in range(first, first + count)]
    device = [parallel.shard_batch(b, self.setup.mesh) for b in host]

    def steps_pass():
      for batch in device:
        self.state, metrics = self.step(self.state, batch)
      return metrics

    start = resource.getrusage(resource.RUSAGE_SELF)
    _, seconds, cpu_seconds = timing.timed_with_cpu(steps_pass)
    end = resource.getrusage(resource.RUSAGE_SELF)
    # The kernel's share from one clock (user and system times are counted
    # in ticks, process_time() is not): the share of cpu_seconds it was.
    kernel, user = end.ru_stime - start.ru_stime, end.ru_utime - start.ru_utime
    kernel_seconds = cpu_seconds * kernel / (kernel + user or 1)
    real = sum(int(np.sum(b['target_out'] != 0)) for b in host)
    padded = sum(b['target_out'].size for b in host)
    flops = 3 * sum(
        dense_flops(
            self.config.model,
            b['source'].shape[0],
            b['source'].shape[1],
            b['target_out'].shape[1],
            len(self.setup.task.target_vocab),
        )
        for b in host
    )
    return seconds, real, padded, flops, cpu_seconds, kernel_seconds

  def summary(self, results) -> Dict[str, Any]:
    """The figures of `time()`'s results: the median repetition's rates."""
    median = median_repetition(results)
    rate = matmul_gflops()
    gflops = median[3] / median[0] / 1e9
    return {
        'tokens_per_sec': median[1] / median[0],
        # Per second of this process's CPU time (all its threads).
        'tokens_per_cpu_sec': median[1] / median[4],
        'cpu_utilization': median[4] / median[0],
        # The share of that CPU time spent in the kernel (page faults, ...).
        'kernel_cpu_fraction': median[5] / median[4],
        'padded_tokens_per_sec': median[2] / median[0],
        'padding_fraction': 1 - median[1] / median[2],
        'bucket_lengths': list(self.batches.boundaries),
        'step_ms': 1000 * median[0] / self.num_steps,
        'steps_per_repetition': self.num_steps,
        'repetitions': len(results),
        'compile_s': self.compile_s,
        'compile_buckets': len(self.batches.boundaries),
        'peak_rss_mb': peak_rss_mb(),
        'peak_device_memory_mb': peak_device_memory_mb(),
        'dense_gflops_per_sec': gflops,
        'matmul_gflops_per_sec': rate,
        'fraction_of_matmul_rate': gflops / rate,
        'tokens_per_sec_runs': [r[1] / r[0] for r in results],
        'tokens_per_cpu_sec_runs': [r[1] / r[4] for r in results],
        # Per iteration of each loop of the longest bucket's step (encoder
        # layers, the decoder forward, their backward passes).
        'loop_ops': self.loop_ops,
    }


def bench_train(
    config,
    num_steps: int,
    repeats: int,
    workdir: Optional[str] = None,
    compare=None,
) -> Dict[str, Any]:
  """Timed training steps of a config (the median of `repeats` repetitions).

  With `compare` (a second config) both run in this process, their
  repetitions alternating (each time the next `num_steps` batches of its
  own stream), so both see the same machine state; the result then has
  'this', 'other' and 'speedup': tokens/s of this over other, the median
  over pairs of repetitions with its range.
  """
  benches = {'this': TrainBench(config, num_steps, workdir)}
  if compare is not None:
    benches['other'] = TrainBench(compare, num_steps, workdir)
  runs = {name: [] for name in benches}
  for _ in range(repeats):
    for name, one in benches.items():
      runs[name].append(one.time())
  if compare is None:
    return benches['this'].summary(runs['this'])
  result = {name: one.summary(runs[name]) for name, one in benches.items()}
  pairs = [
      (a[1] / a[0]) / (b[1] / b[0]) for a, b in zip(runs['this'], runs['other'])
  ]
  result['speedup'] = {
      'tokens_per_sec': statistics.median(pairs),
      'tokens_per_sec_pairs': pairs,
  }
  return result


def bench_memory(config, vocab_size: int) -> Dict[str, Any]:
  """XLA's memory plan of one training step, without running it.

  The step of the longest bucket (train.batch_size sentences of
  data.max_length + 1 tokens) with `vocab_size` words on each side, compiled
  from shapes alone (nothing is allocated, no data is read): `temp_mb` is
  the step's working memory (activations, logits, gradients in flight);
  `arguments_mb` the state and batch it takes, donated as in training
  (`alias_mb` of the outputs reuse them).
  """
  config = validation.resolve(config)
  model = seq2seq.Seq2Seq(config.model, vocab_size, vocab_size)
  optimizer, _ = steps.create_optimizer(config.train, steps_per_epoch=1)
  rows, length = config.train.batch_size, config.data.max_length + 1
  sample = batching.dummy_batch(1, length)

  def init():
    params = model.init(
        jax.random.key(0), sample['source'], sample['target_in']
    )['params']
    return steps.TrainState(jnp.int32(0), params, optimizer.init(params))

  state = jax.eval_shape(init)
  batch = {
      k: jax.ShapeDtypeStruct((rows, length), jnp.int32)
      for k in ('source', 'target_in', 'target_out')
  }
  step = functools.partial(
      steps.train_step, model=model, optimizer=optimizer, config=config
  )
  # Donated as in training, so XLA may write the new state over the old.
  jitted = jax.jit(
      step, donate_argnums=0, compiler_options=compiler_options.get(config)
  )
  analysis = jitted.lower(state, batch).compile().memory_analysis()
  mb = lambda n: n / 2**20
  params = sum(x.size for x in jax.tree_util.tree_leaves(state.params))
  return {
      'vocab_size': vocab_size,
      'batch_size': rows,
      'length': length,
      'loss_chunk': config.train.loss_chunk,
      'parameters': params,
      'temp_mb': mb(analysis.temp_size_in_bytes),
      'arguments_mb': mb(analysis.argument_size_in_bytes),
      'outputs_mb': mb(analysis.output_size_in_bytes),
      # Outputs written over donated arguments (the new state over the old).
      'alias_mb': mb(analysis.alias_size_in_bytes),
      'donated': True,
      'peak_mb': mb(
          analysis.temp_size_in_bytes
          + analysis.argument_size_in_bytes
          + analysis.output_size_in_bytes
          - analysis.alias_size_in_bytes
      ),
      # [B, T, V] float32: one array of logits (the softmax is another).
      'logits_mb': mb(4 * rows * length * vocab_size),
  }
