"""Files written whole (a temporary file renamed over the path) never
replace a FIFO, and write through a symbolic link to its target."""

import os
import stat

import numpy as np
import pytest

from nmt_jax.system import errors
from nmt_jax.workdir import writers


def test_a_fifo_is_refused_and_kept(tmp_path):
  fifo = tmp_path / 'out.npz'
  os.mkfifo(fifo)
  for write in (
      lambda: writers.write_npz(str(fifo), {'a': np.zeros(2)}),
      lambda: writers.write_json(str(fifo), {'a': 1}),
      lambda: writers.write_text(str(fifo), 'a'),
  ):
    with pytest.raises(errors.WriteError) as refused:
      write()
    assert str(refused.value).startswith(f'{fifo} is a FIFO')
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
  with pytest.raises(errors.WriteError, match=r'^--out=.* is a FIFO'):
    writers.check_regular_file(str(fifo), 'out')
  assert sorted(os.listdir(tmp_path)) == ['out.npz']  # no temporary file left


def test_a_link_is_written_at_its_target(tmp_path):
  target = tmp_path / 'target.txt'
  target.write_text('old')
  link = tmp_path / 'link.txt'
  link.symlink_to(target)
  writers.write_text(str(link), 'new')
  assert link.is_symlink() and target.read_text() == 'new'
  assert writers.check_regular_file(str(link), 'out') == str(target)
