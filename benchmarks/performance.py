"""Writes docs/performance.md from the JSON files of benchmarks/performance.sh.

  python -m benchmarks.performance OUT [OUT ...] [--output=docs/performance.md]

Each OUT (one per machine: a CPU run, a GPU run) holds `bench` results
(train_L50_t1_r1.json, decode_L50_t1_r1.json, lever_*.json,
train_memory_chunk*.json, ops_L50.json) and the OpenNMT-py scripts' files
(peer_train_L50_t1_r1.json, peer_decode_L50_b10_t1_r1.json). Ratios are
taken per pair (repeat r of nmt_jax against repeat r of the peer, run one
after the other on the same core), then summarised by their median and range.
A directory whose `bench` files say `platform: gpu` (or tpu) gets sections
named after its device, with wall-clock rates first.
"""

import argparse
import datetime
import glob
import itertools
import json
import os
import re
import statistics
from typing import Dict, List, Sequence

from benchmarks import hlo
from benchmarks import op_times
from benchmarks import peer
from benchmarks import performance_kinds as kinds
from benchmarks import performance_text as text
from benchmarks import train_speed


def _load(path: str):
  with open(path) as f:
    return json.load(f)


def _runs(out: str, pattern: str) -> Dict[int, str]:
  """{repeat: path} of the files matching pattern (with {r} for the repeat)."""
  regex = re.compile(re.escape(pattern).replace(r'\{r\}', r'(\d+)') + '$')
  found = {}
  for path in glob.glob(os.path.join(out, pattern.replace('{r}', '*'))):
    match = regex.search(os.path.basename(path))
    if match:
      found[int(match.group(1))] = path
  return found


def _summary(values: Sequence[float], digits: int = 2) -> str:
  if not values:
    return 'not measured'
  shown = f'{statistics.median(values):,.{digits}f}'
  if len(values) == 1:
    return shown
  return f'{shown} [{min(values):,.{digits}f} - {max(values):,.{digits}f}]'


def _rate(values: Sequence[float]) -> str:
  return _summary(values, 0)


def _pairs(ours: Dict[int, float], theirs: Dict[int, float]) -> List[float]:
  return [ours[r] / theirs[r] for r in sorted(ours) if r in theirs]


def _row(figure, length, ours, theirs, rate: str, notes: str, first) -> str:
  """A table row from {repeat: figures} of nmt_jax and of the peer.

  `rate`: 'tokens' or 'sentences' (the figures' `<rate>_per_sec` and
  `<rate>_per_cpu_sec`); `first`: 'cpu' (per CPU second, then wall) or
  'wall' (on an accelerator: wall, then per CPU second of the host).
  """
  pick = lambda runs, key: {r: x[key] for r, x in runs.items()}
  keys = [f'{rate}_per_cpu_sec', f'{rate}_per_sec']
  main, second = keys if first == 'cpu' else keys[::-1]
  return (
      f'| {figure} | {length} | {_rate(pick(ours, main).values())} '
      f'| {_rate(pick(theirs, main).values())} '
      f'| **{_summary(_pairs(pick(ours, main), pick(theirs, main)))}** '
      f'| {_summary(_pairs(pick(ours, second), pick(theirs, second)))} '
      f'| {notes} |'
  )


def _bench_runs(out: str, pattern: str):
  """{repeat: the 'this' figures} of the bench files matching pattern."""
  return {r: _load(p)['this'] for r, p in _runs(out, pattern).items()}


def _peer_train_runs(out: str, pattern: str):
  """{repeat: OpenNMT-py's training figures} of the files matching pattern."""
  return {r: peer.train_figures([p]) for r, p in _runs(out, pattern).items()}


def training_rows(out: str, threads: int, first: str = 'cpu') -> List[str]:
  rows = []
  for (prefix, figure), length in itertools.product(
      text.TRAINING_FIGURES, (50, 100, 200)
  ):
    name = f'{prefix}train_L{length}_t{threads}_r{{r}}.json'
    ours = _bench_runs(out, name)
    if not ours:
      continue
    theirs = _peer_train_runs(out, f'peer_{name}')
    pad = statistics.median(x['padding_fraction'] for x in ours.values())
    compile_s = statistics.median(x['compile_s'] for x in ours.values())
    notes = (
        f'padding {pad:.1%} (peer {_peer_padding(theirs)}); '
        f'compile {compile_s:.0f} s'
    )
    if first == 'wall':  # an accelerator: how many kernels the loops launch
      notes += _loop_launches(ours)
    rows.append(_row(figure, length, ours, theirs, 'tokens', notes, first))
  return rows


