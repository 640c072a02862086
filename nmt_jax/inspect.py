"""Inspecting runs: load workdirs, tabulate results, translate with diagnostics, plot.

Everything the notebooks show is a function here (notebooks hold no logic):

  from nmt_jax import inspect as nmt_inspect
  run = nmt_inspect.load_run('runs/memory_k64')
  nmt_inspect.plot_learning_curves([run])
  rows = nmt_inspect.results_table(['runs/a', 'runs/b'])
"""

import csv
import dataclasses
import json
import math
import os
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from nmt_jax import writers


# ----------------------------------------------------------------- workdirs


@dataclasses.dataclass
class RunRecord:
  """What a workdir holds: resolved config, metrics.jsonl records, evaluation, tau sweep."""
  workdir: str
  config: Dict[str, Any]
  metrics: List[Dict[str, Any]]
  eval_results: Optional[Dict[str, Any]]
  tau_sweep: Optional[List[Dict[str, Any]]]
  label: Optional[str] = None      # name in legends; default: the workdir's last component

  @property
  def name(self) -> str:
    return self.label or os.path.basename(os.path.normpath(self.workdir))

  def records(self, split: str) -> List[Dict[str, Any]]:
    """metrics.jsonl records of one split ('train', 'valid', 'eval'), by step."""
    return [r for r in self.metrics if r.get('split') == split]


def load_run(workdir: str) -> RunRecord:
  """Loads a workdir written by `nmt_jax.main` (config.json must exist)."""
  path = os.path.join(workdir, 'config.json')
  if not os.path.isfile(path):
    raise FileNotFoundError(f'{workdir} is not a workdir (no config.json); train first with '
                            f'python -m nmt_jax.main --config=... --workdir={workdir}')
  with open(path, encoding='utf-8') as f:
    config = json.load(f)
  metrics = writers.read_metrics(workdir) if os.path.isfile(
      os.path.join(workdir, 'metrics.jsonl')) else []
  eval_results = _read_json(os.path.join(workdir, 'eval_results.json'))
  tau = _read_json(os.path.join(workdir, 'tau_sweep.json'))
  return RunRecord(workdir, config, metrics, eval_results, tau and tau['rows'])


def _read_json(path: str):
  if not os.path.isfile(path):
    return None
  with open(path, encoding='utf-8') as f:
    return json.load(f)


def find_workdirs(root: str) -> List[str]:
  """Every directory under `root` (itself included) holding a config.json, sorted."""
  found = []
  for directory, subdirs, files in os.walk(root):
    if 'config.json' in files:
      found.append(directory)
      subdirs[:] = []            # a workdir's subdirectories (checkpoints, vocab) are not runs
    else:
      subdirs.sort()
  return sorted(found)


def workdirs_from_env(value: Optional[str] = None, variable: str = 'NMT_JAX_WORKDIRS') -> List[str]:
  """Workdirs from a comma-separated string, else from the environment variable (SPEC §8)."""
  value = value if value is not None else os.environ.get(variable, '')
  return [w.strip() for w in value.split(',') if w.strip()]


# ----------------------------------------------------------------- tables

# (column, where it comes from) for results_table; config paths are dotted.
COLUMNS = (
    ('task', 'config:data.name'),
    ('L', 'config:data.max_length'),
    ('attention', 'config:model.attention.kind'),
    ('score', 'config:model.attention.score'),
    ('K', 'config:model.attention.num_memory'),
    ('PE', 'config:model.attention.position_encoding'),
    ('hidden', 'config:model.hidden_size'),
    ('best_step', 'eval:checkpoint_step'),   # the evaluated (best-BLEU) checkpoint
    ('beam', 'eval:beam_size'),
    ('bleu', 'eval:bleu'),
    ('chrf', 'eval:chrf'),
    ('avg_window', 'eval:avg_window'),
    ('decode_ms_per_sentence', 'eval:decode_ms_per_sentence'),
    ('decode_s', 'derived'),
    ('num_sentences', 'eval:num_sentences'),
    ('train_tokens_per_sec', 'derived'),
    ('best_valid_bleu', 'derived'),
)


