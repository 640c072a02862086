"""Paired bootstrap resampling of test BLEU between runs (sacreBLEU's test).

Each run's evaluation (eval_hypotheses.txt) is resampled together with a
baseline run's, sentence for sentence, over the references the two were
scored against (eval_references.txt): how much of a BLEU difference the
choice of test sentences alone could make. It says nothing of the spread
between training seeds, which a single run per model cannot show.
"""

import os
from typing import Any, Dict, List, Optional, Sequence

from sacrebleu.significance import PairedTest

from nmt_jax.analysis import runs as runs_lib
from nmt_jax.decoding import metrics
from nmt_jax.system import errors
from nmt_jax.system import workdir_files


def _read_lines(workdir: str, name: str) -> List[str]:
  path = os.path.join(workdir, name)
  if not os.path.isfile(path):
    raise errors.ConfigError(
        f'{workdir} has no {name}: evaluate it again'
        f' (python -m nmt_jax.main --mode=eval --workdir={workdir} ...)'
    )
  with open(path, encoding='utf-8') as f:
    return f.read().splitlines()


def paired_bleu(
    workdirs: Sequence[str],
    baseline: str,
    language: str,
    names: Optional[Sequence[str]] = None,
    samples: int = 1000,
) -> List[Dict[str, Any]]:
  """Each of `workdirs` against `baseline` by paired bootstrap resampling.

  -> [{'run', 'bleu', 'mean', 'ci95', 'diff', 'p_value'}], the baseline first
  (its p_value None): mean and ci95 are the resampled BLEU's mean and the
  half-width of its 95% interval, p_value sacreBLEU's paired-bootstrap
  p-value of the difference (its seed 12345: the same files give the same
  figures).
  """
  names = list(names or workdirs)
  references = _read_lines(baseline, workdir_files.EVAL_REFERENCES)
  systems = [('baseline', _read_lines(baseline, workdir_files.EVAL_HYPOTHESES))]
  for name, workdir in zip(names, workdirs):
    if os.path.abspath(workdir) == os.path.abspath(baseline):
      continue
    if _read_lines(workdir, workdir_files.EVAL_REFERENCES) != references:
      raise errors.ConfigError(
          f'{workdir} was evaluated on other references than {baseline}:'
          ' compare runs evaluated on the same split'
      )
    systems.append((name, _read_lines(workdir, workdir_files.EVAL_HYPOTHESES)))
  test = PairedTest(
      systems,
      {'BLEU': metrics.bleu_metric(language)},
      [references],
      test_type='bs',
      n_samples=samples,
  )
  _, scores = test()
  base = scores['BLEU'][0].score
  rows = []
  for (name, hypotheses), result in zip(systems, scores['BLEU']):
    p_value = result.p_value
    if p_value is not None and hypotheses == systems[0][1]:
      p_value = 1.0  # no difference to test (sacreBLEU says 1 / (samples + 1))
    rows.append({
        'run': name,
        'bleu': result.score,
        'mean': float(result.mean),
        'ci95': float(result.ci),
        'diff': result.score - base,
        'p_value': p_value,
    })
  return rows


def markdown(rows: Sequence[Dict[str, Any]], baseline_name: str) -> str:
  """The rows of paired_bleu as a markdown table."""
  lines = [
      f'| run | BLEU | resampled mean ± 95% | against {baseline_name} | p |',
      '|---|---:|---:|---:|---:|',
  ]
  for row in rows:
    if row['p_value'] is None:  # the baseline
      name, diff, p = baseline_name, '', ''
    else:
      name, diff, p = row['run'], f'{row["diff"]:+.2f}', f'{row["p_value"]:.3f}'
    lines.append(
        f'| {name} | {row["bleu"]:.2f} | {row["mean"]:.2f} ±'
        f' {row["ci95"]:.2f} | {diff} | {p} |'
    )
  return '\n'.join(lines)


def table_against(
    workdirs: Sequence[str], baseline: str, root: Optional[str] = None
) -> str:
  """The evaluated ones of `workdirs` against `baseline` (its name under
  `root`, or a workdir) by paired_bleu, as a titled markdown table."""
  evaluated = [
      w
      for w in workdirs
      if os.path.isfile(os.path.join(w, workdir_files.EVAL_RESULTS))
  ]
  names = [os.path.relpath(w, root) if root else w for w in evaluated]
  found = [
      w
      for w, name in zip(evaluated, names)
      if baseline in (name, w)
      or os.path.abspath(w) == os.path.abspath(baseline)
  ]
  if not found:
    raise errors.ConfigError(
        f'--paired_with={baseline} is none of the evaluated runs: '
        + (', '.join(names) or 'none is evaluated yet')
    )
  language = runs_lib.load_run(found[0]).config['data']['target_lang']
  rows = paired_bleu(evaluated, found[0], language, names)
  return (
      'Paired bootstrap resampling of test BLEU (1,000 resamples):\n\n'
      + markdown(rows, baseline)
  )
