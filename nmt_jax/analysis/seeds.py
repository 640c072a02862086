"""Runs repeated over training seeds: their spread, and a comparison's outcome.

Runs named NAME/seedN (or NAME_seedN, NAME-seedN) are the seeds of NAME;
`sweep aggregate` groups them and, with --paired_with=NAME, compares every
other group to that one seed for seed:

  diff_s = BLEU(A, seed s) - BLEU(reference, seed s), on the same test split
  mean diff and its 95% interval over the seeds (Student's t, n - 1 degrees
  of freedom: the seed spread), and each seed's paired bootstrap p-value
  (the test sentences' share of the difference; significance.py)

The outcome, from the interval alone:
  level         the whole interval within +-margin BLEU (default 0.5)
  better/worse  the whole interval above/below 0
  undetermined  otherwise: the seeds do not settle it (more seeds narrow it)
"""

import math
import re
import statistics
from typing import Any, Dict, List, Optional, Sequence, Tuple

from scipy import stats as scipy_stats

from nmt_jax.analysis import runs as runs_lib
from nmt_jax.analysis import significance
from nmt_jax.system import errors

_SEED = re.compile(r'^(?P<group>.+?)[/_-]seed(?P<seed>\d+)$')
LEVEL_MARGIN = 0.5


def seed_of(name: str) -> Optional[Tuple[str, int]]:
  """(group, seed) of a run named GROUP/seedN, GROUP_seedN or GROUP-seedN."""
  match = _SEED.match(name)
  return (match['group'], int(match['seed'])) if match else None


def outcome(low: float, high: float, margin: float = LEVEL_MARGIN) -> str:
  """'level', 'better', 'worse' or 'undetermined' of a difference's interval."""
  if -margin <= low and high <= margin:
    return 'level'
  if low > 0:
    return 'better'
  if high < 0:
    return 'worse'
  return 'undetermined'


def interval(differences: Sequence[float]) -> Tuple[float, float, float]:
  """(mean, low, high): the mean difference and its 95% t interval."""
  mean = statistics.fmean(differences)
  if len(differences) < 2:
    return mean, -math.inf, math.inf
  half = (
      scipy_stats.t.ppf(0.975, len(differences) - 1)
      * statistics.stdev(differences)
      / math.sqrt(len(differences))
  )
  return mean, mean - half, mean + half


def _spread(values: Sequence[Optional[float]]):
  values = [v for v in values if v is not None]
  if not values:
    return None, None
  return statistics.fmean(values), (
      statistics.stdev(values) if len(values) > 1 else None
  )


def groups(
    rows: Sequence[Dict[str, Any]], workdirs: Sequence[str]
) -> Dict[str, Dict[int, Tuple[Dict[str, Any], str]]]:
  """{group: {seed: (results_table row, workdir)}} of the evaluated seeds."""
  found: Dict[str, Dict[int, Tuple[Dict[str, Any], str]]] = {}
  for row, workdir in zip(rows, workdirs):
    named = seed_of(row['run'])
    if named and row.get('bleu') is not None:
      found.setdefault(named[0], {})[named[1]] = (row, workdir)
  return found


def seed_rows(
    rows: Sequence[Dict[str, Any]],
    workdirs: Sequence[str],
    reference: Optional[str] = None,
    margin: float = LEVEL_MARGIN,
) -> List[Dict[str, Any]]:
  """One row per group: seeds, mean and sd; against `reference` (a group)."""
  found = groups(rows, workdirs)
  if reference is not None and reference not in found:
    raise errors.ConfigError(
        f'--paired_with={reference} names no group of evaluated seeds: '
        + (', '.join(sorted(found)) or 'none is evaluated yet')
    )
  table = []
  for group in sorted(found, key=lambda g: (g != reference, g)):
    seeds = found[group]
    members = [seeds[s][0] for s in sorted(seeds)]
    row = {'group': group, 'seeds': sorted(seeds)}
    for column in ('bleu', 'chrf', 'window_reduction', 'best_valid_bleu'):
      row[column], row[column + '_sd'] = _spread(
          [m.get(column) for m in members]
      )
    if reference is not None and group != reference:
      common = sorted(set(seeds) & set(found[reference]))
      per_seed = []
      for seed in common:
        mine, theirs = seeds[seed], found[reference][seed]
        language = runs_lib.load_run(mine[1]).config['data']['target_lang']
        _, test = significance.paired_bleu([mine[1]], theirs[1], language)
        per_seed.append({
            'seed': seed,
            'diff': mine[0]['bleu'] - theirs[0]['bleu'],
            'p_value': test['p_value'],
        })
      row['per_seed'] = per_seed
      if per_seed:
        mean, low, high = interval([p['diff'] for p in per_seed])
        row.update(
            diff=mean, ci_low=low, ci_high=high,
            outcome=outcome(low, high, margin),
        )  # fmt: skip
    table.append(row)
  return table


def _number(value, spread=None, digits=2):
  if value is None:
    return ''
  text = f'{value:.{digits}f}'
  return text + (f' ± {spread:.{digits}f}' if spread is not None else '')


def markdown(table: Sequence[Dict[str, Any]], reference: Optional[str]) -> str:
  """seed_rows as a markdown table (mean ± sd over seeds)."""
  head = '| run | seeds | test BLEU | chrF | window reduction | best dev BLEU |'
  rule = '|---|---|---:|---:|---:|---:|'
  if reference:
    head += (
        f' against {reference}: mean [95% CI] | per seed (bootstrap p) |'
        ' outcome |'
    )
    rule += '---:|---|---|'
  lines = [head, rule]
  for row in table:
    reduction = row['window_reduction']
    line = (
        f'| {row["group"]} | {",".join(map(str, row["seeds"]))} |'
        f' {_number(row["bleu"], row["bleu_sd"])} |'
        f' {_number(row["chrf"], row["chrf_sd"])} |'
        f' {"" if reduction is None else f"{100 * reduction:.1f}%"} |'
        f' {_number(row["best_valid_bleu"], row["best_valid_bleu_sd"])} |'
    )
    if reference:
      if 'diff' in row:
        per_seed = ', '.join(
            f'{p["diff"]:+.2f} ({p["p_value"]:.3f})' for p in row['per_seed']
        )
        line += (
            f' {row["diff"]:+.2f} [{row["ci_low"]:+.2f}, {row["ci_high"]:+.2f}]'
            f' | {per_seed} | {row["outcome"]} |'
        )
      else:
        line += ' | | |'
    lines.append(line)
  return '\n'.join(lines)


def table(
    rows: Sequence[Dict[str, Any]],
    workdirs: Sequence[str],
    reference: Optional[str] = None,
    margin: float = LEVEL_MARGIN,
) -> str:
  """The titled markdown table of the seed groups ('' when there are none)."""
  if not groups(rows, workdirs):
    return ''
  title = (
      'Seeds (runs NAME/seedN): mean ± sd over seeds'
      + (
          f'; against {reference} seed for seed, outcome by the 95% interval'
          f' (level: within ±{margin:g} BLEU; nmt_jax/analysis/seeds.py)'
          if reference
          else ''
      )
      + ':\n\n'
  )
  return title + markdown(
      seed_rows(rows, workdirs, reference, margin), reference
  )


def is_group(name: str, rows: Sequence[Dict[str, Any]]) -> bool:
  """Whether `name` is a seed group among the rows' runs."""
  return any((seed_of(r['run']) or ('',))[0] == name for r in rows)
