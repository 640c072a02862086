"""Writes docs/performance.md from the JSON files of benchmarks/performance.sh.

  python -m benchmarks.performance OUT [OUT ...] [--output=docs/performance.md]

Each OUT (one per machine: a CPU run, a GPU run) holds `bench` results
(train_L50_t1_r1.json, decode_L50_t1_r1.json, lever_*.json,
train_memory_chunk*.json, ops_L50.json) and the OpenNMT-py scripts' files
(peer_train_L50_t1_r1.json, peer_decode_L50_b10_t1_r1.json), and those of
benchmarks/real_vocab.sh (train_V16000_t1_r1.json, decode_gettext_t1_r1.json,
peer_*, kinds_memory_k32_V16000.json: the REAL_VOCAB tags). Ratios are
taken per pair (repeat r of nmt_jax against repeat r of the peer, run one
after the other on the same core), then summarised by their median and range.
A directory whose `bench` files say `platform: gpu` (or tpu) gets sections
named after its device, with wall-clock rates first.

The page's words are markdown templates in benchmarks/page/: performance.md
(the page), summary.md (its first table, a column per OUT), machine.md (one
directory's part, once per OUT) and no_accelerator.md (the page's end when
every OUT is a CPU's). This module computes what their {{key}} placeholders
show (see `fill`).
"""

import argparse
import datetime
import functools
import glob
import itertools
import json
import os
import re
import statistics
from typing import Callable, Dict, List, Optional, Sequence

from benchmarks import hlo
from benchmarks import op_times
from benchmarks import peer
from benchmarks import train_speed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, 'benchmarks', 'page')
_KEY = re.compile(r'\{\{(.+?)\}\}')
# Where fill() cuts a template into sections it may leave out whole.
_SECTION = re.compile(r'\n\n(?=#{2,3} )')
# A summary cell of a directory without the record.
MISSING = '–'

# Training rows of a toolkit table: (file prefix, figure). The files are
# prefix + train_L{L}_t{threads}_r{r}.json and peer_ + the same.
TRAINING_FIGURES = (
    ('', 'training, target tok/s'),
    (
        'best_',
        (
            'training, target tok/s, two opt-in levers: 16 fitted buckets and'
            ' glibc keeping freed memory'
        ),
    ),
)

# The toolkit table's head: rates per CPU second first, or wall-clock first
# (an accelerator); `column` names what the second column holds (L, corpus).
TOOLKIT_HEAD = {
    'cpu': (
        '| figure | {column} | nmt_jax, per CPU s | OpenNMT-py, per CPU s '
        '| ratio per CPU s | ratio wall | notes |\n'
        '|---|---:|---:|---:|---:|---:|---|'
    ),
    'wall': (
        '| figure | {column} | nmt_jax, per s | OpenNMT-py, per s '
        '| ratio wall | ratio per host CPU s | notes |\n'
        '|---|---:|---:|---:|---:|---:|---|'
    ),
}
# The runs of benchmarks/real_vocab.sh: the file tag (as in
# train_V16000_t1_r1.json) -> what the real-vocabulary table calls it.
REAL_VOCAB = {
    'V8000': 'V = 8k',
    'V16000': 'V = 16k',
    'V32000': 'V = 32k',
    'gettext': 'gettext en->de, 16k BPE',
}


def template(name: str) -> str:
  """A template of benchmarks/page/, less its leading <!-- comment -->."""
  with open(os.path.join(PAGE, name)) as f:
    return re.sub(r'\A<!--.*?-->\n+', '', f.read(), flags=re.S)


def fill(text: str, value: Callable[[str], Optional[str]]) -> str:
  """`text` with each {{key}} replaced by value(key).

  A key whose value is None (not measured) leaves out its table row or list
  item, or elsewhere its `## ` or `### ` section; one whose value is ''
  (nothing to add) leaves out its table row, list item or paragraph. A table
  all of whose placeholder rows are left out leaves out its section.
  """
  sections = []
  for section in _SECTION.split(text.strip('\n')):
    paragraphs = [_fill_lines(p, value) for p in section.split('\n\n')]
    if None not in paragraphs and any(paragraphs):
      sections.append('\n\n'.join(p for p in paragraphs if p))
  return '\n\n'.join(sections)


