"""bfloat16 training reaches the float32 model's BLEU on a copy task.

  python -m experiments.bfloat16_quality.bfloat16_bleu [--json=PATH] [--workdir=DIR]

Trains the copy model below twice, with `model.dtype=float32` and with
`model.dtype=bfloat16` (bfloat16 compute, float32 parameters and optimizer
state), 1,000 steps each, each run as a user runs it (`python -m
nmt_jax.main`), and evaluates each with beam search (beam 3). The compute
dtype is not part of a model's identity: the bfloat16 run's checkpoint is
then evaluated again with `model.dtype=float32`. The result holds the three
BLEU scores, the storage dtypes of the checkpointed parameters of both runs
and the seconds of each run.

Expected (2 CPU cores, about a minute a run): float32 above 99 BLEU, and
bfloat16 within 0.5 BLEU of it, in both compute dtypes. The test suite keeps
only the invariants of a few steps (tests/model/test_precision.py).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

import jax
import numpy as np

from nmt_jax.workdir import checkpoint
from nmt_jax.workdir import writers

STEPS = 1000
COPY = [
    '--config=configs/global_dot.py:tiny',
    '--config.data.max_length=10',
    '--config.data.num_symbols=10',
    '--config.data.num_train=4000',
    '--config.data.num_eval=200',
    '--config.train.eval_num_sentences=200',
    '--config.model.hidden_size=32',
    '--config.model.embed_size=32',
    '--config.train.learning_rate=0.005',
    '--config.train.batch_size=32',
    f'--config.train.num_steps={STEPS}',
    f'--config.train.eval_every={STEPS}',
    f'--config.train.checkpoint_every={STEPS}',
    '--config.train.log_every=500',
    '--config.decode.beam_size=3',
]
ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)


def _nmt(*args: str) -> float:
  """Runs `python -m nmt_jax.main args` from the repository root -> seconds."""
  start = time.perf_counter()
  result = subprocess.run(
      [sys.executable, '-m', 'nmt_jax.main', *args],
      cwd=ROOT,
      capture_output=True,
      text=True,
      check=False,
  )
  if result.returncode:
    raise RuntimeError(f'nmt_jax.main {args} failed:\n{result.stderr[-3000:]}')
  return time.perf_counter() - start


def _bleu(workdir: str) -> float:
  with open(os.path.join(workdir, 'eval_results.json')) as f:
    return json.load(f)['bleu']


def _float_dtypes(workdir: str) -> List[str]:
  """The dtypes of the floating-point parameters checkpointed at STEPS."""
  ckpts = checkpoint.Checkpoints(workdir, create=False)
  try:
    metadata = ckpts.manager.item_metadata(STEPS)['state']
  finally:
    ckpts.close()
  return sorted({
      str(np.dtype(m.dtype))
      for m in jax.tree_util.tree_leaves(metadata)
      if np.issubdtype(np.dtype(m.dtype), np.floating)
  })


def run(base: str) -> Dict[str, Any]:
  result: Dict[str, Any] = {
      'benchmark': 'bfloat16_bleu',
      'date': time.strftime('%Y-%m-%d'),
      'jax': jax.__version__,
      'steps': STEPS,
      'args': COPY,
  }
  for dtype in ('float32', 'bfloat16'):
    workdir = os.path.join(base, dtype)
    seconds = _nmt(
        *COPY, f'--config.model.dtype={dtype}', f'--workdir={workdir}'
    )
    result[dtype] = {
        'bleu': _bleu(workdir),
        'parameter_dtypes': _float_dtypes(workdir),
        'seconds': round(seconds, 1),
    }
  workdir = os.path.join(base, 'bfloat16')
  _nmt(
      *COPY,
      '--config.model.dtype=float32',
      f'--workdir={workdir}',
      '--mode=eval',
  )
  result['bfloat16_evaluated_in_float32'] = {'bleu': _bleu(workdir)}
  bleu = lambda name: result[name]['bleu']
  result['bleu_difference'] = bleu('bfloat16') - bleu('float32')
  result['reaches_float32'] = bool(
      bleu('float32') > 99
      and abs(result['bleu_difference']) <= 0.5
      and abs(bleu('bfloat16_evaluated_in_float32') - bleu('bfloat16')) <= 0.5
      and all(
          result[d]['parameter_dtypes'] == ['float32']
          for d in ('float32', 'bfloat16')
      )
  )
  return result


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--json', help='write the result to this JSON file')
  parser.add_argument(
      '--workdir', help='keep the runs here (default: a temporary folder)'
  )
  args = parser.parse_args(argv)
  if args.json:
    writers.check_writable(args.json, 'json')
  if args.workdir:
    result = run(args.workdir)
  else:
    with tempfile.TemporaryDirectory() as base:
      result = run(base)
  for name in ('float32', 'bfloat16', 'bfloat16_evaluated_in_float32'):
    print(f'{name:32s} BLEU {result[name]["bleu"]:6.2f}')
  print(f'bfloat16 reaches the float32 BLEU: {result["reaches_float32"]}')
  if args.json:
    writers.write_text(args.json, json.dumps(result, indent=2) + '\n')
  return 0 if result['reaches_float32'] else 1


if __name__ == '__main__':
  sys.exit(main())
