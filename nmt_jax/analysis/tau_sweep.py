"""Flexible attention's tau sweep: one trained model decoded at several tau.

`python -m nmt_jax.sweep tau` writes <workdir>/tau_sweep.json.
"""

import math
import os
from typing import Dict, List, Sequence

from absl import logging

from nmt_jax import attention
from nmt_jax.analysis import runs as runs_lib
from nmt_jax.config import validation
from nmt_jax.decoding import evaluation
from nmt_jax.decoding import restore
from nmt_jax.model import seq2seq
from nmt_jax.system import errors
from nmt_jax.system import workdir_files
from nmt_jax.workdir import writers

# Shu & Nakayama's Figure 3 thresholds (inf = no pruning).
SHU_TAUS = (0.3, 0.5, 0.8, 1.0, 1.2, 1.4, 1.6, 5.0, 8.0, math.inf)


def tau_sweep(
    config, workdir: str, taus: Sequence[float], beam_size: int
) -> List[Dict]:
  """Evaluates the workdir's best checkpoint at each tau.

  Writes <workdir>/tau_sweep.json. Rows of an earlier sweep of the same
  checkpoint are kept (a tau evaluated again with the same beam is
  replaced), so a second call with other taus adds points to the curve, and
  one with another beam size a curve of its own.
  """
  config = validation.resolve(config)
  if 'tau' not in attention.get(config.model.attention.kind).FIELDS:
    raise errors.ConfigError(
        'tau applies to flexible attention, the config has '
        f'model.attention.kind={config.model.attention.kind!r}; give the '
        'config the workdir was trained with (e.g. configs/flexible.py)'
    )
  task, _, mesh, params, step = restore.restore_for_inference(config, workdir)
  split = task.test_or_eval
  rows = []
  for tau in taus:
    tau_config = config.copy_and_resolve_references()
    tau_config.model.attention.tau = tau
    evaluator = evaluation.Evaluator(
        tau_config, seq2seq.create_model(tau_config, task), task, mesh
    )
    result, _ = evaluator.evaluate(params, split, beam_size)
    row = {
        'tau': tau,
        'checkpoint_step': step,
        'beam_size': beam_size,
        'split': 'test' if task.test is not None else 'validation',
        **{
            k: result[k]
            for k in (
                'bleu',
                'avg_window',
                'avg_window_fraction',
                'avg_window_steps',
                'avg_computed',
                'avg_computed_fraction',
                'avg_source_length',
                'decode_ms_per_sentence',
                'num_sentences',
            )
        },
    }
    rows.append(row)
    logging.info(
        'tau %s: BLEU %.2f | avg window %.2f (%.1f%% of the source) |'
        ' computed %.2f (%.1f%%) | %.2f ms/sentence',
        tau,
        row['bleu'],
        row['avg_window'],
        100 * row['avg_window_fraction'],
        row['avg_computed'],
        100 * row['avg_computed_fraction'],
        row['decode_ms_per_sentence'],
    )
  path = os.path.join(workdir, workdir_files.TAU_SWEEP)
  earlier = runs_lib.load_run(workdir).tau_sweep or []
  done = {(float(row['tau']), beam_size) for row in rows}
  rows += [
      row
      for row in earlier
      if row['checkpoint_step'] == step
      and (float(row['tau']), row.get('beam_size')) not in done
  ]
  rows.sort(key=lambda row: (row.get('beam_size', 0), float(row['tau'])))
  writers.write_json(path, {'rows': rows})
  return rows
