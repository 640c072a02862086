"""Where a training step's or a decoding call's time goes, op by op.

`python -m benchmarks.bench ops --config=...` compiles a config's training
step, runs `--steps` steps of its longest length bucket under
`jax.profiler` (a warm pass first) and sums the trace's events by compiled
op; with `--trace=greedy` or `--trace=beam` it does the same for
`--steps` decoding calls on the evaluation split's longest batch. Each op
is attributed through its HLO metadata to the loop it runs in (an encoder
layer's recurrence, the decoder's step, their backward passes, the search
loop, or outside loops) and to the model operation it came from (a gate
product, attention's scores, ...). On XLA:CPU the events are the
executable's thunks; on a GPU, the device ops the profiler names after
their HLO instructions.

The milliseconds are the traced ops' own (tracing adds work between ops,
and the gaps between ops are not counted): read the shares, next to the
untraced time of the same steps, which is reported beside them.
"""

import collections
import glob
import gzip
import json
import os
import re
import tempfile
from typing import Any, Dict, List, Optional, Tuple

import jax
import numpy as np

from benchmarks import decode_speed
from benchmarks import hlo
from benchmarks import train_speed
from nmt_jax.data import batching
from nmt_jax.data.vocab import PAD
from nmt_jax.decoding import search
from nmt_jax.system import errors
from nmt_jax.system import parallel
from nmt_jax.system import timing

# Ops whose events enclose other ops' events (counted through those).
_CONTAINERS = frozenset({'while', 'conditional', 'call'})
_SOURCE = re.compile(r'op_name="([^"]*)"')
_WRAPPER = re.compile(r'^(?:transpose|jvp|vmap|remat|checkpoint|jit)\((.*)\)$')


def trace_events(run, directory: str) -> List[Tuple[str, str, float]]:
  """Runs `run()` under jax.profiler -> its compiled ops' events (`op_events`)."""
  with jax.profiler.trace(directory, create_perfetto_trace=True):
    run()
  paths = glob.glob(
      os.path.join(directory, '**', '*perfetto_trace.json.gz'), recursive=True
  )
  if not paths:
    raise RuntimeError(f'jax.profiler wrote no Perfetto trace in {directory}')
  with gzip.open(max(paths, key=os.path.getmtime)) as f:
    return op_events(json.load(f))


def op_events(trace) -> List[Tuple[str, str, float]]:
  """A Perfetto trace -> (HLO module, HLO instruction, microseconds) per op run.

  The events that name their instruction (`args.hlo_op`; else the event's
  own name). Where the trace has a device (a process named '/device:...'),
  only the device's events count: the host's events for the same ops time
  their launches, not their work. On XLA:CPU the ops are the host's thunks.
  """
  events = trace['traceEvents'] if isinstance(trace, dict) else trace
  devices = {
      e['pid']
      for e in events
      if e.get('ph') == 'M'
      and e.get('name') == 'process_name'
      and str(e.get('args', {}).get('name', '')).startswith('/device:')
  }
  ops = [e for e in events if e.get('ph') == 'X']
  on_device = [e for e in ops if e.get('pid') in devices]
  found = []
  for e in on_device or ops:
    args = e.get('args') or {}
    found.append((
        args.get('hlo_module', ''),
        args.get('hlo_op', e['name']),
        e.get('dur', 0.0),
    ))
  return found


def _unwrap(part: str) -> str:
  """'transpose(jvp(decoder.loop))' -> 'decoder.loop'."""
  while True:
    match = _WRAPPER.match(part)
    if not match:
      return part
    part = match.group(1)