def _config_value(config: Dict, dotted: str):
  for part in dotted.split('.'):
    if not isinstance(config, dict) or part not in config:
      return None
    config = config[part]
  return config


def result_row(run: RunRecord, root: Optional[str] = None) -> Dict[str, Any]:
  """One row of results_table: the run's config fields and final evaluation."""
  name = os.path.relpath(run.workdir, root) if root else run.name
  row: Dict[str, Any] = {'run': name}
  evaluation = run.eval_results or {}
  for column, source in COLUMNS:
    kind, _, key = source.partition(':')
    if kind == 'config':
      row[column] = _config_value(run.config, key)
    elif kind == 'eval':
      row[column] = evaluation.get(key)
  attention = row['attention']
  if attention != 'memory':
    row['K'] = row['PE'] = None
  if attention not in ('global', 'local_m', 'local_p', 'flexible'):
    row['score'] = None
  ms, count = evaluation.get('decode_ms_per_sentence'), evaluation.get('num_sentences')
  row['decode_s'] = ms * count / 1000 if ms is not None and count else None
  train = [r['tokens_per_sec'] for r in run.records('train') if 'tokens_per_sec' in r]
  # The first logging window includes compilation: leave it out when there are others. The
  # median ignores a window stalled by something else on the machine (or a paused run).
  row['train_tokens_per_sec'] = float(np.median(train[1:] or train)) if train else None
  valid = [r['bleu'] for r in run.records('valid') if 'bleu' in r]
  row['best_valid_bleu'] = max(valid) if valid else None
  return row


def results_table(workdirs: Sequence[str], root: Optional[str] = None) -> List[Dict[str, Any]]:
  """One row per workdir (see COLUMNS); runs without an evaluation have empty eval columns."""
  return [result_row(load_run(w), root) for w in workdirs]


def write_csv(rows: Sequence[Dict[str, Any]], path: str):
  columns = list(rows[0]) if rows else []
  with open(path, 'w', encoding='utf-8', newline='') as f:
    writer = csv.DictWriter(f, columns)
    writer.writeheader()
    writer.writerows([{k: '' if v is None else v for k, v in row.items()} for row in rows])


def _cell(value) -> str:
  if value is None:
    return ''
  if isinstance(value, float):
    if math.isinf(value):
      return 'inf'
    return f'{value:,.2f}' if abs(value) < 1e5 else f'{value:,.0f}'
  return str(value)


def markdown_table(rows: Sequence[Dict[str, Any]], columns: Optional[Sequence[str]] = None) -> str:
  """A GitHub markdown table; columns that are empty in every row are left out."""
  if not rows:
    return '(no runs)'
  columns = list(columns or rows[0])
  columns = [c for c in columns if any(row.get(c) is not None for row in rows)]
  lines = ['| ' + ' | '.join(columns) + ' |', '|' + '|'.join('---' for _ in columns) + '|']
  lines += ['| ' + ' | '.join(_cell(row.get(c)) for c in columns) + ' |' for row in rows]
  return '\n'.join(lines)


# Model columns of a pivot table, and the order of its rows (Britz Table 1: none, memory, attention).
MODEL_COLUMNS = ('attention', 'score', 'K', 'PE')
ATTENTION_ORDER = ('none', 'memory', 'local_m', 'local_p', 'flexible', 'global')


def model_label(row: Dict[str, Any], leave_out: str = '') -> str:
  """'memory K=16 +PE (renorm)', 'global concat', 'none' from a results_table row
  (without the column `leave_out`, e.g. the one a pivot table spreads over its columns)."""
  parts = [str(row['attention'])] if leave_out != 'attention' else []
  if row.get('score') is not None and leave_out != 'score':
    parts.append(str(row['score']))
  if row.get('K') is not None and leave_out != 'K':
    parts.append(f'K={row["K"]}')
  if row.get('PE') not in (None, 'none') and leave_out != 'PE':
    parts.append(f'+PE ({row["PE"]})')
  return ' '.join(parts) or 'all'