def _loop_launches(ours) -> str:
  """'; ~N ops in loops per step, M µs each': loop bodies' compiled ops (on a
  GPU, kernel launches) x trip counts at the mean bucket length."""
  this = next(iter(ours.values()))
  if not this.get('loop_ops'):
    return ''
  per_position = sum(loop['ops'] for loop in this['loop_ops'])
  ops = per_position * statistics.mean(this['bucket_lengths'])
  micros = 1000 * statistics.median(x['step_ms'] for x in ours.values()) / ops
  return f'; ~{ops:,.0f} ops in loops per step, {micros:.1f} µs each'


def _peer_padding(theirs) -> str:
  if not theirs:
    return 'not measured'
  return (
      f"{statistics.median(x['padding_fraction'] for x in theirs.values()):.1%}"
  )


def decoding_rows(out: str, threads: int, first: str = 'cpu') -> List[str]:
  rows = []
  for length in (50, 100, 200):
    runs = _bench_runs(out, f'decode_L{length}_t{threads}_r{{r}}.json')
    if not runs:
      continue
    for label, beam in (('greedy', 1), ('beam10', 10)):
      ours = {r: x[label] for r, x in runs.items()}
      theirs = {
          r: peer.decode_figures([p])[label]
          for r, p in _runs(
              out, f'peer_decode_L{length}_b{beam}_t{threads}_r{{r}}.json'
          ).items()
      }
      compile_s = statistics.median(x['compile_s'] for x in ours.values())
      figure = f'decoding {label}, sent/s'
      notes = f'compile {compile_s:.0f} s'
      ops = hlo.most_ops(next(iter(ours.values())))
      if ops:
        notes += f'; {ops} ops per search step'
      rows.append(_row(figure, length, ours, theirs, 'sentences', notes, first))
  return rows


def _decode_pairs(this, other) -> List[float]:
  """other's time / this one's, per pair of alternating repetitions."""
  return _pairs(
      dict(enumerate(other['ms_per_sentence_runs'])),
      dict(enumerate(this['ms_per_sentence_runs'])),
  )


def lever_rows(out: str, levers=text.LEVERS) -> List[str]:
  """Each lever's speedup from a `bench --compare` run (this / default)."""
  rows = []
  for name, what in levers:
    path = os.path.join(out, name)
    if not os.path.exists(path):
      rows.append(f'| {what} | not measured | |')
      continue
    result = _load(path)
    speedup = result.get('speedup', {})
    this, other = result['this'], result['other']
    if 'tokens_per_sec' in speedup:
      # Repetitions alternate: run i of each config is a pair.
      pairs = _pairs(
          dict(enumerate(this['tokens_per_sec_runs'])),
          dict(enumerate(other['tokens_per_sec_runs'])),
      )
      shown = f'x{_summary(pairs)} target tok/s'
      notes = (
          f"{this['tokens_per_sec']:,.0f} vs {other['tokens_per_sec']:,.0f} "
          f"tok/s; padding {this['padding_fraction']:.1%} vs "
          f"{other['padding_fraction']:.1%}; compile {this['compile_s']:.0f} "
          f"vs {other['compile_s']:.0f} s"
      )
      if 'loop_ops' in this and 'loop_ops' in other:
        notes += (
            '; ops/matrix products per step of the two largest loops '
            f"{hlo.largest(this['loop_ops'])} vs "
            f"{hlo.largest(other['loop_ops'])}"
        )
    else:
      shown = ', '.join(
          f'{k} x{_summary(_decode_pairs(this[k], other[k]))}' for k in speedup
      )
      notes = ', '.join(
          f"{k} {this[k]['ms_per_sentence']:#.3g} vs "
          f"{other[k]['ms_per_sentence']:#.3g} ms/sent"
          for k in speedup
      )
      notes += f'; {text.decode_batching(result)}'
    rows.append(f'| {what} | {shown} | {notes} |')
  return rows


def _pick(runs, key) -> Dict[int, float]:
  """{repeat: figure `key`} of {repeat: figures}."""
  return {r: x[key] for r, x in runs.items()}


def _median(runs, key) -> float:
  return statistics.median(_pick(runs, key).values())


