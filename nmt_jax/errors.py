"""Errors a user can fix, and the config checks that raise them.

`main` prints each UserError as one line and exits with status 2.
"""

from typing import Any


class UserError(Exception):
  """Bad input: the message names the problem and the fix."""


class ConfigError(UserError):
  """A config value that cannot work."""


class DataError(UserError):
  """Data that cannot be used as configured."""


class CheckpointError(UserError):
  """A checkpoint or workdir that does not fit this run."""


class TrainingError(UserError):
  """Training cannot go on (e.g. the loss became NaN).

  The last good checkpoint is kept.
  """


def config_error(field: str, value: Any, why: str, fix: str) -> ConfigError:
  """A one-line ConfigError for `field`, e.g.:

  'config: model.x=3 must be even; use an even size (--config.model.x=...)'.
  """
  return ConfigError(
      f'config: {field}={value!r} {why}; {fix} (--config.{field}=...)'
  )


def positive(field: str, value: Any):
  """Checks value > 0."""
  if not isinstance(value, (int, float)) or value <= 0:
    raise config_error(field, value, 'must be > 0', 'give a positive value')


def non_negative(field: str, value: Any):
  """Checks value >= 0."""
  if not isinstance(value, (int, float)) or value < 0:
    raise config_error(field, value, 'must be >= 0', 'give a positive value')


def one_of(*choices: str):
  """A check that value is one of `choices`."""

  def check(field: str, value: Any):
    if value not in choices:
      raise config_error(
          field,
          value,
          'is not one of the known values',
          f'use one of {", ".join(choices)}',
      )

  return check
