"""A run's small files, copied into an experiment's records folder.

  python -m experiments.records WORKDIR RECORDS/<run>

Copies what a results page or `nmt_jax.sweep aggregate` reads
(config.json, eval_results.json, the test hypotheses and references,
tau_sweep.json) and a compact metrics.jsonl: every validation and
evaluation record, and of the training records only those logged at a
validation's step (one line per validation: the learning curves and the
median training rate, without the hundreds of lines between). Checkpoints and vocabularies stay in the workdir.
"""

import json
import os
import shutil
import sys
from typing import List

from nmt_jax.system import workdir_files

FILES = (
    workdir_files.CONFIG,
    workdir_files.EVAL_RESULTS,
    workdir_files.EVAL_HYPOTHESES,
    workdir_files.EVAL_REFERENCES,
    workdir_files.TAU_SWEEP,
)


def compact_metrics(lines: List[str]) -> List[str]:
  """metrics.jsonl lines -> every validation and evaluation record, and the
  training records logged at the step of a validation."""
  records = [json.loads(line) for line in lines if line.strip()]
  validated = {r.get('step') for r in records if r.get('split') == 'valid'}
  return [
      json.dumps(r) + '\n'
      for r in records
      if r.get('split') != 'train' or r.get('step') in validated
  ]


def copy_run(workdir: str, target: str) -> List[str]:
  """Copies `workdir`'s small files into `target`; returns their names."""
  os.makedirs(target, exist_ok=True)
  copied = []
  for name in FILES:
    path = os.path.join(workdir, name)
    if os.path.isfile(path):
      shutil.copyfile(path, os.path.join(target, name))
      copied.append(name)
  metrics = os.path.join(workdir, workdir_files.METRICS)
  if os.path.isfile(metrics):
    with open(metrics, encoding='utf-8') as f:
      kept = compact_metrics(f.readlines())
    with open(
        os.path.join(target, workdir_files.METRICS), 'w', encoding='utf-8'
    ) as f:
      f.writelines(kept)
    copied.append(workdir_files.METRICS)
  return copied


def main(argv: List[str]) -> int:
  if len(argv) != 2 or not os.path.isfile(
      os.path.join(argv[0], workdir_files.CONFIG)
  ):
    print(
        'error: give a workdir (with its config.json) and the records folder:'
        ' python -m experiments.records WORKDIR RECORDS/<run>',
        file=sys.stderr,
    )
    return 2
  print(' '.join(copy_run(*argv)))
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