def attribute(source: str) -> Tuple[str, str]:
  """An op's metadata op_name -> (where it runs, what it computes).

  where: the innermost loop of the path, named by the three scopes before
  its `while` ('encoder/layer_0/forward', 'decoder/decoder.features/
  decoder.loop'), or 'outside loops'; ' backward' is appended in the
  backward pass. what: the last three names of the path inside that loop
  (e.g. 'attention/bgk,bkd->bgd/dot_general').
  """
  parts = source.split('/')
  loop, inside = 'outside loops', 0
  for i in range(1, len(parts) - 1):
    if parts[i] == 'while' and parts[i + 1] in ('body', 'cond'):
      scopes = []
      for part in map(_unwrap, parts[:i]):
        # Flax's lifted transforms add scopes of their own.
        if part.endswith('shared_forward_fn'):
          continue
        if not scopes or scopes[-1] != part:
          scopes.append(part)
      loop, inside = '/'.join(scopes[-3:]), i + 2
  backward = any(part.startswith('transpose(') for part in parts)
  what = '/'.join(parts[max(inside, len(parts) - 3) :])
  return loop + ' backward' * backward, what


def instructions(hlo_text: str) -> Dict[str, Dict[str, Any]]:
  """Every instruction of an optimized HLO module -> opcode, where, what, dot.

  An instruction without metadata runs where most of its computation's
  instructions run (a loop body's ops are that loop's).
  """
  found = {}
  for ops in hlo.computations(hlo_text).values():
    placed = {}
    for opcode, line in ops:
      source = _SOURCE.search(line)
      placed[hlo.instruction_name(line)] = (
          opcode,
          attribute(source.group(1)) if source else None,
          hlo.is_dot(opcode, line),
      )
    wheres = collections.Counter(p[1][0] for p in placed.values() if p[1])
    default = wheres.most_common(1)[0][0] if wheres else 'outside loops'
    for name, (opcode, attributed, dot) in placed.items():
      where, what = attributed or (default, '')
      found[name] = {'opcode': opcode, 'where': where, 'what': what, 'dot': dot}
  return found


def breakdown(
    events: List[Tuple[str, str, float]],
    hlo_text: str,
    steps: int,
    top: int = 20,
) -> Dict[str, Any]:
  """Per-step milliseconds by loop and by op of traced `steps` steps.

  `events`: (module, instruction, microseconds), as `op_events` gives them.
  Only the events of `hlo_text`'s module (or of none) named after one of its
  instructions count (not the Python frames, the runtime's own spans or
  other programs' ops), and not the loops that enclose other ops.
  """
  known = instructions(hlo_text)
  module = hlo.module_name(hlo_text)
  per_op = collections.defaultdict(lambda: [0.0, 0])
  for event_module, name, micros in events:
    if module and event_module not in ('', module):
      continue
    op = known.get(name)
    if op is None or op['opcode'] in _CONTAINERS:
      continue
    per_op[name][0] += micros
    per_op[name][1] += 1
  total = sum(micros for micros, _ in per_op.values())
  if not total:
    raise RuntimeError(
        'no trace event matched an op of the compiled step: this platform'
        "'s profiler names its events otherwise"
    )
  loops = collections.defaultdict(lambda: [0.0, 0.0, set()])
  ops = []
  for name, (micros, calls) in per_op.items():
    where, what = known[name]['where'], known[name]['what']
    loops[where][0] += micros
    loops[where][1] += micros * known[name]['dot']
    loops[where][2].add(name)
    ops.append({
        'op': name,
        'where': where,
        'what': what,
        'matrix_product': known[name]['dot'],
        'ms_per_step': micros / 1e3 / steps,
        'calls_per_step': calls / steps,
        'share': micros / total,
    })
  ops.sort(key=lambda op: -op['share'])
  return {
      'traced_ms_per_step': total / 1e3 / steps,
      'loops': sorted(
          (
              {
                  'where': where,
                  'ms_per_step': micros / 1e3 / steps,
                  'share': micros / total,
                  'matrix_product_share': dots / micros,
                  'ops': len(names),
              }
              for where, (micros, dots, names) in loops.items()
          ),
          key=lambda loop: -loop['share'],
      ),
      'ops': ops[:top],
  }