def _fill_lines(paragraph: str, value) -> Optional[str]:
  """A paragraph filled; '' to leave it out, None to leave out its section."""
  lines, dropped = [], 0
  for line in paragraph.split('\n'):
    values = {key: value(key) for key in _KEY.findall(line)}
    if not all(values.values()):
      if line.startswith(('|', '- ')):
        dropped += 1
        continue
      return None if None in values.values() else ''
    for key, shown in values.items():
      line = line.replace('{{' + key + '}}', shown)
    lines.append(line)
  if dropped and paragraph.startswith('|') and len(lines) <= 2:
    return None  # a table (head and rule) with nothing measured
  return '\n'.join(lines)


def files_read(platform: str = 'cpu') -> List[str]:
  """The files machine.md's placeholders read in a `platform` directory.

  Names may hold {r} (each repeat) or * (any); the toolkit tables' files
  (TRAINING_FIGURES, decode_L*) are not among them.
  """
  names = set()
  for key in _KEY.findall(template('machine.md')):
    words = key.split()
    if words[-1] != 'gpu' or platform != 'cpu':
      names.update(word for word in words if word.endswith('.json'))
  return sorted(names)


def _load(path: str):
  with open(path) as f:
    return json.load(f)


def _load_in(out: str, name: str):
  """The JSON file `name` in `out`, or None where it is not."""
  path = os.path.join(out, name)
  return _load(path) if os.path.exists(path) else None


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


def _rate_keys(rate: str, first: str):
  """(main, second) figure keys of `rate`: per CPU second first on a CPU,
  by the clock first on an accelerator."""
  keys = [f'{rate}_per_cpu_sec', f'{rate}_per_sec']
  return keys if first == 'cpu' else keys[::-1]


def _row(figure, length, ours, theirs, rate: str, notes: str, first) -> str:
  """A table row from {repeat: figures} of nmt_jax and of the peer.

  `rate`: 'tokens', 'sentences' or 'output_tokens' (the figures'
  `<rate>_per_sec` and `<rate>_per_cpu_sec`); `first`: 'cpu' (per CPU
  second, then wall) or 'wall' (on an accelerator: wall, then per CPU second
  of the host).
  """
  main, second = _rate_keys(rate, first)
  return (
      f'| {figure} | {length} | {_rate(_pick(ours, main).values())} '
      f'| {_rate(_pick(theirs, main).values())} '
      f'| **{_summary(_pairs(_pick(ours, main), _pick(theirs, main)))}** '
      f'| {_summary(_pairs(_pick(ours, second), _pick(theirs, second)))} '
      f'| {notes} |'
  )


def _bench_runs(out: str, pattern: str):
  """{repeat: the 'this' figures} of the bench files matching pattern."""
  return {r: _load(p)['this'] for r, p in _runs(out, pattern).items()}


def _peer_train_runs(out: str, pattern: str):
  """{repeat: OpenNMT-py's training figures} of the files matching pattern."""
  return {r: peer.train_figures([p]) for r, p in _runs(out, pattern).items()}


def _pick(runs, key) -> Dict[int, float]:
  """{repeat: figure `key`} of {repeat: figures}."""
  return {r: x[key] for r, x in runs.items()}


def _median(runs, key) -> float:
  return statistics.median(_pick(runs, key).values())


def _training_row(out, name, figure, column, first) -> Optional[str]:
  """The row of nmt_jax's `name` runs ({r}: the repeat) against peer_`name`."""
  ours = _bench_runs(out, name)
  if not ours:
    return None
  theirs = _peer_train_runs(out, f'peer_{name}')
  pad = _median(ours, 'padding_fraction')
  notes = (
      f'padding {pad:.1%} (peer {_peer_padding(theirs)}); '
      f"compile {_median(ours, 'compile_s'):.0f} s"
  )
  if first == 'wall':  # an accelerator: how many kernels the loops launch
    notes += _loop_launches(ours)
  return _row(figure, column, ours, theirs, 'tokens', notes, first)


