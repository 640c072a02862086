"""Errors a user can fix. `main` prints each as one line and exits with status 2."""


class UserError(Exception):
  """Bad input: the message names the problem and the fix."""


class ConfigError(UserError):
  """A config value that cannot work."""


class DataError(UserError):
  """Data that cannot be used as configured."""


class CheckpointError(UserError):
  """A checkpoint or workdir that does not fit this run."""


class TrainingError(UserError):
  """Training cannot go on (e.g. the loss became NaN); the last good checkpoint is kept."""