def process_lever_rows(out: str) -> List[str]:
  """Speedups of the levers set per process, per pair of processes."""
  rows = []
  for on_pattern, off_pattern, what, whose in text.PROCESS_LEVERS:
    read = _peer_train_runs if whose == 'peer' else _bench_runs
    on, off = read(out, on_pattern), read(out, off_pattern)
    if not on or not off:
      rows.append(f'| {what} | not measured | |')
      continue
    wall = _pairs(_pick(on, 'tokens_per_sec'), _pick(off, 'tokens_per_sec'))
    cpu = _pairs(
        _pick(on, 'tokens_per_cpu_sec'), _pick(off, 'tokens_per_cpu_sec')
    )
    shown = (
        f'x{_summary(wall)} target tok/s, x{_summary(cpu)} per CPU s'
        f' ({len(wall)} pairs of processes)'
    )
    notes = (
        f"{_median(on, 'tokens_per_sec'):,.0f} vs"
        f" {_median(off, 'tokens_per_sec'):,.0f} tok/s; "
    )
    if whose == 'bench':
      notes += (
          f"CPU time in the kernel {_median(on, 'kernel_cpu_fraction'):.1%}"
          f" vs {_median(off, 'kernel_cpu_fraction'):.1%}; "
      )
    notes += (
        f"peak RSS {_median(on, 'peak_rss_mb'):,.0f} vs"
        f" {_median(off, 'peak_rss_mb'):,.0f} MB"
    )
    rows.append(f'| {what} | {shown} | {notes} |')
  return rows


def memory_rows(out: str) -> List[str]:
  rows = []
  for path in sorted(glob.glob(os.path.join(out, 'train_memory_chunk*.json'))):
    m = _load(path)['this']  # before 2026-11-27: not donated, no peak_mb
    peak = m.get('peak_mb', m['temp_mb'] + m['arguments_mb'] + m['outputs_mb'])
    rows.append(
        f"| {m['loss_chunk'] or 'off'} | {'yes' if m.get('donated') else 'no'} "
        f"| {m['temp_mb']:,.0f} | {m['arguments_mb']:,.0f} | {peak:,.0f} "
        f"| {m['logits_mb']:,.0f} |"
    )
  return rows


def _platform(out: str):
  """(platform, device kind, JAX version) of the bench files in `out`."""
  for result in _bench_files(out):
    return (
        result.get('platform', 'cpu'),
        result.get('device', 'cpu'),
        result.get('jax', 'unknown'),
    )
  return 'cpu', 'cpu', 'unknown'


def _bench_files(out: str):
  """The `bench` results in `out` (not the peer's files)."""
  for path in sorted(glob.glob(os.path.join(out, '*.json'))):
    result = _load(path)
    if 'platform' in result or 'jax' in result:
      yield result


def _cpu_name(out: str) -> str:
  """The CPU the bench files name (older files: this machine's)."""
  for result in _bench_files(out):
    if 'cpu' in result:
      return result['cpu']
  return train_speed.cpu_name()


def _measured(out: str) -> str:
  """The runs' days ('first to last'), else the newest file's day."""
  days = [r['date'] for r in _bench_files(out) if 'date' in r]
  if days:
    first, last = min(days), max(days)
    return first if first == last else f'{first} to {last}'
  times = [os.path.getmtime(p) for p in glob.glob(os.path.join(out, '*'))]
  day = datetime.date.fromtimestamp(max(times)) if times else None
  return (day or datetime.date.today()).isoformat()


def startup_section(out: str) -> List[str]:
  """Seconds to the first step and translation, cold and warm cache."""
  path = os.path.join(out, text.STARTUP_FILE)
  if not os.path.exists(path):
    return []
  this = _load(path)['this']
  rows = [
      '\n## Compilation cache: the first training step and translation'
      f' (L = 50)\n\n{text.STARTUP.format(steps=this["steps"])}\n\n'
      '| | empty cache (cold) | filled cache (warm) | warm / cold |\n'
      '|---|---:|---:|---:|'
  ]
  for key, what in text.STARTUP_ROWS:
    if key not in this['cold_runs'][0]:
      continue  # an older `bench startup` file lacks this figure
    cold = [run[key] for run in this['cold_runs']]
    warm = [run[key] for run in this['warm_runs']]
    if 'files' in key:
      rows.append(f'| {what} | {max(cold)} | {max(warm)} | |')
      continue
    rows.append(
        f'| {what} | {_summary(cold, 1)} | {_summary(warm, 1)} '
        f'| {_summary([w / c for w, c in zip(warm, cold)])} |'
    )
  peer_paths = _runs(out, 'peer_train_L50_t1_r{r}.json').values()
  starts = [
      _load(p)['summary'].get('first_step_start_after_s') for p in peer_paths
  ]
  starts = [s for s in starts if s is not None]
  if starts:
    rows.append('\n' + text.STARTUP_PEER.format(seconds=_summary(starts, 1)))
  return rows