def training_rows(out: str, threads: int, first: str = 'cpu') -> List[str]:
  rows = []
  for (prefix, figure), length in itertools.product(
      TRAINING_FIGURES, (50, 100, 200)
  ):
    name = f'{prefix}train_L{length}_t{threads}_r{{r}}.json'
    rows.append(_training_row(out, name, figure, length, first))
  return [row for row in rows if row]


def _loop_launches(ours) -> str:
  """'; ~N ops in loops per step, M µs each': loop bodies' compiled ops (on a
  GPU, kernel launches) x trip counts at the mean bucket length."""
  this = next(iter(ours.values()))
  if not this.get('loop_ops'):
    return ''
  per_position = sum(loop['ops'] for loop in this['loop_ops'])
  ops = per_position * statistics.mean(this['bucket_lengths'])
  micros = 1000 * _median(ours, 'step_ms') / ops
  return f'; ~{ops:,.0f} ops in loops per step, {micros:.1f} µs each'


def _peer_padding(theirs) -> str:
  if not theirs:
    return 'not measured'
  return f"{_median(theirs, 'padding_fraction'):.1%}"


def _decode_runs(out, tag, threads, label):
  """({repeat: nmt_jax's figures}, {repeat: the peer's}) of one decoding
  mode ('greedy', 'beam10') of the decode_<tag> runs."""
  runs = _bench_runs(out, f'decode_{tag}_t{threads}_r{{r}}.json')
  ours = {
      r: peer.with_output_tokens(x[label])
      for r, x in runs.items()
      if label in x
  }
  beam = 1 if label == 'greedy' else int(label[len('beam') :])
  theirs = {
      r: peer.decode_figures([p])[label]
      for r, p in _runs(
          out, f'peer_decode_{tag}_b{beam}_t{threads}_r{{r}}.json'
      ).items()
  }
  return ours, theirs


def _decoding_rows(out, tag, threads, column, first) -> List[str]:
  """Greedy and beam 10 rows of decode_<tag> runs against the peer's, per
  output token: the peer, its EOS blocked, runs every sentence to the
  longest source of its batch + 5, longer than nmt_jax's outputs."""
  rows = []
  for label in ('greedy', 'beam10'):
    ours, theirs = _decode_runs(out, tag, threads, label)
    if not ours:
      continue
    figure = f'decoding {label}, output tok/s'
    peer_tokens = (
        f"{_median(theirs, 'output_tokens_per_sentence'):.1f}"
        if theirs
        else 'not measured'
    )
    notes = (
        f"{_median(ours, 'output_tokens_per_sentence'):.1f} output tokens a"
        f' sentence (peer {peer_tokens});'
        f" compile {_median(ours, 'compile_s'):.0f} s"
    )
    ops = hlo.most_ops(next(iter(ours.values())))
    if ops:
      notes += f'; {ops} ops per search step'
    rows.append(
        _row(figure, column, ours, theirs, 'output_tokens', notes, first)
    )
  return rows


def decoding_rows(out: str, threads: int, first: str = 'cpu') -> List[str]:
  rows = []
  for length in (50, 100, 200):
    rows += _decoding_rows(out, f'L{length}', threads, length, first)
  return rows


def _toolkit_table(out: str, threads: int, first: str) -> Optional[str]:
  """The table of nmt_jax against OpenNMT-py on `threads` threads."""
  rows = training_rows(out, threads, first) + decoding_rows(out, threads, first)
  head = TOOLKIT_HEAD[first].format(column='L')
  return '\n'.join([head, *rows]) if rows else None


