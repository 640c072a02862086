"""progress_bars' rule: a bar on a terminal, a log line every 30 s elsewhere."""

import io
import logging

import jax.numpy as jnp
import pytest

from nmt_jax.system import progress_bars


class Terminal(io.StringIO):
  """A stream that says it is a terminal."""

  def isatty(self):
    return True


@pytest.fixture(autouse=True)
def auto(monkeypatch):
  monkeypatch.delenv(progress_bars.ENV, raising=False)


def test_a_terminal_gets_a_bar_with_count_and_total():
  stream = Terminal()
  assert progress_bars.kind(stream) == 'bar'
  items = list(
      progress_bars.bar(range(7), desc='decoding', unit='batch', stream=stream)
  )
  assert items == list(range(7))
  shown = stream.getvalue()
  assert 'decoding' in shown and '0/7' in shown and 'batch' in shown
  assert shown.endswith('\r')  # erased when done (leave=False)


def test_a_log_file_gets_no_bar_and_the_environment_decides_over_both(
    monkeypatch,
):
  stream = io.StringIO()
  assert progress_bars.kind(stream) == 'log'
  assert list(progress_bars.bar(range(3), stream=stream)) == [0, 1, 2]
  assert stream.getvalue() == ''
  monkeypatch.setenv(progress_bars.ENV, 'on')
  assert progress_bars.kind(stream) == 'bar'
  list(progress_bars.bar(range(3), desc='x', stream=stream))
  assert '0/3' in stream.getvalue()
  monkeypatch.setenv(progress_bars.ENV, 'off')
  assert progress_bars.kind(Terminal()) == 'off'


def test_the_bar_goes_to_stderr_never_stdout(monkeypatch, capsys):
  monkeypatch.setenv(progress_bars.ENV, 'on')
  list(progress_bars.bar(range(4), desc='translating'))
  out, err = capsys.readouterr()
  assert out == '' and '0/4' in err


def test_off_a_terminal_one_log_line_per_30_seconds(caplog):
  now = [0.0]
  count = progress_bars.bar(
      total=100,
      desc='decoding',
      unit='batch',
      stream=io.StringIO(),
      clock=lambda: now[0],
  )
  with caplog.at_level(logging.INFO, logger='absl'):
    for _ in range(10):  # 10 batches in 29 s: no line yet
      now[0] += 2.9
      count.update(1)
    assert not caplog.records
    now[0] = 30.0  # 11 batches in 30 s: 89 left at 11/30 a second
    count.update(1)
    now[0] = 45.0  # 15 s after that line: none
    count.update(1)
  (record,) = caplog.records
  assert record.getMessage() == (
      'decoding: 11/100 batch (11%), 0.367 batch/s, 4m02s left'
  )
  assert (
      progress_bars.LogLines(None, None, 'sweep', 'run', lambda: 0.0).line(10.0)
      == 'sweep: 0 run, 0 run/s'
  )


def test_wait_each_waits_for_every_output_and_returns_them():
  outputs = [jnp.arange(3) * i for i in range(3)]
  assert progress_bars.wait_each(outputs, 'decoding') is outputs


def test_durations():
  assert progress_bars.duration(42.9) == '0m42s'
  assert progress_bars.duration(3725) == '1h02m'
  assert progress_bars.duration(float('inf')) == '?'