def pivot_table(rows: Sequence[Dict[str, Any]], column: str,
                values: Sequence[str] = ('bleu', 'decode_s')) -> str:
  """A markdown table with one row per model and `values` under each value of `column`.

  E.g. column='L': Britz et al.'s Table 1 layout (BLEU and decoding time per length).
  Two runs of the same model and `column` value are an error (the cell would be ambiguous).
  """
  if not rows:
    return '(no runs)'
  def order(row):
    kind = row['attention']
    rank = ATTENTION_ORDER.index(kind) if kind in ATTENTION_ORDER else len(ATTENTION_ORDER)
    return (rank, row.get('K') or 0, str(row.get('PE')), str(row.get('score')))
  models: Dict[str, Dict[Any, Dict[str, Any]]] = {}
  for row in sorted(rows, key=order):
    cells = models.setdefault(model_label(row, column), {})
    if row[column] in cells:
      raise ValueError(f'runs {cells[row[column]]["run"]} and {row["run"]} are the same model at '
                       f'{column}={row[column]}; aggregate them separately')
    cells[row[column]] = row
  keys = sorted({row[column] for row in rows}, key=lambda v: (v is None, v))
  header = ['model'] + [f'{column}={key} {value}' for key in keys for value in values]
  lines = ['| ' + ' | '.join(header) + ' |', '|---' + '|---:' * (len(header) - 1) + '|']
  for label, cells in models.items():
    lines.append('| ' + ' | '.join([label] + [_cell(cells[key].get(value)) if key in cells else ''
                                              for key in keys for value in values]) + ' |')
  return '\n'.join(lines)


# ----------------------------------------------------------------- translation with diagnostics


def load_config(workdir: str):
  """The workdir's resolved config (config.json) as a ConfigDict.

  Fields added to nmt_jax since the run was made keep their defaults.
  """
  from nmt_jax import default_config  # pylint: disable=g-import-not-at-top
  with open(os.path.join(workdir, 'config.json'), encoding='utf-8') as f:
    stored = json.load(f)
  config = default_config.get_config()
  _merge(config, stored)
  return config


def _merge(config, stored: Dict[str, Any]):
  for key, value in stored.items():
    if key in config and isinstance(value, dict):
      _merge(config[key], value)
    elif key in config:
      current = config[key]
      config[key] = tuple(value) if isinstance(current, tuple) else value


@dataclasses.dataclass
class Translation:
  """One decoded sentence with its attention, cut to real tokens (EOS included).

  weights: [T, S] attention over source positions at each target step (memory:
  the effective sum_k beta_tk alpha_sk). Memory also has alpha [S, K] (encoder
  scores) and beta [T, K] (decoder scores); flexible has strength g(t) [T] and
  the kept interval first/last [T] (whole sentence when tau = inf).
  """
  source: List[str]
  hypothesis: List[str]
  weights: Optional[np.ndarray]
  extras: Dict[str, np.ndarray]
  attention: str


def translate_with_attention(workdir: str, sentences: Sequence[str], beam_size: int = 1,
                             overrides: Optional[Dict[str, Any]] = None) -> List[Translation]:
  """Decodes `sentences` with the workdir's best checkpoint, keeping the attention per step.

  `overrides` changes config fields first, e.g. {'model.attention.tau': 1.2}.
  """
  import jax  # pylint: disable=g-import-not-at-top  (the table functions need no JAX)
  from nmt_jax import data, decode, models, train  # pylint: disable=g-import-not-at-top
  config = load_config(workdir)
  for field, value in (overrides or {}).items():
    *parents, leaf = field.split('.')
    node = config
    for part in parents:
      node = node[part]
    node[leaf] = value
  config, task, model, _, params, _ = train.restore_for_inference(config, workdir)
  split = data.sentences_split(list(sentences), task.source_vocab)
  longest = max(len(s) for s in split.source)
  source = data.make_batch(split, range(len(split)), longest)['source']
  decode_fn = decode.make_decode_fn(model, config.decode, beam_size, with_diagnostics=True)
  out = jax.device_get(decode_fn(params, source))
  diagnostics = out.diagnostics or {}
  alpha = None
  if config.model.attention.kind == 'memory':
    cache, _ = model.apply({'params': params}, source, method=models.Seq2Seq.encode)
    alpha = np.asarray(jax.device_get(cache['alpha']))                    # [B, S, K]
  translations = []
  for i, tokens in enumerate(np.asarray(out.tokens)):
    steps = int(np.sum(tokens != 0))
    length = len(split.source[i])
    hypothesis = task.target_vocab.decode(tokens[:steps]).split()
    extras = {k: np.asarray(v[i, :steps]) for k, v in diagnostics.items()
              if k not in ('weights', 'window') and np.ndim(v) == 2}
    weights = diagnostics.get('weights')
    weights = None if weights is None else np.asarray(weights[i, :steps])
    if alpha is not None:
      extras['alpha'] = alpha[i, :length]                                  # [S, K]
      extras['beta'] = weights                                             # [T, K]
      weights = weights @ alpha[i, :length].T                              # [T, S]
    elif weights is not None:
      weights = weights[:, :length]
    translations.append(Translation(
        task.source_vocab.decode(split.source[i]).split() + ['</s>'],
        hypothesis + ['</s>'], weights, extras, config.model.attention.kind))
  return translations


