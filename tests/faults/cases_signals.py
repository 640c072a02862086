"""Interrupted training runs: each resumed to the uninterrupted result.

SIGINT and SIGTERM at a number of training records (with checkpoints every
25 steps, or every step: the signal lands during a save), SIGKILL while
starting and at steps drawn once (random.Random(0)). Each is waited for by
the records the run wrote, not by time, so a loaded machine only makes it
slower. (SIGTERM at 150 records and during saves: tests/workdir/
test_faults.py's test_sigterm_saves_a_checkpoint_and_resumes_exactly, see
folded.py.)
"""

import functools
import os
import random
import re
import signal
import subprocess
import sys
import time

import jax
import numpy as np

from nmt_jax.workdir import checkpoint
from tests.faults import folded
from tests.faults.battery import CONFIG
from tests.faults.battery import QUICK
from tests.faults.battery import ROOT
from tests.faults.battery import Outcome
from tests.faults.battery import decode
from tests.faults.battery import has_traceback
from tests.faults.battery import succeed

# A run long enough to interrupt, checkpointed every 25 steps.
SIGNAL_STEPS = 400
SIGNAL = [
    f'--config={CONFIG}',
    *QUICK,
    f'--config.train.num_steps={SIGNAL_STEPS}',
    '--config.train.checkpoint_every=25',
    '--config.train.eval_every=1000',
    '--config.train.log_every=1',
    '--config.train.keep_checkpoints=2',
]


def _popen(args, env, **kwargs):
  return subprocess.Popen(
      [sys.executable, '-m', 'nmt_jax.main', *args],
      cwd=ROOT,
      env=env,
      stderr=subprocess.PIPE,
      **kwargs,
  )


def _train_records(workdir):
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.exists(path):
    return 0
  with open(path, 'rb') as f:
    return f.read().count(b'"split": "train"')


def _wait(condition, process, timeout=300):
  deadline = time.time() + timeout
  while not condition():
    if process.poll() is not None or time.time() > deadline:
      return False
    time.sleep(0.02)
  return True


def final_params(workdir, step):
  """{path: array} of a workdir's checkpoint at `step`, verified."""
  ckpts = checkpoint.Checkpoints(workdir, create=False)
  try:
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    state, _ = ckpts.restore_tree(step, sharding)
  finally:
    ckpts.close()
  return {
      jax.tree_util.keystr(p): np.asarray(v)
      for p, v in jax.tree_util.tree_flatten_with_path(state)[0]
  }


@functools.lru_cache(maxsize=None)
def _reference_params(reference):
  return final_params(reference, SIGNAL_STEPS)


def same_params(workdir, reference):
  """'' if `workdir`'s final parameters equal `reference`'s, bit for bit."""
  try:
    got = final_params(workdir, SIGNAL_STEPS)
    want = _reference_params(reference)
  except Exception as e:  # pylint: disable=broad-exception-caught
    return f'could not read the final checkpoints: {type(e).__name__}: {e}'
  if got.keys() != want.keys():
    return 'the final parameters have other names'
  for key, value in want.items():
    if not np.array_equal(value, got[key]):
      return f'final parameter {key} differs from the uninterrupted run'
  return ''


def interrupt_and_resume(how, moment, checkpoint_every=25):
  """A runner: train, interrupt (`how`) at `moment`, resume, compare.

  `moment`: ('records', n) after n train records, or ('seconds', s) after the
  start. SIGINT and SIGTERM must end in one line (exit 130, 143); the
  resumed run must reach the uninterrupted run's final parameters.
  """

  def runner(case, d, fixtures):
    del case
    reference = fixtures.trained('signal_reference', SIGNAL)
    env = fixtures.env
    workdir = os.path.join(d, 'w')
    args = [*SIGNAL, f'--config.train.checkpoint_every={checkpoint_every}']
    process = _popen(
        [*args, f'--workdir={workdir}'], env, stdout=subprocess.DEVNULL
    )
    kind, amount = moment
    if kind == 'records':
      _wait(lambda: _train_records(workdir) >= amount, process)
    else:
      time.sleep(amount)
    process.send_signal(how)
    try:
      _, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
      process.kill()
      _, stderr = process.communicate()
      return Outcome(None, '', decode(stderr), True)
    stderr = decode(stderr)
    problem = ''
    expected = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -9}
    lines = [x for x in stderr.splitlines() if x.strip()]
    if process.returncode == 0:
      problem = 'the run ended before the signal'
    elif process.returncode != expected[how]:
      problem = f'exit {process.returncode} after the signal'
    elif how != signal.SIGKILL and not (
        lines
        and re.search('(interrupted|stopped by SIGTERM).*resume', lines[-1])
    ):
      problem = f'the last line after the signal: {lines[-1:]}'
    if has_traceback(stderr):
      return Outcome(1, '', stderr, problem='a traceback after the signal')
    resumed = subprocess.run(
        [sys.executable, '-m', 'nmt_jax.main', *SIGNAL, f'--workdir={workdir}'],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=600,
        check=False,
    )
    outcome = Outcome(
        resumed.returncode, decode(resumed.stdout), decode(resumed.stderr)
    )
    outcome.problem = problem or (
        same_params(workdir, reference) if resumed.returncode == 0 else ''
    )
    return outcome

  return runner


def _signal_cases():
  """Interrupted training runs: each resumed to the uninterrupted result."""

  def case(name, how, moment, every=25):
    shown = [
        *SIGNAL,
        f'--config.train.checkpoint_every={every}',
        '--workdir={w}',
    ]
    return succeed(
        f'signals.{name}',
        shown,
        runner=interrupt_and_resume(how, moment, checkpoint_every=every),
    )

  moments = random.Random(0)
  cases = [
      case('sigint_then_resume', signal.SIGINT, ('records', 120)),
      case('sigterm_then_resume', signal.SIGTERM, ('records', 150)),
      case('sigterm_during_saves', signal.SIGTERM, ('records', 60), every=1),
      case('sigkill_while_starting', signal.SIGKILL, ('seconds', 3.0)),
  ]
  for _ in range(3):
    n = moments.randint(10, SIGNAL_STEPS - 20)
    cases.append(case(f'sigkill_at_step_{n}', signal.SIGKILL, ('records', n)))
  n = moments.randint(10, 200)
  cases.append(
      case(
          f'sigkill_during_saves_at_step_{n}',
          signal.SIGKILL,
          ('records', n),
          every=1,
      )
  )
  return cases


def cases():
  """The signal cases, but those folded into other tests (folded.py)."""
  return folded.without(_signal_cases())