def longest_bucket_batches(one: train_speed.TrainBench, count: int):
  """The first `count` batches of the training stream in its longest bucket."""
  longest = max(one.batches.boundaries)
  found = []
  for step in range(200 * count):
    batch = one.batches.batch(step)
    if batch['target_out'].shape[1] == longest:
      found.append(batch)
      if len(found) == count:
        return found
  raise errors.ConfigError(
      f'no {count} batches of the longest bucket ({longest} tokens) in the '
      f'first {200 * count} of the training stream; give fewer --steps'
  )


def _check_steps(num_steps: int):
  if num_steps < 1:
    raise errors.ConfigError(f'--steps={num_steps}: give at least 1 step')


def _traced(run, hlo_text: str, num_steps: int, top: int) -> Dict[str, Any]:
  """run() once warm, once timed, once traced -> its breakdown + step_ms."""
  run()  # warm: this shape's first run
  _, seconds = timing.timed(run)
  with tempfile.TemporaryDirectory(prefix='nmt_jax_ops_') as directory:
    events = trace_events(run, directory)
  result = breakdown(events, hlo_text, num_steps, top)
  result['step_ms'] = 1000 * seconds / num_steps
  return result


def bench_ops(
    config, num_steps: int, top: int = 20, workdir: Optional[str] = None
) -> Dict[str, Any]:
  """Traced training steps of `config`'s longest bucket, op by op."""
  _check_steps(num_steps)
  one = train_speed.TrainBench(config, num_steps, workdir)
  host = longest_bucket_batches(one, num_steps)
  device = [parallel.shard_batch(b, one.setup.mesh) for b in host]

  def steps_pass():
    for batch in device:
      one.state, metrics = one.step(one.state, batch)
    jax.block_until_ready(metrics)

  steps_pass()  # compiles this bucket's step
  executable = one.step.executables[timing.shape_key((one.state, device[0]))]
  result = _traced(steps_pass, executable.as_text(), num_steps, top)
  result.update({
      'trace': 'train',
      'source_length': host[0]['source'].shape[1],
      'target_length': host[0]['target_out'].shape[1],
      'padding_fraction': float(
          np.mean([np.mean(b['target_out'] == PAD) for b in host])
      ),
  })
  return result


def bench_decode_ops(
    config,
    mode: str,
    num_calls: int,
    top: int = 20,
    sentences_per_batch: Optional[int] = None,
    data_workdir: Optional[str] = None,
) -> Dict[str, Any]:
  """Traced decoding calls (`mode` 'greedy' or 'beam') on the longest of
  the evaluation split's full batches, op by op: random weights with EOS
  held back until the reference length, as `bench decode` times them.

  A full batch, not the longest: the sentences over the last length bucket
  come in batches of their own, of a few rows, whose steps are not the
  split's.
  """
  _check_steps(num_calls)
  one = decode_speed.DecodeBench(
      config, None, None, sentences_per_batch, data_workdir
  )
  beam_size = one.beam_size(mode)
  evaluator = one.evaluator_for(beam_size)
  size = evaluator.decode_batch_size(beam_size)
  batches = batching.eval_batches(one.task.eval, size, evaluator.boundaries)
  # Rows of -1 pad a batch.
  rows, batch = max(
      batches, key=lambda b: (np.sum(b[0] >= 0), b[1]['source'].shape[1])
  )
  sentences = int(np.sum(rows >= 0))
  source = parallel.shard_global_batch({'source': batch['source']}, one.mesh)[
      'source'
  ]
  decode_fn = search.make_decode_fn(
      evaluator.scorer,
      one.config.decode,
      beam_size,
      compiler_options=evaluator.decode_compiler_options,
  )
  executable = decode_fn.lower(one.params, source).compile()

  def calls_pass():
    for _ in range(num_calls):
      out = executable(one.params, source)
    jax.block_until_ready(out)

  result = _traced(calls_pass, executable.as_text(), num_calls, top)
  result.update({
      'trace': 'greedy' if beam_size == 1 else f'beam{beam_size}',
      'source_length': source.shape[1],
      # Its longest sentence, EOS included: the search's steps.
      'longest_source': int(np.max(np.sum(batch['source'] != PAD, axis=1))),
      'rows': source.shape[0],
      'sentences': sentences,
      'ms_per_sentence': result['step_ms'] / sentences,
  })
  return result


