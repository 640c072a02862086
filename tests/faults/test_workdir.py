"""The battery's damaged checkpoints and workdir files (cases_workdir.py).

Each case a command of its own on a damaged copy of the copy-task workdir.
"""

import shutil

import pytest

from tests.faults import battery
from tests.faults import cases_workdir

pytestmark = pytest.mark.battery


@pytest.mark.parametrize(
    'case', cases_workdir.cases(), ids=lambda case: case.name
)
def test_fault(case, workdirs, tmp_path):
  record = battery.run_case(case, str(tmp_path / 'case'), workdirs)
  assert record['class'] == battery.expected_class(record), battery.failure(
      record
  )
  shutil.rmtree(tmp_path / 'case')