def sample_sentences(workdir: str, count: int = 3) -> List[str]:
  """The first `count` source sentences of the workdir's validation split."""
  from nmt_jax import data  # pylint: disable=g-import-not-at-top
  config = load_config(workdir)
  task = data.load_task(config.data, config.seed, workdir)
  return list(task.eval.source_text[:count])


# ----------------------------------------------------------------- plots (matplotlib)


def _pyplot():
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError('plots need matplotlib: pip install -e ".[notebooks]"') from e
  if 'ipykernel' not in __import__('sys').modules:
    matplotlib.use('Agg')   # no display needed outside notebooks
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def plot_learning_curves(runs: Sequence[RunRecord], path: Optional[str] = None):
  """Training loss and validation BLEU against steps, one line per run."""
  plt = _pyplot()
  fig, (ax_loss, ax_bleu) = plt.subplots(
      1, 2, figsize=(11 + 2.5 * max(1, -(-len(runs) // 20)), 4.5))
  for run in runs:
    train = run.records('train')
    ax_loss.plot([r['step'] for r in train], [r['loss'] for r in train], label=run.name)
    valid = [r for r in run.records('valid') if 'bleu' in r]
    ax_bleu.plot([r['step'] for r in valid], [r['bleu'] for r in valid], marker='o',
                 label=run.name)
  ax_loss.set(xlabel='step', ylabel='training loss (per target token)', yscale='log')
  ax_bleu.set(xlabel='step', ylabel='validation BLEU')
  for ax in (ax_loss, ax_bleu):
    ax.grid(alpha=0.3)
  # Outside the axes, in columns of 20: a sweep has dozens of runs.
  ax_bleu.legend(fontsize='x-small', loc='upper left', bbox_to_anchor=(1.02, 1.0),
                 ncol=max(1, -(-len(runs) // 20)))
  return _finish(fig, path)


def _finish(fig, path):
  fig.tight_layout()
  if path:
    fig.savefig(path, dpi=110)
  return fig


def plot_attention(translation: Translation, path: Optional[str] = None, ax=None):
  """Heatmap of the attention weights [T, S]: target steps down, source tokens across."""
  plt = _pyplot()
  if translation.weights is None:
    raise ValueError(f'attention kind {translation.attention!r} has no attention weights')
  fig = None
  if ax is None:
    fig, ax = plt.subplots(figsize=(0.35 * len(translation.source) + 2,
                                    0.35 * len(translation.hypothesis) + 1.5))
  image = ax.imshow(translation.weights, cmap='Greys', vmin=0, aspect='auto')
  _label_axes(ax, translation)
  ax.set_title(f'{translation.attention} attention')
  if fig is not None:
    fig.colorbar(image, ax=ax, fraction=0.04)
    return _finish(fig, path)
  return ax.figure


def _label_axes(ax, translation: Translation):
  ax.set_xticks(range(len(translation.source)), translation.source, rotation=90, fontsize=8)
  ax.set_yticks(range(len(translation.hypothesis)), translation.hypothesis, fontsize=8)
  ax.set_xlabel('source')
  ax.set_ylabel('hypothesis')


def plot_vision_span(translation: Translation, path: Optional[str] = None):
  """Flexible attention (Shu & Nakayama Fig. 1b, 4): the kept source interval per step
  over the attention weights, and the strength g(t) of the penalty per step."""
  plt = _pyplot()
  if translation.attention != 'flexible':
    raise ValueError(f'vision spans exist for flexible attention, not {translation.attention!r}')
  steps = len(translation.hypothesis)
  fig, (ax, ax_g) = plt.subplots(1, 2, figsize=(0.35 * len(translation.source) + 6,
                                                0.35 * steps + 1.5),
                                 gridspec_kw={'width_ratios': [3, 1]}, sharey=True)
  ax.imshow(translation.weights, cmap='Greys', vmin=0, aspect='auto')
  first, last = translation.extras['first'], translation.extras['last']
  ax.barh(range(steps), last - first + 1, left=first - 0.5, height=0.8, fill=False,
          edgecolor='tab:red', label='kept interval')
  ax.plot(translation.extras['previous_center'], range(steps), '.', color='tab:blue',
          label='previous focus p_{t-1}')
  _label_axes(ax, translation)
  ax.legend(fontsize='small', loc='lower left')
  ax.set_title('vision span per step')
  ax_g.plot(translation.extras['strength'], range(steps), marker='o')
  ax_g.set(xlabel='strength g(t)')
  ax_g.grid(alpha=0.3)
  return _finish(fig, path)


def plot_memory_attention(translation: Translation, path: Optional[str] = None):
  """Memory attention (Britz et al. Fig. 6-8): encoder scores alpha [S, K], decoder scores
  beta [T, K] and their product, the attention over source positions [T, S]."""
  plt = _pyplot()
  if translation.attention != 'memory':
    raise ValueError(f'memory maps exist for memory attention, not {translation.attention!r}')
  fig, axes = plt.subplots(1, 3, figsize=(15, 0.3 * len(translation.hypothesis) + 3))
  axes[0].imshow(translation.extras['alpha'].T, cmap='Greys', vmin=0, aspect='auto')
  axes[0].set_xticks(range(len(translation.source)), translation.source, rotation=90, fontsize=8)
  axes[0].set(xlabel='source', ylabel='memory slot k', title='encoder scores alpha')
  axes[1].imshow(translation.extras['beta'], cmap='Greys', vmin=0, aspect='auto')
  axes[1].set_yticks(range(len(translation.hypothesis)), translation.hypothesis, fontsize=8)
  axes[1].set(xlabel='memory slot k', ylabel='hypothesis', title='decoder scores beta')
  axes[2].imshow(translation.weights, cmap='Greys', vmin=0, aspect='auto')
  _label_axes(axes[2], translation)
  axes[2].set_title('beta x alpha (attention over the source)')
  return _finish(fig, path)


def plot_tau_tradeoff(runs: Sequence[RunRecord], references: Sequence[RunRecord] = (),
                      path: Optional[str] = None):
  """Shu & Nakayama Fig. 3: BLEU against the mean window (fraction of the source) over tau,
  one curve per run with a tau sweep; `references` (e.g. global, local-p) as points."""
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(6.5, 4.5))
  for run in runs:
    if not run.tau_sweep:
      raise ValueError(f'{run.workdir} has no tau_sweep.json; run python -m nmt_jax.sweep tau '
                       f'--config=... --workdir={run.workdir}')
    rows = sorted(run.tau_sweep, key=lambda r: r['avg_window_fraction'])
    x = [100 * r['avg_window_fraction'] for r in rows]
    ax.plot(x, [r['bleu'] for r in rows], marker='o', label=run.name)
    for r, xi in zip(rows, x):
      ax.annotate(f"{float(r['tau']):g}", (xi, r['bleu']), textcoords='offset points',
                  xytext=(3, -10), fontsize=7)
  for run in references:
    result = run.eval_results or {}
    if 'bleu' in result:
      ax.plot(100 * result['avg_window_fraction'], result['bleu'], marker='s', linestyle='',
              label=f'{run.name} (beam {result["beam_size"]})')
  ax.set(xlabel='mean attention window (% of the source)', ylabel='BLEU',
         title='BLEU vs window over tau')
  ax.grid(alpha=0.3)
  ax.legend(fontsize='small')
  return _finish(fig, path)


# Axis labels for the results columns that plots use; any other column is its own label.
AXIS_LABELS = {
    'K': 'K (memory slots)',
    'L': 'L (maximum source length)',
    'bleu': 'BLEU',
    'chrf': 'chrF',
    'decode_s': 'decoding time of the split (s)',
    'decode_ms_per_sentence': 'decoding time (ms / sentence)',
    'avg_window': 'mean attention window (positions)',
}


def plot_results(rows: Sequence[Dict[str, Any]], x: str, y: str, group,
                 path: Optional[str] = None, logx: bool = False,
                 baselines: Sequence[Dict[str, Any]] = ()):
  """Rows' `y` against `x`, one line per value of `group` (e.g. BLEU against K per L).

  group: a column or a tuple of columns; the first picks the colour, the others the
  line style (e.g. ('L', 'PE'): one colour per length, solid/dashed per encoding).
  baselines: rows without an `x` (e.g. no attention, global attention), drawn as
  horizontal lines in their first-group colour, labelled with model_label.
  """
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(7.5, 4.8))
  columns = (group,) if isinstance(group, str) else tuple(group)
  key_of = lambda row: tuple(row.get(c) for c in columns)
  groups: Dict[Any, List] = {}
  for row in rows:
    if row.get(x) is not None and row.get(y) is not None:
      groups.setdefault(key_of(row), []).append((row[x], row[y]))
  order = lambda v: (0, v, '') if isinstance(v, (int, float)) else (1, 0, str(v))
  first_values = sorted({k[0] for k in groups} | {r.get(columns[0]) for r in baselines},
                        key=order)
  colour = {v: f'C{i % 10}' for i, v in enumerate(first_values)}
  styles = ('-', '--', ':', '-.')
  rest_values = sorted({k[1:] for k in groups}, key=str)
  for key in sorted(groups, key=lambda k: (order(k[0]), str(k[1:]))):
    points = sorted(groups[key])
    label = ', '.join(f'{c}={v}' for c, v in zip(columns, key))
    ax.plot([p[0] for p in points], [p[1] for p in points], marker='o', label=label,
            color=colour[key[0]], linestyle=styles[rest_values.index(key[1:]) % len(styles)])
  xs = [p[0] for points in groups.values() for p in points] or [1]
  edge = max(xs) * 1.5 if logx else max(xs) + 0.05 * (max(xs) - min(xs) or 1)
  markers = {}
  for row in sorted(baselines, key=lambda r: order(r.get(columns[0]))):
    if row.get(y) is None:
      continue
    name = model_label(row, leave_out=columns[0])
    marker = markers.setdefault(name, 'x+*sd^v'[len(markers) % 7])
    ax.axhline(row[y], color=colour[row.get(columns[0])], linewidth=0.8, alpha=0.6)
    ax.plot([edge], [row[y]], marker=marker, linestyle='none',
            color=colour[row.get(columns[0])],
            label=f'{columns[0]}={row.get(columns[0])}, {name}')
  ax.set(xlabel=AXIS_LABELS.get(x, x), ylabel=AXIS_LABELS.get(y, y),
         xscale='log' if logx else 'linear')
  ax.grid(alpha=0.3)
  ax.legend(fontsize='small', loc='center left', bbox_to_anchor=(1.01, 0.5))
  return _finish(fig, path)


def plot_translation(translation: Translation, path: Optional[str] = None):
  """The plot that shows a translation's attention best for its kind (None: no attention)."""
  if translation.attention == 'memory':
    return plot_memory_attention(translation, path)
  if translation.attention == 'flexible':
    return plot_vision_span(translation, path)
  if translation.weights is None:
    return None
  return plot_attention(translation, path)


def summary(run: RunRecord) -> Dict[str, Any]:
  """The headline facts of a run: what it is, how far it got, its final evaluation."""
  row = result_row(run)
  train = run.records('train')
  row['last_step'] = train[-1]['step'] if train else 0
  row['num_steps'] = _config_value(run.config, 'train.num_steps')
  return {k: v for k, v in row.items() if v is not None}