def _real_vocab_table(out: str, threads: int, first: str) -> Optional[str]:
  """nmt_jax against OpenNMT-py at each real vocabulary (REAL_VOCAB)."""
  rows = []
  for tag, column in REAL_VOCAB.items():
    name = f'train_{tag}_t{threads}_r{{r}}.json'
    figure = 'training, target tok/s'
    rows.append(_training_row(out, name, figure, column, first))
    rows += _decoding_rows(out, tag, threads, column, first)
  rows = [row for row in rows if row]
  head = TOOLKIT_HEAD[first].format(column='corpus')
  return '\n'.join([head, *rows]) if rows else None


def _real_vocab_cores(out: str) -> Optional[int]:
  """The thread count of real_vocab.sh's all-cores runs in `out`, if any."""
  found = glob.glob(os.path.join(out, 'train_V*_t*_r1.json'))
  counts = [int(re.search(r'_t(\d+)_r1', p).group(1)) for p in found]
  counts = [c for c in counts if c > 1]
  return max(counts) if counts else None


_KIND_NAMES = {
    'none': 'no attention',
    'local_p': 'local-p',
    'local_m': 'local-m',
}


def _kind_name(config) -> str:
  """'memory K = 64', 'no attention', 'global general' of a file's config."""
  name = config['attention']
  if name == 'memory':
    return f"memory K = {config['num_memory']}"
  if name == 'global' and config.get('score'):
    return f"global {config['score']}"
  return _KIND_NAMES.get(name, name)


def _kinds(result) -> str:
  """The cells of one `bench decode --compare` file in the attention table:
  per mode ms per sentence (the kind / the other) and speedup per pair, then
  the ops per search step of both."""
  cells, ops = [], []
  for label in ('greedy', 'beam10'):
    if label not in result.get('speedup', {}):
      cells += [MISSING, MISSING]
      ops.append(MISSING)
      continue
    this, other = result['this'][label], result['other'][label]
    cells += [
        f"{this['ms_per_sentence']:#.3g} / {other['ms_per_sentence']:#.3g}",
        f'x{_summary(_decode_pairs(this, other))}',
    ]
    counts = hlo.most_ops(this), hlo.most_ops(other)
    ops.append(f'{counts[0]} / {counts[1]}' if all(counts) else MISSING)
  cells.append(MISSING if set(ops) == {MISSING} else '; '.join(ops))
  return ' | '.join(cells)


def _kinds_paths(out: str, tag: str) -> List[str]:
  """real_vocab.sh's kinds_<kind>_<tag>.json (not performance.sh's files)."""
  return sorted(glob.glob(os.path.join(out, f'kinds_*_{tag}.json')))


def _kinds_rows(out: str, tag: str) -> Optional[str]:
  """Rows of the attention table, one per kinds_*_<tag>.json file, without
  the row's outer bars (the template's line holds them)."""
  rows = []
  for path in _kinds_paths(out, tag):
    result = _load(path)
    modes = [result['this'][m] for m in result.get('speedup', {})]
    window = modes[0].get('avg_window_fraction', 0) if modes else 0
    rows.append(
        f"(o) {_kind_name(result['config'])} /"
        f" {_kind_name(result['compare_config'])}, {REAL_VOCAB[tag]} dev"
        f' sentences, window {window:.2f} of the source | {_kinds(result)}'
    )
  return ' |\n| '.join(rows) or None


def _batches_of(out: str, tag: str) -> Optional[str]:
  """The batches and days of the kinds_*_<tag>.json files."""
  shown = [_batching(_load(p)) for p in _kinds_paths(out, tag)]
  batches = {re.sub(r' \(.*\)$', '', text) for text in shown}
  if len(batches) != 1:
    return '; '.join(sorted(set(shown))) or None
  days = sorted({re.search(r'\((.*)\)$', text).group(1) for text in shown})
  span = days[0] if len(days) == 1 else f'{days[0]} to {days[-1]}'
  return f'{batches.pop()} ({span})'


def _decode_pairs(this, other) -> List[float]:
  """other's time / this one's, per pair of alternating repetitions."""
  return _pairs(
      dict(enumerate(other['ms_per_sentence_runs'])),
      dict(enumerate(this['ms_per_sentence_runs'])),
  )


