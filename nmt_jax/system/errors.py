"""Errors a user can fix, and the config checks that raise them.

`main` prints each UserError as one line and exits with status 2.
"""

import math
from typing import Any


class UserError(Exception):
  """Bad input: the message names the problem and the fix."""


class ConfigError(UserError):
  """A config value that cannot work."""


class DataError(UserError):
  """Data that cannot be used as configured."""


class CheckpointError(UserError):
  """A checkpoint or workdir that does not fit this run."""


class WriteError(UserError):
  """A file of the run cannot be written (a full disk, permissions)."""


class TrainingError(UserError):
  """Training cannot go on (e.g. the loss became NaN).

  The last checkpoint is kept.
  """


class Preempted(Exception):
  """Training stopped on SIGTERM after saving a checkpoint (exit status 143).

  Not an error of the user's: the same command resumes.
  """


def config_error(field: str, value: Any, why: str, fix: str) -> ConfigError:
  """A one-line ConfigError for `field`, e.g.:

  'config: model.x=3 must be even; use an even size (--config.model.x=...)'.
  """
  return ConfigError(
      f'config: {field}={value!r} {why}; {fix} (--config.{field}=...)'
  )


def _number(field: str, value: Any, allow_inf: bool = False):
  """Checks value is a finite number (or inf, if allowed), not NaN."""
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    raise config_error(field, value, 'must be a number', 'give a number')
  if math.isnan(value) or (math.isinf(value) and not allow_inf):
    raise config_error(field, value, 'must be finite', 'give a finite number')
  # Counts and sizes become int32 arrays (a step counter, a shape).
  if isinstance(value, int) and abs(value) >= 2**31:
    raise config_error(
        field, value, 'must be below 2**31', 'give a smaller value'
    )


def finite(field: str, value: Any):
  """Checks value is a finite number (any sign)."""
  _number(field, value)


def positive(field: str, value: Any):
  """Checks value > 0 (finite)."""
  _number(field, value)
  if value <= 0:
    raise config_error(field, value, 'must be > 0', 'give a positive value')


def non_negative(field: str, value: Any):
  """Checks value >= 0 (finite)."""
  _number(field, value)
  if value < 0:
    raise config_error(field, value, 'must be >= 0', 'give 0 or more')


def non_negative_or_inf(field: str, value: Any):
  """Checks value >= 0; inf allowed (a threshold that never applies)."""
  _number(field, value, allow_inf=True)
  if value < 0:
    raise config_error(field, value, 'must be >= 0', 'give 0 or more, or inf')


def boolean(field: str, value: Any):
  """Checks value is True or False."""
  if not isinstance(value, bool):
    raise config_error(field, value, 'must be True or False', 'give a bool')


def one_of(*choices: str):
  """A check that value is one of `choices`."""

  def check(field: str, value: Any):
    if value not in choices:
      raise config_error(
          field,
          value,
          'is not one of the known values',
          f'use one of {", ".join(repr(c) if not c else c for c in choices)}',
      )

  return check
