"""The battery's corpus, average, sweep and bench cases (cases_tools.py).

Each case a command of its own.
"""

import shutil

import pytest

from tests.faults import battery
from tests.faults import cases_tools

pytestmark = pytest.mark.battery


@pytest.mark.parametrize(
    'case', cases_tools.cases(), ids=lambda case: case.name
)
def test_fault(case, workdirs, tmp_path):
  record = battery.run_case(case, str(tmp_path / 'case'), workdirs)
  assert record['class'] == battery.expected_class(record), battery.failure(
      record
  )
  shutil.rmtree(tmp_path / 'case')
