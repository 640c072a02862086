"""Training metrics between two log lines, fetched one step late and checked.

A NaN or infinite loss, or a diverging one, stops training with a
TrainingError naming the last checkpoint.
"""

import contextlib
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


def seconds_left(
    step: int,
    num_steps: int,
    eval_every: int,
    seconds_per_step: float,
    seconds_per_validation: Optional[float],
) -> float:
  """At the log line of `step`: the seconds training still takes.

  Remaining steps x seconds per step, plus the validations still to come x
  seconds per validation (None: none timed yet, the steps alone). A run
  validates every eval_every steps and at its last step; at a log line the
  validation of that step is still to come.
  """
  time = max(num_steps - step, 0) * seconds_per_step
  if seconds_per_validation is not None:
    time += validations_left(step, num_steps, eval_every) * (
        seconds_per_validation
    )
  return time


def validations_left(step: int, num_steps: int, eval_every: int) -> int:
  """Validations at the steps in [step, num_steps] (every eval_every, last)."""
  if step > num_steps:
    return 0
  last = 1 if num_steps % eval_every else 0
  return num_steps // eval_every - (step - 1) // eval_every + last


class Eta:
  """Time left to `num_steps`: training steps and validations timed apart.

  Seconds per step: the wall time since the first log line less the
  validations in it, over the steps since (checkpoint saves included, as
  they recur with the steps); the first window holds the compilation of the
  step (and of each bucket met), so it counts only until there is a later
  one. Seconds per validation: the mean of the validations timed so far,
  the first (which compiles the decoder) left out once there are others.
  Before the first validation the estimate is the steps alone
  (`steps_only`). The final evaluation of a test split (--mode=train's
  last act) is not counted: it decodes another split, often with another
  beam, so no validation measures it.
  """

  def __init__(
      self,
      num_steps: int,
      eval_every: int,
      clock: Callable[[], float] = None,
  ):
    self.num_steps = num_steps
    self.eval_every = eval_every
    self._clock = clock or time.perf_counter
    self._origin = None  # (time, step) of the first log line
    self._validations = []  # seconds of each validation timed
    self._validating = 0.0  # seconds of those after the origin

  @contextlib.contextmanager
  def validation(self):
    """Times the validation run inside it."""
    start = self._clock()
    yield
    seconds = self._clock() - start
    self._validations.append(seconds)
    if self._origin is not None:
      self._validating += seconds

  @property
  def seconds_per_validation(self) -> Optional[float]:
    timed = self._validations[1:] or self._validations
    return sum(timed) / len(timed) if timed else None

  def steps_only(self, step: int) -> bool:
    """Whether validations are still to come but none was timed yet."""
    return not self._validations and bool(
        validations_left(step, self.num_steps, self.eval_every)
    )

  def seconds_left(self, step: int, window_seconds_per_step: float) -> float:
    """At a log line of `step`: the seconds to num_steps."""
    now = self._clock()
    if self._origin is None or step <= self._origin[1]:
      self._origin = self._origin or (now, step)
      per_step = window_seconds_per_step
    else:
      training = now - self._origin[0] - self._validating
      per_step = training / (step - self._origin[1])
    return seconds_left(
        step,
        self.num_steps,
        self.eval_every,
        per_step,
        self.seconds_per_validation,
    )
