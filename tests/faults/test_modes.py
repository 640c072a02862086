"""The battery's cases of every mode on trained workdirs (cases_modes.py).

Each case a command of its own on a copy of the copy-task or text-corpus
workdir: translate, score and eval input, ensembles, vocabularies.
"""

import shutil

import pytest

from tests.faults import battery
from tests.faults import cases_modes

pytestmark = pytest.mark.battery


@pytest.mark.parametrize(
    'case', cases_modes.cases(), ids=lambda case: case.name
)
def test_fault(case, workdirs, tmp_path):
  record = battery.run_case(case, str(tmp_path / 'case'), workdirs)
  assert record['class'] == battery.expected_class(record), battery.failure(
      record
  )
  shutil.rmtree(tmp_path / 'case')
