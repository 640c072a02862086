"""jax.profiler traces of training steps into the workdir."""

import contextlib
import os

from absl import logging
import jax


def profile_dir(workdir: str, name: str) -> str:
  """Where this process writes a jax.profiler trace: <workdir>/<name>.

  With several processes, <workdir>/<name>/process_<i>: each writes its own
  trace, and JAX reads back the newest one in its folder to convert it.
  """
  if jax.process_count() == 1:
    return os.path.join(workdir, name)
  return os.path.join(workdir, name, f'process_{jax.process_index()}')


class Profiler(contextlib.AbstractContextManager):
  """Traces steps profile_from_step + 1 .. + profile_steps (jax.profiler)."""

  def __init__(self, directory: str, train_config):
    self.directory = directory
    self.first = train_config.profile_from_step
    self.last = self.first + train_config.profile_steps
    self.enabled = train_config.profile_steps > 0
    self.tracing = False

  def before(self, step: int):
    if self.enabled and step == self.first:
      jax.profiler.start_trace(self.directory, create_perfetto_trace=True)
      self.tracing = True

  def after(self, done: int, state):
    if self.tracing and done == self.last:
      jax.block_until_ready(state)  # the traced steps, not their dispatch
      self.__exit__(None, None, None)
      logging.info(
          'profile of steps %d-%d in %s', self.first + 1, done, self.directory
      )

  def __exit__(self, *exc_info):
    if self.tracing:
      self.tracing = False
      jax.profiler.stop_trace()
