"""The battery's interrupted training runs (cases_signals.py).

Each trains, is sent SIGINT, SIGTERM or SIGKILL at a moment found by the
records it wrote, and is resumed; the resumed run must reach the final
parameters of an uninterrupted run (trained once per test process) bit for
bit.
"""

import shutil

import pytest

from tests.faults import battery
from tests.faults import cases_signals

pytestmark = pytest.mark.battery


@pytest.mark.parametrize('case', cases_signals.cases(), ids=lambda c: c.name)
def test_fault(case, workdirs, tmp_path):
  record = battery.run_case(case, str(tmp_path / 'case'), workdirs)
  assert record['class'] == battery.expected_class(record), battery.failure(
      record
  )
  shutil.rmtree(tmp_path / 'case')
