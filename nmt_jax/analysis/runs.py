"""Runs as data: load workdirs, tabulate results (CSV, markdown, pivot tables).

  from nmt_jax.analysis import runs
  run = runs.load_run('runs/memory_k64')
  rows = runs.results_table(['runs/a', 'runs/b'])
  print(runs.markdown_table(rows))

Plots of runs are in plots.py, translations with their attention in
attention_maps.py; the notebooks call these functions and hold no logic.
"""

import csv
import dataclasses
import json
import math
import os
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from nmt_jax import attention
from nmt_jax.system import errors
from nmt_jax.system import workdir_files
from nmt_jax.workdir import writers

# ----------------------------------------------------------------- workdirs


@dataclasses.dataclass
class RunRecord:
  """What a workdir holds.

  Its resolved config, metrics.jsonl records, evaluation and tau sweep.
  """

  workdir: str
  config: Dict[str, Any]
  metrics: List[Dict[str, Any]]
  eval_results: Optional[Dict[str, Any]]
  tau_sweep: Optional[List[Dict[str, Any]]]
  label: Optional[str] = (
      None  # name in legends; default: the workdir's last component
  )

  @property
  def name(self) -> str:
    return self.label or os.path.basename(os.path.normpath(self.workdir))

  def records(self, split: str) -> List[Dict[str, Any]]:
    """One split's metrics.jsonl records ('train', 'valid', 'eval'), by step."""
    return [r for r in self.metrics if r.get('split') == split]


def load_run(workdir: str) -> RunRecord:
  """Loads a workdir written by `nmt_jax.main` (config.json must exist)."""
  path = os.path.join(workdir, workdir_files.CONFIG)
  members = None if os.path.isfile(path) else _ensemble_members(workdir)
  if members:
    raise FileNotFoundError(
        f'{workdir} holds the evaluation of an ensemble of'
        f' {", ".join(members)}, not a training run; give those'
        ' workdirs (its BLEU is in its eval_results.json)'
    )
  if not os.path.isfile(path):
    raise FileNotFoundError(
        f'{workdir} is not a workdir (no config.json); train first with '
        f'python -m nmt_jax.main --config=... --workdir={workdir}'
    )
  with open(path, encoding='utf-8') as f:
    config = json.load(f)
  metrics = writers.read_metrics(workdir)
  eval_results = _read_json(os.path.join(workdir, workdir_files.EVAL_RESULTS))
  tau = _read_json(os.path.join(workdir, workdir_files.TAU_SWEEP))
  return RunRecord(workdir, config, metrics, eval_results, tau and tau['rows'])


def _ensemble_members(folder: str):
  """The workdirs of the ensemble `folder` holds the evaluation of, if any."""
  try:
    results = _read_json(os.path.join(folder, workdir_files.EVAL_RESULTS))
  except ValueError:
    return None
  return results.get('ensemble') if isinstance(results, dict) else None


def _read_json(path: str):
  if not os.path.isfile(path):
    return None
  with open(path, encoding='utf-8') as f:
    return json.load(f)


def find_workdirs(root: str) -> List[str]:
  """Directories under `root` (itself included) with a config.json, sorted."""
  found = []
  for directory, subdirs, files in os.walk(root):
    if workdir_files.CONFIG in files:
      found.append(directory)
      # a workdir's subdirectories (checkpoints, vocab) are not runs
      subdirs[:] = []
    else:
      subdirs.sort()
  return sorted(found)


