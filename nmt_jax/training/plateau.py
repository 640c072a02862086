"""Validation plateaus: when to decay the learning rate, when to stop.

`Plateau` follows train.plateau_metric over the validations of a run. After
train.plateau_patience validations without a better value the learning rate
is multiplied by train.plateau_decay; after train.early_stopping_patience
without one, training stops. Better means by more than
train.plateau_min_delta (in the metric's units) than the best value counted. A resumed run replays the validations recorded
in metrics.jsonl up to its checkpoint, so it decides as an uninterrupted run.
"""

from typing import Dict, Iterable, Optional, Tuple

from absl import logging
import numpy as np

from nmt_jax.workdir import writers


class Plateau:
  """Counts validations without improvement of one metric."""

  def __init__(self, train_config):
    self.metric = train_config.plateau_metric  # 'bleu' (higher) or 'loss'
    self.decay = train_config.plateau_decay
    self.patience = train_config.plateau_patience
    self.stop_patience = train_config.early_stopping_patience
    self.min_delta = train_config.plateau_min_delta
    self.best: Optional[float] = None
    self.best_step: Optional[int] = None
    self.since_best = 0  # validations since the best one
    self.since_change = 0  # ... since the best one or the last decay
    self.scale = 1.0  # the product of the decays so far
    self.stopped = False

  @property
  def active(self) -> bool:
    return bool(self.decay or self.stop_patience)

  def update(self, step: int, result: Dict[str, float]) -> Tuple[bool, bool]:
    """Takes one validation result -> (decay the learning rate now, stop)."""
    value = float(result[self.metric])  # metrics.jsonl writes NaN as 'nan'
    gain = None if self.best is None else value - self.best
    if gain is not None and self.metric == 'loss':
      gain = -gain  # lower is better
    better = value == value and (  # NaN is never better
        gain is None or gain > self.min_delta
    )
    if better:
      self.best, self.best_step = value, step
      self.since_best = self.since_change = 0
    else:
      self.since_best += 1
      self.since_change += 1
    decayed = bool(self.decay) and self.since_change >= self.patience
    if decayed:
      # As the optimizer state holds it (float32), which a resumed run starts
      # from: in float64, 0.7 * 0.7 = 0.49 here and 0.48999998 there.
      self.scale = float(np.float32(self.scale * self.decay))
      self.since_change = 0
    self.stopped = bool(self.stop_patience) and (
        self.since_best >= self.stop_patience
    )
    return decayed, self.stopped

  def replay(self, records: Iterable[Dict], until: int):
    """Takes the 'valid' records of metrics.jsonl up to step `until`."""
    for record in records:
      if record.get('split') == 'valid' and record.get('step', 0) <= until:
        if self.metric in record:
          self.update(record['step'], record)

  def describe(self) -> str:
    best = (
        'none finite yet'
        if self.best is None
        else f'best {self.best:.4f} at step {self.best_step}'
    )
    return (
        f'validation {self.metric} has not improved for {self.since_best}'
        f' validations ({best})'
    )


def resume(train_config, workdir: str, start: int, scale: float) -> Plateau:
  """The Plateau of a run resuming at step `start` (0: a new run).

  Its counts are replayed from metrics.jsonl up to `start`; its factor is
  `scale`, the one the checkpoint's optimizer applies: a replay without the
  whole history (a workdir of nmt_jax.average has no metrics.jsonl) restarted
  it at 1, and the next decay raised the learning rate.
  """
  plateau = Plateau(train_config)
  if plateau.active and start:
    records = writers.read_metrics(workdir)
    if not records:
      logging.warning(
          'no metrics.jsonl in %s: the plateau and early-stopping counts'
          ' start again from step %d (the learning-rate factor, x%g, is the'
          " checkpoint's)",
          workdir,
          start,
          scale,
      )
    plateau.replay(records, start)
    plateau.scale = scale
  return plateau