def _batching(result) -> str:
  """A `bench decode --compare` file's batches and day.

  Files from before `bench decode --sentences_per_batch` lack the field:
  their beam search decoded `decode.batch_size` hypotheses per batch.
  """

  def sentences(side):
    modes = [m for m in result[side].values() if isinstance(m, dict)]
    counts = {m.get('sentences_per_batch') for m in modes}
    return counts.pop() if len(counts) == 1 else None

  this, other = sentences('this'), sentences('other')
  day = result.get('date', 'undated')
  if this is None or other is None:
    return f'beam search in batches of `decode.batch_size` hypotheses ({day})'
  if this != other:
    return f'{this} vs {other} sentences per batch ({day})'
  return f'{this} sentences per batch in every mode ({day})'


def _lever(out: str, name: str) -> Optional[str]:
  """'speedup | figures' of a `bench --compare` file (this / default)."""
  result = _load_in(out, name)
  if result is None:
    return None  # not measured: its row is left out
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
    notes += f'; {_batching(result)}'
  return f'{shown} | {notes}'


def _processes(out: str, on_pattern: str, off_pattern: str) -> Optional[str]:
  """'speedup | figures' of a lever set per process, per pair of processes."""
  whose = 'peer' if on_pattern.startswith('peer_') else 'bench'
  read = _peer_train_runs if whose == 'peer' else _bench_runs
  on, off = read(out, on_pattern), read(out, off_pattern)
  if not on or not off:
    return None
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
  return f'{shown} | {notes}'


def _cold_warm(result, key: str) -> Optional[str]:
  """'cold | warm | warm / cold' of a `bench startup` figure."""
  if key not in result['this']['cold_runs'][0]:
    return None  # an older `bench startup` file lacks this figure
  cold = [run[key] for run in result['this']['cold_runs']]
  warm = [run[key] for run in result['this']['warm_runs']]
  if 'files' in key:
    return f'{max(cold)} | {max(warm)} |'
  return (
      f'{_summary(cold, 1)} | {_summary(warm, 1)} '
      f'| {_summary([w / c for w, c in zip(warm, cold)])}'
  )


def _op_figure(figure: str, result, top: str = '0') -> str:
  return op_times.page_figure(result, figure, int(top))


def _first_step(out: str, pattern: str) -> str:
  """Seconds OpenNMT-py's training wrapper took to its first step."""
  starts = [
      _load(p)['summary'].get('first_step_start_after_s')
      for p in _runs(out, pattern).values()
  ]
  starts = [s for s in starts if s is not None]
  return _summary(starts, 1) if starts else ''


def _memory_rows(out: str, pattern: str) -> Optional[str]:
  rows = []
  for path in sorted(glob.glob(os.path.join(out, pattern))):
    m = _load(path)['this']  # before 2026-11-27: not donated, no peak_mb
    peak = m.get('peak_mb', m['temp_mb'] + m['arguments_mb'] + m['outputs_mb'])
    rows.append(
        f"| {m['loss_chunk'] or 'off'} | {'yes' if m.get('donated') else 'no'} "
        f"| {m['temp_mb']:,.0f} | {m['arguments_mb']:,.0f} | {peak:,.0f} "
        f"| {m['logits_mb']:,.0f} |"
    )
  return '\n'.join(rows) or None


def _floor_runs(out: str, tag: str, label: str) -> List[Dict]:
  """The decode_<tag> one-thread runs' `label` figures that carry the floor
  of their matrix products (`bench decode` since benchmarks/product_floor.py).
  """
  runs = _bench_runs(out, f'decode_{tag}_t1_r{{r}}.json')
  return [
      x[label]
      for _, x in sorted(runs.items())
      if 'fraction_of_product_floor' in x.get(label, {})
  ]


def _span(values: Sequence[float], form: str) -> str:
  """'a' or 'a-b' of the smallest and largest value, each in `form`."""
  low, high = form.format(min(values)), form.format(max(values))
  return low if low == high else f'{low}-{high}'