def table(key: str, entries: List[Dict[str, Any]]) -> List[str]:
  """Printed lines of a breakdown's 'loops' or 'ops' list."""
  if key == 'loops':
    lines = [f'{"loop":<34} {"ms/step":>9} {"share":>6} {"GEMM":>5} ops']
    lines += [
        f'{e["where"]:<34} {e["ms_per_step"]:9.1f} {e["share"]:6.1%} '
        f'{e["matrix_product_share"]:5.0%} {e["ops"]}'
        for e in entries
    ]
    return lines
  lines = [f'{"op":<30} {"ms/step":>9} {"share":>6} {"calls":>6}  where: what']
  lines += [
      f'{e["op"][:30]:<30} {e["ms_per_step"]:9.1f} {e["share"]:6.1%} '
      f'{e["calls_per_step"]:6.0f}  {e["where"]}: {e["what"]}'
      for e in entries
  ]
  return lines


# The figures of a `bench ops` result that docs/performance.md shows, as the
# {{FIGURE FILE}} placeholders of benchmarks/page/machine.md: (its key in
# the result's 'this', format).
_PAGE_FORMATS = {
    'source_length': ('source_length', '{}'),
    'padding': ('padding_fraction', '{:.1%}'),
    'sentences': ('sentences', '{}'),
    'step_ms': ('step_ms', '{:,.0f}'),
    'ms_per_sentence': ('ms_per_sentence', '{:.2f}'),
    'traced_ms': ('traced_ms_per_step', '{:,.0f}'),
}
PAGE_FIGURES = (
    *_PAGE_FORMATS,
    'length',
    'rows',
    'matrix_share',
    'loops',
    'costliest_ops',
)


def page_figure(result: Dict[str, Any], figure: str, top: int = 0) -> str:
  """A figure of PAGE_FIGURES of a `bench ops` file, as the page shows it.

  'loops' and 'costliest_ops' (the `top` costliest) are markdown tables.
  """
  this = result['this']
  if figure in _PAGE_FORMATS:
    key, form = _PAGE_FORMATS[figure]
    return form.format(this[key])
  if figure == 'length':
    return str(result['config']['max_length'])
  if figure == 'rows':  # of the batch, padding rows included
    return str(this.get('rows', this['sentences']))
  if figure == 'matrix_share':
    products = sum(
        loop['share'] * loop['matrix_product_share'] for loop in this['loops']
    )
    return f'{products:.0%}'
  unit, calls = 'step', 'calls'
  if this.get('trace', 'train') != 'train':
    unit, calls = 'call', 'runs'  # a decoding call runs its loop's ops
  if figure == 'loops':
    lines = [
        f'| where | ms per {unit} | share | of it in matrix products | ops |',
        '|---|---:|---:|---:|---:|',
    ]
    lines += [
        f"| {e['where']} | {e['ms_per_step']:,.1f} | {e['share']:.1%} "
        f"| {e['matrix_product_share']:.0%} | {e['ops']} |"
        for e in this['loops']
    ]
    return '\n'.join(lines)
  if figure == 'costliest_ops':
    lines = [
        f'| op | where | what | ms per {unit} | {calls} per {unit} | share |',
        '|---|---|---|---:|---:|---:|',
    ]
    lines += [
        f"| {e['op']} | {e['where']} | {e['what'] or '(no metadata)'} "
        f"| {e['ms_per_step']:,.1f} | {e['calls_per_step']:,.0f} "
        f"| {e['share']:.1%} |"
        for e in this['ops'][:top]
    ]
    return '\n'.join(lines)
  raise ValueError(f'{figure}: not one of {PAGE_FIGURES}')
