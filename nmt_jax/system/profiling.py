"""jax.profiler traces of training steps into the workdir."""

import contextlib
import os

from absl import logging
import jax

from nmt_jax.system import errors


def profile_dir(workdir: str, name: str) -> str:
  """Where this process writes a jax.profiler trace: <workdir>/<name>.

  With several processes, <workdir>/<name>/process_<i>: each writes its own
  trace, and JAX reads back the newest one in its folder to convert it.
  """
  if jax.process_count() == 1:
    return os.path.join(workdir, name)
  return os.path.join(workdir, name, f'process_{jax.process_index()}')


def check_folder(directory: str, field: str):
  """A UserError, before any step, where a file stands in the trace's way.

  (jax.profiler fails at the end of the traced steps, mid-run.)
  """
  path = directory
  while path and not os.path.exists(path):
    path = os.path.dirname(path)
  if path and not os.path.isdir(path):
    raise errors.UserError(
        f'{path} is a file, where the profile of {field} goes into a folder;'
        f' move it away, or leave {field} off'
    )


class Profiler(contextlib.AbstractContextManager):
  """Traces steps profile_from_step + 1 .. + profile_steps (jax.profiler).

  A run resumed inside that window traces the rest of it; a window the run
  never reaches (or has passed) is a warning, not a silent no-profile.
  """

  def __init__(self, directory: str, train_config):
    self.directory = directory
    self.first = train_config.profile_from_step
    self.last = min(
        self.first + train_config.profile_steps, train_config.num_steps
    )
    self.enabled = train_config.profile_steps > 0
    if self.enabled:
      check_folder(directory, 'train.profile_steps')
    self.tracing = False
    self.started = self.latest = None  # the steps traced: started+1..latest
    if self.enabled and self.first >= train_config.num_steps:
      logging.warning(
          'no profile: train.profile_from_step=%d is not before'
          ' train.num_steps=%d; set a smaller profile_from_step',
          self.first,
          train_config.num_steps,
      )
      self.enabled = False

  def before(self, step: int):
    if not self.enabled or self.started is not None:  # once per run
      return
    if step >= self.last:
      logging.warning(
          'no profile: steps %d-%d were trained before step %d, where this'
          ' run starts',
          self.first + 1,
          self.last,
          step,
      )
      self.enabled = False
    elif step >= self.first:
      jax.profiler.start_trace(self.directory, create_perfetto_trace=True)
      self.tracing, self.started, self.latest = True, step, step

  def after(self, done: int, state):
    self.latest = done
    if self.tracing and done >= self.last:
      jax.block_until_ready(state)  # the traced steps, not their dispatch
      self.__exit__(None, None, None)

  def __exit__(self, *exc_info):
    if self.tracing:
      self.tracing = False
      jax.profiler.stop_trace()
      logging.info(
          'profile of steps %d-%d in %s',
          self.started + 1,
          self.latest,
          self.directory,
      )