def _floor(out: str, tag: str, label: str) -> str:
  """The share of decoding's time its matrix products take alone."""
  runs = _floor_runs(out, tag, label)
  if not runs:
    return ''
  shares = [100 * x['fraction_of_product_floor'] for x in runs]
  return f'{_span(shares, "{:.0f}")}% ({len(runs)} runs)'


def _output_product(out: str, tag: str, label: str) -> str:
  """ms a sentence of the floor's largest product, the output layer's."""
  times = []
  for x in _floor_runs(out, tag, label):
    floor = x['product_floor']
    largest = max(floor['products'], key=lambda p: p['gflop'])
    share = largest['ms'] / floor['step_ms']
    times.append(share * x['product_floor_ms_per_sentence'])
  return _span(times, '{:.1f}') if times else ''


def _sentence_ms(out: str, tag: str, label: str) -> str:
  """ms a sentence of the runs `_floor` reads."""
  times = [x['ms_per_sentence'] for x in _floor_runs(out, tag, label)]
  return _span(times, '{:.1f}') if times else ''


# machine.md's {{NAME FILE ...}}: NAME's function of FILE's JSON, and ARGS
# after FILE (a missing FILE: None, its row or section left out).
OF_FILE = {
    'batches': _batching,
    'kinds': _kinds,
    'steps': lambda result: str(result['this']['steps']),
    'cold_warm': _cold_warm,
    **{
        figure: functools.partial(_op_figure, figure)
        for figure in op_times.PAGE_FIGURES
    },
}
# {{NAME ARGS}} whose NAME's function reads the directory: function(out, ARGS).
OF_DIRECTORY = {
    'lever': _lever,
    'processes': _processes,
    'first_step': _first_step,
    'memory_rows': _memory_rows,
    # real_vocab.sh's files, named by their tag (not performance.sh's files).
    'kinds_rows': _kinds_rows,
    'batches_of': _batches_of,
    'floor': _floor,
    'output_product': _output_product,
    'sentence_ms': _sentence_ms,
}


def _aims(args: Sequence[str]):
  """(the other ARGS, {'aim': x, 'gpu_aim': y}) of a summary placeholder."""
  rest, aims = [], {}
  for arg in args:
    key, sep, number = arg.partition('=')
    if sep:
      aims[key] = float(number)
    else:
      rest.append(arg)
  return rest, aims


def _ratio_cell(pairs: Sequence[float], aim: Optional[float]) -> str:
  """'**median** [min - max] (n pairs, k at the aim)' of ratios per pair."""
  median = statistics.median(pairs)
  shown = f'**{median:.2f}**'
  if len(pairs) > 1:
    shown += f' [{min(pairs):.2f} - {max(pairs):.2f}]'
  count = f'{len(pairs)} pair' + ('s' if len(pairs) > 1 else '')
  if aim is None:
    return f'{shown} ({count})'
  met = sum(round(x, 2) >= aim for x in pairs)
  if len(pairs) == 1:
    return f"{shown} ({count}, {'at' if met else 'below'} the aim)"
  return f'{shown} ({count}, {met} at the aim)'


def _train_cell(out, first, aim, name) -> Optional[str]:
  """nmt_jax's `name` runs against the peer's, per pair."""
  ours, theirs = _bench_runs(out, name), _peer_train_runs(out, f'peer_{name}')
  main, _ = _rate_keys('tokens', first)
  pairs = _pairs(_pick(ours, main), _pick(theirs, main))
  return _ratio_cell(pairs, aim) if pairs else None


def _decode_cell(out, first, aim, tag, label) -> Optional[str]:
  """One decoding mode of the decode_<tag> runs against the peer's, per
  output token."""
  ours, theirs = _decode_runs(out, tag, 1, label)
  main, _ = _rate_keys('output_tokens', first)
  pairs = _pairs(_pick(ours, main), _pick(theirs, main))
  return _ratio_cell(pairs, aim) if pairs else None


