"""Flexible attention's tau sweep: one trained model decoded at several tau.

`python -m nmt_jax.sweep tau` writes <workdir>/tau_sweep.json.
"""

import json
import math
import os
from typing import Dict, List, Sequence

from absl import logging

from nmt_jax import attention
from nmt_jax.config import validation
from nmt_jax.decoding import evaluation
from nmt_jax.decoding import restore
from nmt_jax.model import seq2seq
from nmt_jax.system import errors
from nmt_jax.system import workdir_files
from nmt_jax.workdir import writers

# Shu & Nakayama's Figure 3 thresholds (inf = no pruning).
SHU_TAUS = (0.3, 0.5, 0.8, 1.0, 1.2, 1.4, 1.6, 5.0, 8.0, math.inf)


# Shu & Nakayama's choice of tau: the largest window reduction whose dev BLEU
# is within this many points of the unpruned model's.
DEV_BLEU_TOLERANCE = 0.5


def tau_sweep(
    config,
    workdir: str,
    taus: Sequence[float],
    beam_size: int,
    on_dev: bool = False,
) -> List[Dict]:
  """Evaluates the workdir's best checkpoint at each tau.

  On the test split (the validation split where there is none), or on the
  validation split with `on_dev`. Writes <workdir>/tau_sweep.json. Rows of
  an earlier sweep of the same checkpoint are kept (a tau evaluated again
  with the same beam on the same split is replaced), so a second call with
  other taus adds points to the curve, and one with another beam size or
  split a curve of its own.
  """
  config = validation.resolve(config)
  if 'tau' not in attention.get(config.model.attention.kind).FIELDS:
    raise errors.ConfigError(
        'tau applies to flexible attention, the config has '
        f'model.attention.kind={config.model.attention.kind!r}; give the '
        'config the workdir was trained with (e.g. configs/flexible.py)'
    )
  task, _, mesh, params, step = restore.restore_for_inference(config, workdir)
  split = task.eval if on_dev else task.test_or_eval
  split_name = 'test' if split is task.test else 'validation'
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
        'split': split_name,
        **{
            k: result[k]
            for k in (
                'bleu',
                'avg_window',
                'avg_window_fraction',
                'window_reduction',
                'window_reduction_per_sentence',
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
        'tau %s (%s): BLEU %.2f | avg window %.2f, %.1f%% smaller than the'
        ' source (ratio of means; %.1f%% a sentence) | computed %.2f'
        ' (%.1f%%) | %.2f ms/sentence',
        tau,
        row['split'],
        row['bleu'],
        row['avg_window'],
        100 * row['window_reduction'],
        100 * row['window_reduction_per_sentence'],
        row['avg_computed'],
        100 * row['avg_computed_fraction'],
        row['decode_ms_per_sentence'],
    )
  earlier = _read(workdir)
  done = {(float(row['tau']), beam_size, split_name) for row in rows}
  rows += [
      row
      for row in earlier['rows']
      if row['checkpoint_step'] == step
      and (float(row['tau']), row.get('beam_size'), row.get('split'))
      not in done
  ]
  rows.sort(
      key=lambda row: (
          row.get('beam_size', 0),
          row.get('split', ''),
          float(row['tau']),
      )
  )
  _write(workdir, {**earlier, 'rows': rows})
  return rows


def _read(workdir: str) -> Dict:
  """tau_sweep.json's content, {'rows': []} where there is none."""
  path = os.path.join(workdir, workdir_files.TAU_SWEEP)
  if not os.path.exists(path):
    return {'rows': []}
  with open(path, encoding='utf-8') as f:
    return json.load(f)


def _write(workdir: str, content: Dict):
  writers.write_json(os.path.join(workdir, workdir_files.TAU_SWEEP), content)


def select_tau(
    rows: Sequence[Dict], tolerance: float = DEV_BLEU_TOLERANCE
) -> Dict:
  """The validation row Shu & Nakayama's rule picks.

  The largest window_reduction among the taus whose BLEU is within
  `tolerance` of tau = inf's; `rows` are one beam size's validation rows,
  tau = inf among them. Ties go to the higher BLEU.
  """
  unpruned = [r for r in rows if math.isinf(float(r['tau']))]
  if not unpruned:
    raise errors.ConfigError(
        'choosing tau on dev needs the unpruned model (tau = inf) among --taus'
    )
  floor = unpruned[0]['bleu'] - tolerance
  within = [r for r in rows if r['bleu'] >= floor]
  return max(within, key=lambda r: (r['window_reduction'], r['bleu']))


def select_on_dev(
    config, workdir: str, taus: Sequence[float], beam_size: int
) -> Dict:
  """Shu & Nakayama's protocol: tau chosen on dev, then scored on test.

  Evaluates every tau (and inf) on the validation split, picks one by
  select_tau, evaluates it and inf on the test split, and stores the choice
  in tau_sweep.json under 'selections' (one per beam size). Returns it.
  """
  taus = sorted(set(map(float, taus)) | {math.inf})
  rows = tau_sweep(config, workdir, taus, beam_size, on_dev=True)
  dev = [
      r
      for r in rows
      if r.get('split') == 'validation' and r.get('beam_size') == beam_size
  ]
  chosen = select_tau(dev)
  rows = tau_sweep(
      config, workdir, sorted({float(chosen['tau']), math.inf}), beam_size
  )
  # Without a test split, the validation split is what there is to score.
  scored = (
      'test' if any(r.get('split') == 'test' for r in rows) else 'validation'
  )
  test = {
      float(r['tau']): r
      for r in rows
      if r.get('split') == scored and r.get('beam_size') == beam_size
  }
  selection = {
      'rule': (
          'largest window_reduction with validation BLEU within'
          f' {DEV_BLEU_TOLERANCE} of tau = inf'
      ),
      'beam_size': beam_size,
      'checkpoint_step': chosen['checkpoint_step'],
      'tau': chosen['tau'],
      'validation': chosen,
      'test': test[float(chosen['tau'])],
      'test_unpruned': test[math.inf],
  }
  content = _read(workdir)
  content['selections'] = [
      s for s in content.get('selections', []) if s['beam_size'] != beam_size
  ] + [selection]
  _write(workdir, content)
  logging.info(
      'tau %s chosen on dev (BLEU %.2f, window %.1f%% smaller); on test BLEU'
      ' %.2f against %.2f unpruned, window %.1f%% smaller',
      chosen['tau'],
      chosen['bleu'],
      100 * chosen['window_reduction'],
      selection['test']['bleu'],
      selection['test_unpruned']['bleu'],
      100 * selection['test']['window_reduction'],
  )
  return selection
