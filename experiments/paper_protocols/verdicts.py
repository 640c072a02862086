"""The three claims' verdicts from the records, by the rule of the README.

  python -m experiments.paper_protocols.verdicts \\
      [--records=experiments/paper_protocols/records] [--markdown=FILE]

Reads records/<corpus>/<run>/seed<N>/ (run.sh's record part) for every
corpus folder and prints one table: claim, the paper's number, this suite's
on the corpus (mean ± sd over seeds), the seeds behind it and the verdict.
The rule (experiments/paper_protocols/README.md) is applied as written; a
comparison with fewer than three seeds a side is undetermined.
"""

import argparse
import json
import os
import statistics
import sys
from typing import Dict, List, Optional

from nmt_jax.analysis import runs as runs_lib
from nmt_jax.analysis import seeds

MIN_SEEDS = 3
CLAIMS = {
    'luong': (
        'Luong et al.: local-p (general) beats global (general)',
        '+1.7 BLEU',
    ),
    'britz': (
        'Britz et al.: memory K = 64 on par with additive attention',
        'on par or slightly better',
    ),
    'shu': (
        'Shu & Nakayama: flexible prunes the window at little cost',
        '56-64% smaller, within ~0.5 BLEU',
    ),
}


def _group(row) -> Optional[str]:
  named = seeds.seed_of(row['run'])
  return named[0] if named else None


def _comparison(rows, workdirs, group: str, reference: str) -> Optional[Dict]:
  """seeds.seed_rows' row of `group` against `reference`, or None."""
  found = seeds.groups(rows, workdirs)
  if group not in found or reference not in found:
    return None
  pairs = [
      (r, w) for r, w in zip(rows, workdirs) if _group(r) in (group, reference)
  ]
  table = seeds.seed_rows(
      [r for r, _ in pairs], [w for _, w in pairs], reference
  )
  return next(r for r in table if r['group'] == group)


def _enough(row: Optional[Dict]) -> bool:
  return bool(row) and len(row.get('per_seed', [])) >= MIN_SEEDS


def luong(rows, workdirs) -> Dict:
  row = _comparison(rows, workdirs, 'local_p', 'global_general')
  if not _enough(row):
    return _pending(row, 'local_p against global_general')
  verdict = {
      'better': 'holds',
      'worse': 'does not hold',
      'level': 'does not hold',
  }
  return _result(row, verdict.get(row['outcome'], 'undetermined'))


def chosen_memory(rows) -> Optional[str]:
  """The memory group best on validation (best dev BLEU) at seed 1."""
  candidates = {}
  for row in rows:
    named = seeds.seed_of(row['run'])
    if named and named[0].startswith('memory_') and named[1] == 1:
      if row.get('best_valid_bleu') is not None:
        candidates[named[0]] = row['best_valid_bleu']
  return max(candidates, key=candidates.get) if candidates else None


def britz(rows, workdirs) -> Dict:
  memory = chosen_memory(rows)
  row = memory and _comparison(rows, workdirs, memory, 'global_concat')
  if not _enough(row):
    return _pending(row, f'{memory or "memory"} against global_concat')
  verdict = {'better': 'holds', 'level': 'holds', 'worse': 'does not hold'}
  return _result(row, verdict.get(row['outcome'], 'undetermined'), memory)


def shu(rows, workdirs) -> Dict:
  """Each seed's tau chosen on dev, scored on test, against tau = inf."""
  plain = {}
  for row in rows:
    named = seeds.seed_of(row['run'])
    if named and named[0] == 'flexible_rnnsearch' and row.get('bleu'):
      plain[named[1]] = row['bleu']
  chosen = {}
  for row, workdir in zip(rows, workdirs):
    named = seeds.seed_of(row['run'])
    if not named or named[0] != 'flexible_rnnsearch_finetune':
      continue
    path = os.path.join(workdir, 'tau_sweep.json')
    if os.path.isfile(path):
      with open(path, encoding='utf-8') as f:
        selections = json.load(f).get('selections', [])
      if selections:
        chosen[named[1]] = selections[-1]['test']
  common = sorted(set(plain) & set(chosen))
  if len(common) < MIN_SEEDS:
    return {
        'value': f'{len(common)} of {MIN_SEEDS} seeds with tau chosen on dev',
        'seeds': common,
        'verdict': 'pending',
    }
  diffs = [chosen[s]['bleu'] - plain[s] for s in common]
  mean, low, high = seeds.interval(diffs)
  outcome = seeds.outcome(low, high)
  reductions = [chosen[s]['window_reduction'] for s in common]
  reduction = statistics.fmean(reductions)
  if reduction >= 0.5 and outcome in ('level', 'better'):
    verdict = 'holds'
  elif reduction < 0.5 or outcome == 'worse':
    verdict = 'does not hold'
  else:
    verdict = 'undetermined'
  return {
      'value': (
          f'{100 * reduction:.1f}% ± {100 * statistics.stdev(reductions):.1f}'
          f' smaller; {mean:+.2f} BLEU [{low:+.2f}, {high:+.2f}] ({outcome})'
      ),
      'seeds': common,
      'verdict': verdict,
  }


def _result(row: Dict, verdict: str, what: str = '') -> Dict:
  return {
      'value': (
          (f'{what}: ' if what else '')
          + f'{row["diff"]:+.2f} BLEU [{row["ci_low"]:+.2f},'
          f' {row["ci_high"]:+.2f}] ({row["outcome"]}); {row["bleu"]:.2f} ±'
          f' {row["bleu_sd"] or 0:.2f}'
      ),
      'seeds': [p['seed'] for p in row['per_seed']],
      'verdict': verdict,
  }


def _pending(row: Optional[Dict], what: str) -> Dict:
  have = [p['seed'] for p in (row or {}).get('per_seed', [])]
  return {
      'value': f'{what}: {len(have)} of {MIN_SEEDS} seeds evaluated',
      'seeds': have,
      'verdict': 'pending',
  }


def corpus_verdicts(folder: str) -> Dict[str, Dict]:
  workdirs = runs_lib.find_workdirs(folder)
  rows = runs_lib.results_table(workdirs, root=folder)
  return {
      'luong': luong(rows, workdirs),
      'britz': britz(rows, workdirs),
      'shu': shu(rows, workdirs),
  }


def table(records: str) -> str:
  corpora = sorted(
      name
      for name in os.listdir(records)
      if os.path.isdir(os.path.join(records, name))
      and not name.startswith('pilot')
  )
  lines = [
      (
          '| claim | paper | corpus | this suite (mean ± sd, 95% interval) |'
          ' seeds | verdict |'
      ),
      '|---|---|---|---|---|---|',
  ]
  for corpus in corpora:
    verdicts = corpus_verdicts(os.path.join(records, corpus))
    for key, (claim, paper) in CLAIMS.items():
      v = verdicts[key]
      lines.append(
          f'| {claim} | {paper} | {corpus} | {v["value"]} |'
          f' {",".join(map(str, v["seeds"]))} | {v["verdict"]} |'
      )
  return '\n'.join(lines)


def main(argv: Optional[List[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
      '--records',
      default=os.path.join(os.path.dirname(__file__), 'records'),
  )
  parser.add_argument('--markdown', help='also write the table here')
  args = parser.parse_args(argv)
  if not os.path.isdir(args.records):
    print(f'error: --records={args.records} is not a folder', file=sys.stderr)
    return 2
  text = table(args.records)
  if args.markdown:
    with open(args.markdown, 'w', encoding='utf-8') as f:
      f.write(text + '\n')
  print(text)
  return 0


if __name__ == '__main__':
  sys.exit(main())