def _median_speedups(result) -> Dict[str, float]:
  """{'tokens' or a decoding mode: the median speedup per pair} of a
  `bench --compare` file."""
  this, other = result['this'], result['other']
  if 'tokens_per_sec' in result.get('speedup', {}):
    pairs = _pairs(
        dict(enumerate(this['tokens_per_sec_runs'])),
        dict(enumerate(other['tokens_per_sec_runs'])),
    )
    return {'tokens': statistics.median(pairs)}
  return {
      mode: statistics.median(_decode_pairs(this[mode], other[mode]))
      for mode in result.get('speedup', {})
  }


def _speedup_cell(out, first, aim, name) -> Optional[str]:
  result = _load_in(out, name)
  if result is None:
    return None
  return ', '.join(
      f'x{x:.2f}' if mode == 'tokens' else f'{mode} x{x:.2f}'
      for mode, x in _median_speedups(result).items()
  )


def _processes_cell(out, first, aim, on_pattern, off_pattern):
  on, off = _bench_runs(out, on_pattern), _bench_runs(out, off_pattern)
  pairs = _pairs(_pick(on, 'tokens_per_sec'), _pick(off, 'tokens_per_sec'))
  return f'x{statistics.median(pairs):.2f}' if pairs else None


def _speedups_cell(out, first, aim, tag) -> Optional[str]:
  """The range of the kinds_*_<tag> files' median speedups, every mode."""
  medians = [
      x
      for path in _kinds_paths(out, tag)
      for x in _median_speedups(_load(path)).values()
  ]
  if not medians:
    return None
  return f'x{min(medians):.2f} - x{max(medians):.2f}'


# summary.md's {{NAME ARGS}}: function(out, first, aim, *ARGS) -> one cell.
OF_SUMMARY = {
    'train': _train_cell,
    'decode': _decode_cell,
    'speedup': _speedup_cell,
    'processes': _processes_cell,
    'speedups': _speedups_cell,
}


def _directory(out: str) -> str:
  """`out` from the repository's root where it lies inside it."""
  relative = os.path.relpath(os.path.abspath(out), ROOT)
  return out.rstrip('/') if relative.startswith('..') else relative


def _title(out: str) -> str:
  """'CPU: AMD EPYC, 2 cores', 'GPU: NVIDIA H100 80GB HBM3'."""
  platform, device, _ = _platform(out)
  name = _cpu_name(out) if platform == 'cpu' else device
  return f'{platform.upper()}: {name}'


def summary(outs: Sequence[str]) -> Optional[str]:
  """summary.md filled: a column per directory of `outs`."""
  firsts = ['cpu' if _platform(out)[0] == 'cpu' else 'wall' for out in outs]
  heads = ' | '.join(
      f"{_title(out)}, {'per CPU s' if first == 'cpu' else 'wall'}"
      f' (`{_directory(out)}/`)'
      for out, first in zip(outs, firsts)
  )
  figures = {'heads': heads, 'rules': '|'.join(['---:'] * len(outs))}

  def value(key: str) -> Optional[str]:
    if key in figures:
      return figures[key]
    name, *args = key.split()
    if name not in OF_SUMMARY:
      raise ValueError(f'summary.md: no figure {name} in {{{{{key}}}}}')
    args, aims = _aims(args)
    cells = [
        OF_SUMMARY[name](
            out, first, aims.get('aim' if first == 'cpu' else 'gpu_aim'), *args
        )
        for out, first in zip(outs, firsts)
    ]
    if all(cell is None for cell in cells):
      return None
    return ' | '.join(MISSING if cell is None else cell for cell in cells)

  return fill(template('summary.md'), value) or None


def _version(text: str):
  return tuple(int(part) for part in re.findall(r'\d+', text))


def jax_pin() -> str:
  """The JAX requirement setup.cfg's install_requires pins ('' if none)."""
  path = os.path.join(ROOT, 'setup.cfg')
  if not os.path.exists(path):
    return ''
  with open(path) as f:
    found = re.search(r'^\s*(jax\s*[<>=!~][^\n#]*)$', f.read(), re.M)
  return re.sub(r'\s+', '', found.group(1)) if found else ''