def kind_sections(out: str, where: str) -> List[str]:
  parts = []
  for name, title, what in kinds.KINDS + kinds.GPU_KINDS:
    path = os.path.join(out, name)
    if not os.path.exists(path):
      continue
    result = _load(path)
    this_name = result['config']['attention']
    other_name = result['compare_config']['attention']
    parts.append(
        f'\n## Attention: {title} ({where})\n\n{what} Batches:'
        f' {text.decode_batching(result)}.\n\n'
        f'| mode | {this_name} ms/sent | {other_name} ms/sent '
        f'| {this_name} speedup, per pair |\n|---|---:|---:|---:|'
    )
    ops = []
    for label in result.get('speedup', {}):
      this, other = result['this'][label], result['other'][label]
      parts.append(
          f"| {label} | {this['ms_per_sentence']:#.3g} "
          f"| {other['ms_per_sentence']:#.3g} "
          f'| x{_summary(_decode_pairs(this, other))} |'
      )
      if hlo.most_ops(this) and hlo.most_ops(other):
        ops.append(
            f'{label} {this_name} {hlo.most_ops(this)} vs {other_name}'
            f' {hlo.most_ops(other)}'
        )
    if ops:
      parts.append(f"\n{text.SEARCH_OPS}: {'; '.join(ops)}.")
  return parts


def sections(out: str) -> List[str]:
  """The sections of one directory of runs (one machine)."""
  platform, device, jax_version = _platform(out)
  on_cpu = platform == 'cpu'
  machine = _cpu_name(out) if on_cpu else f'{platform.upper()} {device}'
  parts = [f'Measured {_measured(out)} on {machine}; JAX {jax_version}.\n']
  notes = os.path.join(out, 'notes.md')
  if os.path.exists(notes):  # what the runs' author saw, kept beside them
    with open(notes) as f:
      parts.append(f.read().strip() + '\n')
  runs = [(1, 'CPU, one thread' if on_cpu else f'{platform.upper()}, {device}')]
  found = glob.glob(os.path.join(out, 'train_L50_t*_r1.json'))
  counts = sorted(int(re.search(r'_t(\d+)_', p).group(1)) for p in found)
  if on_cpu and counts and counts[-1] > 1:
    runs.append((counts[-1], f'CPU, all cores ({counts[-1]} threads)'))
  first = 'cpu' if on_cpu else 'wall'
  for threads, title in runs:
    rows = training_rows(out, threads, first) + decoding_rows(
        out, threads, first
    )
    if rows:  # a machine that ran levers only has no toolkit table
      parts.extend([f'## {title}\n\n{text.TABLE_HEAD[first]}', *rows, ''])
  where = runs[0][1]
  parts.append(
      f'## Levers, each alone ({where}, L = 50)\n\n'
      'Each against the default config in the same process, alternating '
      'repetitions (`bench --compare`); speedup = the lever on / off, per '
      'pair of repetitions: median [min - max].\n\n'
      '| lever | speedup | figures |\n|---|---:|---|'
  )
  levers = text.LEVERS + (() if on_cpu else text.GPU_LEVERS)
  parts.extend(lever_rows(out, levers) + process_lever_rows(out))
  parts.extend(kind_sections(out, where))
  parts.extend(op_times.page_section(out, where))
  parts.extend(startup_section(out))
  memory = memory_rows(out)
  if memory:
    parts.append(text.MEMORY)
    parts.extend(memory)
  return parts


def page(outs: Sequence[str]) -> str:
  """The page's markdown from the JSON files in each directory of `outs`."""
  parts = [text.HEADER]
  for out in outs:
    parts.extend(sections(out))
    parts.append('')
  if all(_platform(out)[0] == 'cpu' for out in outs):
    parts.append(text.NO_ACCELERATOR)
  return '\n'.join(parts)


def main(argv=None):
  # argparse, not absl flags: this module is imported by the tests next to
  # modules that define an --output flag of their own.
  parser = argparse.ArgumentParser(
      prog='python -m benchmarks.performance',
      description=(
          'Writes docs/performance.md from benchmarks/performance.sh runs.'
      ),
  )
  parser.add_argument(
      'out', nargs='+', help='directories of JSON files, one per machine'
  )
  parser.add_argument('--output', default='docs/performance.md')
  args = parser.parse_args(argv)
  for out in args.out:
    if not os.path.isdir(out):
      parser.error(
          f'{out} is not a directory of benchmarks/performance.sh runs'
      )
  markdown = page(args.out)
  with open(args.output, 'w') as f:
    f.write(markdown)
  print(f'wrote {args.output}')


if __name__ == '__main__':
  main()