def workdirs_from_env(
    value: Optional[str] = None, variable: str = 'NMT_JAX_WORKDIRS'
) -> List[str]:
  """Workdirs from a comma-separated string, else from the environment variable.

  The notebooks read NMT_JAX_WORKDIR (one) and NMT_JAX_WORKDIRS
  (comma-separated).
  """
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
    ('reversed', 'config:data.reverse_source'),
    ('hidden', 'config:model.hidden_size'),
    (
        'best_step',
        'eval:checkpoint_step',
    ),  # the evaluated (best-BLEU) checkpoint
    ('beam', 'eval:beam_size'),
    ('bleu', 'eval:bleu'),
    ('chrf', 'eval:chrf'),
    ('avg_window', 'eval:avg_window'),
    # Shu & Nakayama's ratio of means, and the mean of per-sentence ones.
    ('window_reduction', 'eval:window_reduction'),
    ('window_reduction_per_sentence', 'eval:window_reduction_per_sentence'),
    ('avg_computed', 'eval:avg_computed'),
    ('avg_source_length', 'eval:avg_source_length'),
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
  # An attention field's column is empty for kinds that do not read the field.
  fields = _attention_fields(row['attention'])
  for column, source in COLUMNS:
    field = source.partition('config:model.attention.')[2]
    if field and field != 'kind' and fields is not None and field not in fields:
      row[column] = None
  ms, count = evaluation.get('decode_ms_per_sentence'), evaluation.get(
      'num_sentences'
  )
  row['decode_s'] = ms * count / 1000 if ms is not None and count else None
  train = [
      r['tokens_per_sec'] for r in run.records('train') if 'tokens_per_sec' in r
  ]
  # The first logging window includes compilation: leave it out when there
  # are others. The median ignores a window stalled by something else on the
  # machine (or a paused run).
  row['train_tokens_per_sec'] = (
      float(np.median(train[1:] or train)) if train else None
  )
  valid = [r['bleu'] for r in run.records('valid') if 'bleu' in r]
  row['best_valid_bleu'] = max(valid) if valid else None
  return row


def results_table(
    workdirs: Sequence[str], root: Optional[str] = None
) -> List[Dict[str, Any]]:
  """One row per workdir (see COLUMNS).

  Runs without an evaluation have empty eval columns.
  """
  return [result_row(load_run(w), root) for w in workdirs]


def write_csv(rows: Sequence[Dict[str, Any]], path: str):
  columns = list(rows[0]) if rows else []
  with open(path, 'w', encoding='utf-8', newline='') as f:
    writer = csv.DictWriter(f, columns)
    writer.writeheader()
    writer.writerows(
        [{k: '' if v is None else v for k, v in row.items()} for row in rows]
    )


def _cell(value) -> str:
  if value is None:
    return ''
  if isinstance(value, float):
    if math.isinf(value):
      return 'inf'
    return f'{value:,.2f}' if abs(value) < 1e5 else f'{value:,.0f}'
  return str(value)


def markdown_table(
    rows: Sequence[Dict[str, Any]], columns: Optional[Sequence[str]] = None
) -> str:
  """A GitHub markdown table; columns empty in every row are left out."""
  if not rows:
    return '(no runs)'
  columns = list(columns or rows[0])
  columns = [c for c in columns if any(row.get(c) is not None for row in rows)]
  lines = [
      '| ' + ' | '.join(columns) + ' |',
      '|' + '|'.join('---' for _ in columns) + '|',
  ]
  lines += [
      '| ' + ' | '.join(_cell(row.get(c)) for c in columns) + ' |'
      for row in rows
  ]
  return '\n'.join(lines)


def length_table(workdirs: Sequence[str], root: Optional[str] = None) -> str:
  """BLEU per source-length bin of each run's evaluation, as markdown.

  One row per workdir, one column per bin of eval_results.json's
  bleu_by_source_length (headed by its sentence count where every run
  agrees on it); runs evaluated before the breakdown existed are left out.
  """
  rows, counts = [], {}
  for workdir in workdirs:
    run = load_run(workdir)
    bins = (run.eval_results or {}).get('bleu_by_source_length')
    if not bins:
      continue
    name = os.path.relpath(workdir, root) if root else run.name
    rows.append({'run': name, **{b['source_length']: b['bleu'] for b in bins}})
    for b in bins:
      counts.setdefault(b['source_length'], set()).add(b['sentences'])
  if not rows:
    return '(no run has a BLEU by source length: evaluate them again)'
  labels = sorted(counts, key=lambda label: int(label.split('-')[0]))
  header = {
      label: (
          f'{label} ({next(iter(counts[label]))})'
          if len(counts[label]) == 1
          else label
      )
      for label in labels
  }
  table = [
      {'run': row['run'], **{header[k]: row.get(k) for k in labels}}
      for row in rows
  ]
  return markdown_table(table, ['run'] + [header[k] for k in labels])