def _within(version: str, pin: str) -> bool:
  """Whether `version` satisfies `pin` ('jax>=0.10.2,<0.11')."""
  tests = {
      '>=': lambda a, b: a >= b,
      '<=': lambda a, b: a <= b,
      '==': lambda a, b: a == b,
      '!=': lambda a, b: a != b,
      '>': lambda a, b: a > b,
      '<': lambda a, b: a < b,
  }
  for op, bound in re.findall(r'(>=|<=|==|!=|>|<)([\w.]+)', pin):
    if not tests[op](_version(version), _version(bound)):
      return False
  return True


def _outside_pin(outs: Sequence[str], pin: str) -> str:
  """'GPU: ... (JAX 0.11.2) and ...': the directories whose `bench` files
  name a JAX outside `pin`."""
  outside = []
  for out in outs:
    version = _platform(out)[2]
    if pin and version != 'unknown' and not _within(version, pin):
      outside.append(f'{_title(out)} (JAX {version})')
  if len(outside) > 1:
    return ', '.join(outside[:-1]) + ' and ' + outside[-1]
  return ''.join(outside)


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


def _notes(out: str) -> str:
  """The notes the runs' author kept beside them (notes.md), if any."""
  path = os.path.join(out, 'notes.md')
  return f'{_directory(out)}/notes.md' if os.path.exists(path) else ''


def machine(out: str) -> str:
  """One directory of runs' part of the page: machine.md filled."""
  platform, device, jax_version = _platform(out)
  on_cpu = platform == 'cpu'
  first = 'cpu' if on_cpu else 'wall'
  found = glob.glob(os.path.join(out, 'train_L50_t*_r1.json'))
  counts = sorted(int(re.search(r'_t(\d+)_', p).group(1)) for p in found)
  cores = counts[-1] if on_cpu and counts and counts[-1] > 1 else None
  real_cores = _real_vocab_cores(out) if on_cpu else None
  figures = {
      'title': _title(out),
      'directory': _directory(out),
      'measured': _measured(out),
      'machine': _cpu_name(out) if on_cpu else f'{platform.upper()} {device}',
      'jax': jax_version,
      'notes': _notes(out),
      'where': 'CPU, one thread' if on_cpu else f'{platform.upper()}, {device}',
      'cores': cores and str(cores),
      'toolkit_table': _toolkit_table(out, 1, first),
      'toolkit_table all_cores': cores and _toolkit_table(out, cores, first),
      'real_vocab_table': _real_vocab_table(out, 1, first),
      'real_cores': real_cores and str(real_cores),
      'real_vocab_table all_cores': (
          real_cores and _real_vocab_table(out, real_cores, first)
      ),
  }

  def value(key: str) -> Optional[str]:
    if key in figures:
      return figures[key]
    name, *args = key.split()
    if args[-1:] == ['gpu']:  # only an accelerator's runs
      if on_cpu:
        return None
      args = args[:-1]
    if name in OF_DIRECTORY:
      return OF_DIRECTORY[name](out, *args)
    if name not in OF_FILE:
      raise ValueError(f'machine.md: no figure {name} in {{{{{key}}}}}')
    result = _load_in(out, args[0])
    return None if result is None else OF_FILE[name](result, *args[1:])

  return fill(template('machine.md'), value)


def page(outs: Sequence[str]) -> str:
  """The page's markdown from the JSON files in each directory of `outs`."""
  pin = jax_pin()
  figures = {
      'summary': summary(outs),
      'jax_pin': pin,
      'jax_outside_pin': _outside_pin(outs, pin),
      'machines': '\n\n'.join(machine(out) for out in outs),
      'no_accelerator': '',
  }
  if all(_platform(out)[0] == 'cpu' for out in outs):
    figures['no_accelerator'] = template('no_accelerator.md').strip('\n')
  return fill(template('performance.md'), figures.__getitem__) + '\n'


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
