"""The battery's command-line edge cases (cases_command_line.py), forked.

Flags, config files, bad values of every numeric and choice field, and
fields that do not go together: each command line stops before any model is
built, so one process imports JAX once and forks per case
(battery.run_forked), a chunk of cases at a time.
"""

import os
import shutil

import pytest

from tests.faults import battery
from tests.faults import cases_command_line

pytestmark = pytest.mark.battery

CASES = cases_command_line.cases()


@pytest.fixture(scope='module')
def forked(request, workdirs, tmp_path_factory):
  """The selected cases of this file, run in chunks in the order they run."""
  order = [
      item.callspec.params['case'].name
      for item in request.session.items
      if item.path == request.path and hasattr(item, 'callspec')
  ]
  folder = str(tmp_path_factory.mktemp('command_line'))
  return battery.ForkedBatch(CASES, order, workdirs, folder)


@pytest.mark.parametrize('case', CASES, ids=lambda case: case.name)
def test_fault(case, forked):
  record = forked.record(case.name)
  assert record['class'] == battery.expected_class(record), battery.failure(
      record
  )
  shutil.rmtree(os.path.join(forked.folder, case.name))
