"""The fault battery's trained workdirs: one set per test process."""

import pytest

from tests import conftest
from tests.faults import battery


@pytest.fixture(scope='session')
def workdirs(tmp_path_factory):
  """The trained workdirs the cases copy (battery.Fixtures).

  Each is trained when a case first needs it, once per test process (per
  xdist worker), and copied into every case's folder.
  """
  return battery.Fixtures(
      str(tmp_path_factory.mktemp('battery')), conftest.subprocess_env()
  )
