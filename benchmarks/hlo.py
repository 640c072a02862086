"""What one iteration of each loop of a compiled program runs.

An LSTM decoder is a `while` loop of small operations: its speed on an
accelerator is set by how many kernels one step launches as much as by its
FLOPs. `loop_ops` reads the optimized HLO of a compiled executable
(`jax.jit(f).lower(...).compile().as_text()`) and counts, for every while
loop, the operations its body runs per iteration (fusions, dots, custom
calls, copies...; not the parameter/tuple bookkeeping, which launches
nothing). The count is the backend's own: after XLA fused what it could on
that platform.
"""

import re
from typing import Dict, List, Tuple

# Bookkeeping that runs no kernel.
FREE_OPS = frozenset({
    'parameter',
    'get-tuple-element',
    'tuple',
    'constant',
    'bitcast',
    'after-all',
    'opt-barrier',
})

_HEADER = re.compile(r'^(?:ENTRY\s+)?%?([\w.\-]+)\s+\(.*\{\s*$')
_INSTRUCTION = re.compile(
    r'^\s+(?:ROOT\s+)?%?[\w.\-]+\s*=\s*.*?\s([a-z][a-z0-9\-]*)\('
)
_NAME = re.compile(r'^\s+(?:ROOT\s+)?%?([\w.\-]+)')
_TARGET = re.compile(r'custom_call_target="([^"]+)"')
_BODY = re.compile(r'body=%?([\w.\-]+)')
_CALLEE = re.compile(r'to_apply=%?([\w.\-]+)')
_BRANCHES = re.compile(r'branch_computations=\{([^}]*)\}')
_TRUE_FALSE = re.compile(r'(?:true|false)_computation=%?([\w.\-]+)')
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_MODULE = re.compile(r'^HloModule\s+([\w.\-]+)', re.MULTILINE)


def computations(hlo_text: str) -> Dict[str, List[Tuple[str, str]]]:
  """name -> (opcode, line) of each of its instructions, in order."""
  computations, current = {}, None
  for line in hlo_text.splitlines():
    header = _HEADER.match(line)
    if header:
      current = computations.setdefault(header.group(1), [])
      continue
    if line.strip() == '}':
      current = None
      continue
    match = _INSTRUCTION.match(line)
    if match and current is not None:
      current.append((match.group(1), line))
  return computations


def _branches(line: str) -> List[str]:
  """The computations a conditional picks from."""
  listed = _BRANCHES.search(line)
  if listed:
    return [name.strip().lstrip('%') for name in listed.group(1).split(',')]
  return _TRUE_FALSE.findall(line)


def _executed(bodies, name: str) -> List[Tuple[str, str]]:
  """The ops one run of computation `name` executes, without bookkeeping.

  A call runs its callee's ops; a conditional is an op (on a GPU the
  branch index is read on the host) plus the ops of its largest branch; a
  nested while loop is one op (it is listed on its own).
  """
  ops = []
  for opcode, line in bodies.get(name, []):
    if opcode in FREE_OPS:
      continue
    callee = _CALLEE.search(line) if opcode == 'call' else None
    if callee:
      ops.extend(_executed(bodies, callee.group(1)))
      continue
    ops.append((opcode, line))
    if opcode == 'conditional':
      branches = [_executed(bodies, b) for b in _branches(line)]
      ops.extend(max(branches, key=len, default=[]))
  return ops


def loop_ops(hlo_text: str) -> List[Dict[str, int]]:
  """Every while loop: {'trip_count' (0 if unknown), 'ops', 'dots'}.

  `ops` counts the operations one iteration of the body runs (a nested
  loop counts as one, and is listed on its own; a conditional counts with
  its largest branch, a call with its callee); `dots` how many of them
  are or contain a matrix product (a dot, or a fusion/custom call whose
  name or target says so). Loops are listed in the order they appear.
  """
  bodies = computations(hlo_text)
  loops = []
  for instructions in bodies.values():
    for opcode, line in instructions:
      if opcode != 'while':
        continue
      body = _BODY.search(line)
      trip = _TRIP_COUNT.search(line)
      ops = _executed(bodies, body.group(1) if body else '')
      loops.append({
          'trip_count': int(trip.group(1)) if trip else 0,
          'ops': len(ops),
          'dots': sum(is_dot(op, text) for op, text in ops),
      })
  return loops


def module_name(hlo_text: str) -> str:
  """The module's name ('HloModule jit_train_step, ...' -> 'jit_train_step')."""
  match = _MODULE.search(hlo_text)
  return match.group(1) if match else ''


def instruction_name(line: str) -> str:
  """The name an instruction's line defines ('%dot.3 = ...' -> 'dot.3')."""
  return _NAME.match(line).group(1)


def is_dot(opcode: str, line: str) -> bool:
  """Whether the instruction is or wraps a matrix product."""
  if opcode in ('dot', 'convolution'):
    return True
  if opcode not in ('fusion', 'custom-call'):
    return False
  # Matrix products wrapped by the backend (XLA:CPU's YNNPACK fusions, GPU
  # GEMM fusions, cuBLAS custom calls), told by the instruction's name and
  # call target.
  name = instruction_name(line)
  target = _TARGET.search(line)
  label = name + ' ' + (target.group(1) if target else '')
  return bool(re.search(r'ynn_fusion|gemm|cublas|matmul|^dot', label))


def largest(loops: List[Dict[str, int]], count: int = 2) -> str:
  """'ops/dots' of the `count` loop bodies with the most operations.

  In a training step these are the decoder's forward and backward loops.
  """
  top = sorted(loops, key=lambda loop: -loop['ops'])[:count]
  return ', '.join(f"{loop['ops']}/{loop['dots']}" for loop in top)


def most_ops(figures) -> int:
  """Ops per iteration of the largest loop in a bench result's `loop_ops`.

  For a decoder, one step of its search; 0 for a file without `loop_ops`
  (written before `bench decode` recorded them).
  """
  return max((loop['ops'] for loop in figures.get('loop_ops', [])), default=0)