def _attention_fields(kind):
  """The model.attention fields a registered kind reads.

  None for a kind not registered here.
  """
  try:
    return attention.get(kind).FIELDS
  except errors.ConfigError:
    return None


def _rank(kind) -> int:
  """Row order of a kind (Britz et al.'s Table 1: none, memory, ..., global)."""
  try:
    return attention.get(kind).RANK
  except errors.ConfigError:
    return 1_000


def model_label(row: Dict[str, Any], leave_out: str = '') -> str:
  """The model label of a results_table row, e.g. 'memory K=16 +PE (renorm)'.

  More examples: 'global concat', 'none', 'local-p general reversed'. The label leaves out the column
  `leave_out`, e.g. the one a pivot table spreads over its columns.
  """
  parts = [str(row['attention'])] if leave_out != 'attention' else []
  if row.get('score') is not None and leave_out != 'score':
    parts.append(str(row['score']))
  if row.get('K') is not None and leave_out != 'K':
    parts.append(f'K={row["K"]}')
  if row.get('PE') not in (None, 'none') and leave_out != 'PE':
    parts.append(f'+PE ({row["PE"]})')
  if row.get('reversed') and leave_out != 'reversed':
    parts.append('reversed')  # Luong et al.'s source reversal
  return ' '.join(parts) or 'all'


def pivot_table(
    rows: Sequence[Dict[str, Any]],
    column: str,
    values: Sequence[str] = ('bleu', 'decode_s'),
) -> str:
  """A markdown table: one row per model, `values` under each value of `column`.

  E.g. column='L': Britz et al.'s Table 1 layout (BLEU and decoding time per
  length). Two runs of the same model and `column` value are an error (the
  cell would be ambiguous).
  """
  if not rows:
    return '(no runs)'

  def order(row):
    return (
        _rank(row['attention']),
        row.get('K') or 0,
        str(row.get('PE')),
        str(row.get('score')),
    )

  models: Dict[str, Dict[Any, Dict[str, Any]]] = {}
  for row in sorted(rows, key=order):
    cells = models.setdefault(model_label(row, column), {})
    if row[column] in cells:
      raise ValueError(
          f'runs {cells[row[column]]["run"]} and {row["run"]} are the same'
          f' model at {column}={row[column]}; aggregate them separately'
      )
    cells[row[column]] = row
  keys = sorted({row[column] for row in rows}, key=lambda v: (v is None, v))
  header = ['model'] + [
      f'{column}={key} {value}' for key in keys for value in values
  ]
  lines = [
      '| ' + ' | '.join(header) + ' |',
      '|---' + '|---:' * (len(header) - 1) + '|',
  ]
  for label, cells in models.items():
    lines.append(
        '| '
        + ' | '.join(
            [label]
            + [
                _cell(cells[key].get(value)) if key in cells else ''
                for key in keys
                for value in values
            ]
        )
        + ' |'
    )
  return '\n'.join(lines)


def summary(run: RunRecord) -> Dict[str, Any]:
  """The headline facts of a run.

  What it is, how far it got, its final evaluation.
  """
  row = result_row(run)
  train = run.records('train')
  row['last_step'] = train[-1]['step'] if train else 0
  row['num_steps'] = _config_value(run.config, 'train.num_steps')
  return {k: v for k, v in row.items() if v is not None}
