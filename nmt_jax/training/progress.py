"""Training metrics between two log lines, fetched one step late and checked.

A NaN or infinite loss, or a diverging one, stops training with a
TrainingError naming the last checkpoint.
"""

import math
import time
from typing import Callable, Dict, Optional

import jax

from nmt_jax.system.errors import TrainingError


class Progress:
  """Training metrics since the last log, fetched one step late.

  `push` holds a step's device metrics and fetches the previous step's, so
  the host never waits on the step it just dispatched (at most two steps in
  flight); `flush` fetches the held one. Every fetched loss is checked: a
  non-finite one stops training, and so does a loss that stays above
  `divergence_factor` times the running mean (0 = no such check) and above
  `uniform_loss`, the loss of guessing every token uniformly (log V), for
  `divergence_steps` steps in a row: a fine-tuned model's small loss may grow
  tenfold without diverging, and Adam recovers from a one-step spike to log V
  within a few steps (seen on chunk_reverse at the default learning rate).
  The running mean ignores the steps of such a streak.
  """

  def __init__(
      self,
      fetch: Callable,
      last_saved=None,
      divergence_factor: float = 0.0,
      uniform_loss: float = 0.0,
      divergence_steps: int = 1,
      advice: str = 'lower train.learning_rate or train.clip_norm',
  ):
    self._fetch = fetch
    self.advice = advice  # what the divergence error tells to change
    self._pending = None  # (step, device metrics)
    self.last_saved = last_saved
    self.divergence_factor = divergence_factor
    self.uniform_loss = uniform_loss
    self.divergence_steps = divergence_steps
    self.streak = 0  # consecutive steps above both thresholds
    self.running_loss = None  # exponential moving average of the step loss
    self.reset()

  def divergence_state(self) -> Dict:
    """What the divergence check has learnt (kept in checkpoints)."""
    return {'running_loss': self.running_loss, 'streak': self.streak}

  def restore_divergence_state(self, saved: Optional[Dict]):
    """Goes on from a checkpoint's divergence_state (None: from scratch)."""
    if saved:
      self.running_loss, self.streak = saved['running_loss'], saved['streak']

  def reset(self):
    self.sums = {'loss_sum': 0.0, 'tokens': 0.0, 'grad_norm': 0.0}
    self.steps = 0
    self.sentences = 0
    self._elapsed = 0.0
    self._clock = time.perf_counter()

  def pause(self):
    """Stops the clock (validation and saving are not training time)."""
    if self._clock is not None:
      self._elapsed += time.perf_counter() - self._clock
      self._clock = None

  def resume(self):
    if self._clock is None:
      self._clock = time.perf_counter()

  @property
  def seconds(self) -> float:
    """Training time since the last reset, pauses left out."""
    running = 0.0 if self._clock is None else time.perf_counter() - self._clock
    return self._elapsed + running

  @property
  def seconds_per_step(self) -> float:
    return self.seconds / max(self.steps, 1)

  def push(self, step: int, device_metrics, local_sentences: int):
    self.flush()
    self._pending = (step, device_metrics)
    self.sentences += local_sentences * jax.process_count()

  def flush(self):
    if self._pending is None:
      return
    step, device_metrics = self._pending
    self._pending = None
    host = {k: float(v) for k, v in self._fetch(device_metrics).items()}
    loss = host['loss_sum'] / max(host['tokens'], 1.0)
    above = bool(
        self.divergence_factor
        and self.running_loss is not None
        and loss > self.divergence_factor * self.running_loss
        and loss > self.uniform_loss
    )
    self.streak = self.streak + 1 if above else 0
    diverged = self.streak >= self.divergence_steps
    if diverged or not (
        math.isfinite(loss) and math.isfinite(host['grad_norm'])
    ):
      why = (
          f' ({loss / self.running_loss:.3g} times its running mean'
          f' {self.running_loss:.4g}, above train.divergence_factor for'
          f' {self.streak} steps)'
          if diverged
          else ''
      )
      kept = (
          f'the last checkpoint (step {self.last_saved}) is kept'
          if self.last_saved
          else 'no checkpoint was saved yet'
      )
      raise TrainingError(
          f'training loss became {loss:.4g} at step {step}{why}; stopped,'
          f' {kept}; {self.advice}'
      )
    if not above:
      self.running_loss = (
          loss
          if self.running_loss is None
          else 0.9 * self.running_loss + 0.1 * loss
      )
    for key in self.sums:
      self.sums[key] += host[key]
    self.steps += 1

  def summary(self, step, devices, steps_per_epoch, schedule) -> Dict:
    """The metrics.jsonl 'train' record of the steps since the last reset."""
    elapsed, tokens = self.seconds, self.sums['tokens']
    return {
        'loss': self.sums['loss_sum'] / max(tokens, 1.0),
        # Target tokens of the global batch, over all devices and per device.
        'tokens_per_sec': tokens / elapsed,
        'tokens_per_sec_per_device': tokens / elapsed / devices,
        # Sentences per step (varies by bucket with data.batch_tokens).
        'global_batch': self.sentences / max(self.steps, 1),
        'devices': devices,
        'grad_norm': self.sums['grad_norm'] / max(self.steps, 1),
        'learning_rate': float(schedule(step - 1)),
        'epoch': step / steps_per_epoch,
    }


class Eta:
  """Time left to `num_steps`, from the wall time since the first log line.

  The first window holds the compilation of the step (and of each bucket
  met), and one window's rate swings with validations, checkpoints and the
  lengths its batches drew: the estimate averages everything after the
  first log line, validation and saving included, so it is the time the run
  will take. Before there is such an interval, the first window's rate.
  """

  def __init__(self, num_steps: int, clock: Callable[[], float] = None):
    self.num_steps = num_steps
    self._clock = clock or time.perf_counter
    self._origin = None  # (time, step) of the first log line

  def seconds_left(self, step: int, window_seconds_per_step: float) -> float:
    """At a log line of `step`: the seconds to num_steps."""
    now = self._clock()
    if self._origin is None or step <= self._origin[1]:
      self._origin = self._origin or (now, step)
      per_step = window_seconds_per_step
    else:
      per_step = (now - self._origin[0]) / (step - self._origin[1])
    return per_step * max(self.num_steps - step, 0)
