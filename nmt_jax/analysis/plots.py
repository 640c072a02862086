"""Plots of runs: curves, attention, trade-offs.

Needs matplotlib (the 'notebooks' extra). Every function returns the figure
and, given a path, also writes it (PNG).
"""

import math
import sys
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from nmt_jax import attention
from nmt_jax.analysis import attention_maps
from nmt_jax.analysis import runs as runs_lib

Translation = attention_maps.Translation
RunRecord = runs_lib.RunRecord


def _pyplot():
  try:
    # Optional: the notebooks extra.
    import matplotlib  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        'plots need matplotlib: pip install -e ".[notebooks]"'
    ) from e
  if 'ipykernel' not in sys.modules:
    matplotlib.use('Agg')  # no display needed outside notebooks
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  return plt


def plot_learning_curves(runs: Sequence[RunRecord], path: Optional[str] = None):
  """Training loss and validation BLEU against steps, one line per run."""
  plt = _pyplot()
  fig, (ax_loss, ax_bleu) = plt.subplots(
      1, 2, figsize=(11 + 2.5 * max(1, -(-len(runs) // 20)), 4.5)
  )
  for run in runs:
    train = run.records('train')
    ax_loss.plot(
        [r['step'] for r in train], [r['loss'] for r in train], label=run.name
    )
    valid = [r for r in run.records('valid') if 'bleu' in r]
    ax_bleu.plot(
        [r['step'] for r in valid],
        [r['bleu'] for r in valid],
        marker='o',
        label=run.name,
    )
  ax_loss.set(
      xlabel='step', ylabel='training loss (per target token)', yscale='log'
  )
  ax_bleu.set(xlabel='step', ylabel='validation BLEU')
  for ax in (ax_loss, ax_bleu):
    ax.grid(alpha=0.3)
  # Outside the axes, in columns of 20: a sweep has dozens of runs.
  ax_bleu.legend(
      fontsize='x-small',
      loc='upper left',
      bbox_to_anchor=(1.02, 1.0),
      ncol=max(1, -(-len(runs) // 20)),
  )
  return _finish(fig, path)


def _finish(fig, path):
  fig.tight_layout()
  if path:
    fig.savefig(path, dpi=110)
  return fig


def plot_attention(
    translation: Translation, path: Optional[str] = None, ax=None
):
  """Heatmap of the attention weights [T, S].

  Target steps go down, source tokens across.
  """
  plt = _pyplot()
  if translation.weights is None:
    raise ValueError(
        f'attention kind {translation.attention!r} has no attention weights'
    )
  fig = None
  if ax is None:
    fig, ax = plt.subplots(
        figsize=(
            0.35 * len(translation.source) + 2,
            0.35 * len(translation.hypothesis) + 1.5,
        )
    )
  image = ax.imshow(translation.weights, cmap='Greys', vmin=0, aspect='auto')
  _label_axes(ax, translation)
  ax.set_title(f'{translation.attention} attention')
  if fig is not None:
    fig.colorbar(image, ax=ax, fraction=0.04)
    return _finish(fig, path)
  return ax.figure


def _label_axes(ax, translation: Translation):
  ax.set_xticks(
      range(len(translation.source)),
      translation.source,
      rotation=90,
      fontsize=8,
  )
  ax.set_yticks(
      range(len(translation.hypothesis)), translation.hypothesis, fontsize=8
  )
  ax.set_xlabel('source')
  ax.set_ylabel('hypothesis')


def plot_vision_span(translation: Translation, path: Optional[str] = None):
  """Flexible attention (Shu & Nakayama Fig. 1b, 4).

  The kept source interval per step over the attention weights, and the
  strength g(t) of the penalty per step.
  """
  plt = _pyplot()
  if 'first' not in translation.extras:
    raise ValueError(
        'vision spans exist for flexible attention, not'
        f' {translation.attention!r}'
    )
  steps = len(translation.hypothesis)
  fig, (ax, ax_g) = plt.subplots(
      1,
      2,
      figsize=(0.35 * len(translation.source) + 6, 0.35 * steps + 1.5),
      gridspec_kw={'width_ratios': [3, 1]},
      sharey=True,
  )
  ax.imshow(translation.weights, cmap='Greys', vmin=0, aspect='auto')
  first, last = translation.extras['first'], translation.extras['last']
  kept = np.flatnonzero(last >= first)  # not a reversed window of EOS alone
  ax.barh(
      kept,
      (last - first + 1)[kept],
      left=(first - 0.5)[kept],
      height=0.8,
      fill=False,
      edgecolor='tab:red',
      label='kept interval',
  )
  # A reversed source's window reaching EOS keeps it apart from its words.
  apart = translation.extras.get('eos_kept', np.zeros(steps, bool)) & (
      last < len(translation.source) - 1
  )
  ax.barh(
      np.flatnonzero(apart),
      1,
      left=len(translation.source) - 1.5,
      height=0.8,
      fill=False,
      edgecolor='tab:red',
  )
  ax.plot(
      translation.extras['previous_center'],
      range(steps),
      '.',
      color='tab:blue',
      label='previous focus p_{t-1}',
  )
  _label_axes(ax, translation)
  ax.legend(fontsize='small', loc='lower left')
  ax.set_title('vision span per step')
  ax_g.plot(translation.extras['strength'], range(steps), marker='o')
  ax_g.set(xlabel='strength g(t)')
  ax_g.grid(alpha=0.3)
  return _finish(fig, path)


def plot_memory_attention(translation: Translation, path: Optional[str] = None):
  """Memory attention (Britz et al. Fig. 6-8).

  Encoder scores alpha [S, K], decoder scores beta [T, K] and their product,
  the attention over source positions [T, S].
  """
  plt = _pyplot()
  if 'alpha' not in translation.extras:
    raise ValueError(
        f'memory maps exist for memory attention, not {translation.attention!r}'
    )
  fig, axes = plt.subplots(
      1, 3, figsize=(15, 0.3 * len(translation.hypothesis) + 3)
  )
  axes[0].imshow(
      translation.extras['alpha'].T, cmap='Greys', vmin=0, aspect='auto'
  )
  axes[0].set_xticks(
      range(len(translation.source)),
      translation.source,
      rotation=90,
      fontsize=8,
  )
  axes[0].set(
      xlabel='source', ylabel='memory slot k', title='encoder scores alpha'
  )
  axes[1].imshow(
      translation.extras['beta'], cmap='Greys', vmin=0, aspect='auto'
  )
  axes[1].set_yticks(
      range(len(translation.hypothesis)), translation.hypothesis, fontsize=8
  )
  axes[1].set(
      xlabel='memory slot k', ylabel='hypothesis', title='decoder scores beta'
  )
  axes[2].imshow(translation.weights, cmap='Greys', vmin=0, aspect='auto')
  _label_axes(axes[2], translation)
  axes[2].set_title('beta x alpha (attention over the source)')
  return _finish(fig, path)


def _windows_over_source(run: RunRecord) -> bool:
  """Whether the run's window is source positions (not memory's K slots:
  K / S is far above 100% and would squash the tau curves)."""
  kind = run.config.get('model', {}).get('attention', {}).get('kind')
  return kind in attention.kinds() and attention.get(kind).PLOT in (
      'heatmap',
      'vision_span',
  )


def _decoding(result) -> str:
  """How an eval_results.json decoded: 'beam 5', or 'sampled'."""
  if 'beam_size' in result:
    return f'beam {result["beam_size"]}'
  return 'sampled'


def plot_tau_tradeoff(
    runs: Sequence[RunRecord],
    references: Sequence[RunRecord] = (),
    path: Optional[str] = None,
    measure: str = 'window',
):
  """Shu & Nakayama Fig. 3: BLEU against the mean window over tau.

  The window ('window': positions attended, Shu's measure; 'computed':
  positions actually scored) is a fraction of the source. One curve per run
  with a tau sweep (and beam size, if it swept with several); `references`
  (e.g. global, local-p) as points, but for kinds without a window over the
  source (memory's slots, none).
  """
  key = f'avg_{measure}_fraction'
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(6.5, 4.5))
  for run in runs:
    if not run.tau_sweep:
      raise ValueError(
          f'{run.workdir} has no tau_sweep.json; run python -m nmt_jax.sweep'
          f' tau --config=... --workdir={run.workdir}'
      )
    # The test split's curve (a sweep on dev chose tau for it).
    split = (
        'test' if any(r.get('split') == 'test' for r in run.tau_sweep) else None
    )
    swept = [
        r for r in run.tau_sweep if split is None or r.get('split') == split
    ]
    beams = sorted({r.get('beam_size') for r in swept}, key=str)
    for beam in beams:  # one curve per beam size
      rows = sorted(
          (r for r in swept if r.get('beam_size') == beam),
          key=lambda r: float(r['tau']),
      )
      label = run.name if len(beams) == 1 else f'{run.name} (beam {beam})'
      x = [100 * r.get(key, math.nan) for r in rows]
      ax.plot(x, [r['bleu'] for r in rows], marker='o', label=label)
      for r, xi in zip(rows, x):
        ax.annotate(
            f"{float(r['tau']):g}",
            (xi, r['bleu']),
            textcoords='offset points',
            xytext=(3, -10),
            fontsize=7,
        )
  for run in references:
    result = run.eval_results or {}
    if 'bleu' in result and key in result and _windows_over_source(run):
      ax.plot(
          100 * result[key],
          result['bleu'],
          marker='s',
          linestyle='',
          label=f'{run.name} ({_decoding(result)})',
      )
  ax.set(
      xlabel=(
          'mean attention window (% of the source)'
          if measure == 'window'
          else 'mean positions scored (% of the source)'
      ),
      ylabel='BLEU',
      title=(
          f'BLEU vs {"window" if measure == "window" else "positions scored"}'
          ' over tau'
      ),
  )
  ax.grid(alpha=0.3)
  ax.legend(fontsize='small')
  return _finish(fig, path)


# Axis labels for the results columns that plots use;
# any other column is its own label.
AXIS_LABELS = {
    'K': 'K (memory slots)',
    'L': 'L (maximum source length)',
    'bleu': 'BLEU',
    'chrf': 'chrF',
    'decode_s': 'decoding time of the split (s)',
    'decode_ms_per_sentence': 'decoding time (ms / sentence)',
    'avg_window': 'mean attention window (positions)',
}


def plot_results(
    rows: Sequence[Dict[str, Any]],
    x: str,
    y: str,
    group,
    path: Optional[str] = None,
    logx: bool = False,
    baselines: Sequence[Dict[str, Any]] = (),
):
  """Rows' `y` against `x`, one line per value of `group`.

  E.g. BLEU against K, one line per L.

  group: a column or a tuple of columns; the first picks the colour, the
  others the line style (e.g. ('L', 'PE'): one colour per length,
  solid/dashed per encoding).
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
  order = (
      lambda v: (0, v, '') if isinstance(v, (int, float)) else (1, 0, str(v))
  )
  first_values = sorted(
      {k[0] for k in groups} | {r.get(columns[0]) for r in baselines}, key=order
  )
  colour = {v: f'C{i % 10}' for i, v in enumerate(first_values)}
  styles = ('-', '--', ':', '-.')
  rest_values = sorted({k[1:] for k in groups}, key=str)
  for key in sorted(groups, key=lambda k: (order(k[0]), str(k[1:]))):
    points = sorted(groups[key])
    label = ', '.join(f'{c}={v}' for c, v in zip(columns, key))
    ax.plot(
        [p[0] for p in points],
        [p[1] for p in points],
        marker='o',
        label=label,
        color=colour[key[0]],
        linestyle=styles[rest_values.index(key[1:]) % len(styles)],
    )
  xs = [p[0] for points in groups.values() for p in points] or [1]
  edge = max(xs) * 1.5 if logx else max(xs) + 0.05 * (max(xs) - min(xs) or 1)
  markers = {}
  for row in sorted(baselines, key=lambda r: order(r.get(columns[0]))):
    if row.get(y) is None:
      continue
    name = runs_lib.model_label(row, leave_out=columns[0])
    marker = markers.setdefault(name, 'x+*sd^v'[len(markers) % 7])
    ax.axhline(
        row[y], color=colour[row.get(columns[0])], linewidth=0.8, alpha=0.6
    )
    ax.plot(
        [edge],
        [row[y]],
        marker=marker,
        linestyle='none',
        color=colour[row.get(columns[0])],
        label=f'{columns[0]}={row.get(columns[0])}, {name}',
    )
  ax.set(
      xlabel=AXIS_LABELS.get(x, x),
      ylabel=AXIS_LABELS.get(y, y),
      xscale='log' if logx else 'linear',
  )
  ax.grid(alpha=0.3)
  ax.legend(fontsize='small', loc='center left', bbox_to_anchor=(1.01, 0.5))
  return _finish(fig, path)


def plot_translation(translation: Translation, path: Optional[str] = None):
  """The plot its kind names (attention.Attention.PLOT).

  None for no attention.
  """
  plot = attention.get(translation.attention).PLOT
  if plot is None or translation.weights is None:
    return None
  return {
      'heatmap': plot_attention,
      'vision_span': plot_vision_span,
      'memory_maps': plot_memory_attention,
  }[plot](translation, path)
