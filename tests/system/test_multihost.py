"""Two processes on localhost joined by jax.distributed (CPU, gloo collectives)."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from nmt_jax import inference
from nmt_jax import train
from tests import conftest
from tests.commands import QUICK
from tests.commands import cli_config
from tests.commands import final_params
from tests.commands import nmt
from tests.commands import wait_until

ROOT = conftest.ROOT
CONFIG = 'configs/global_general.py:tiny'
# A line of C++ (glog/absl) logging: 'W1127 04:05:15.502617  24802 x.cc:90] ...'
GLOG = re.compile(r'^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] ')

pytestmark = pytest.mark.slow


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def start(process_id, port, *args, num_processes=2, stdin=None):
  """One process of the run; the test waits on (and kills) only the processes it started."""
  return subprocess.Popen(
      [
          sys.executable,
          '-m',
          'nmt_jax.main',
          *args,
          f'--coordinator_address=localhost:{port}',
          f'--num_processes={num_processes}',
          f'--process_id={process_id}',
      ],
      cwd=ROOT,
      env=conftest.subprocess_env(),
      stdin=stdin,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
  )


def two_processes(*args, timeout=600):
  """[(exit status, stderr)] of the two processes of a run."""
  port = free_port()
  processes = [start(0, port, *args), start(1, port, *args)]
  try:
    errors = [p.communicate(timeout=timeout)[1] for p in processes]
  finally:
    for p in processes:
      if p.poll() is None:
        p.kill()
  return [(p.returncode, err) for p, err in zip(processes, errors)]


def run_two_processes(*args, timeout=600):
  results = two_processes(*args, timeout=timeout)
  for status, err in results:
    assert status == 0, err[-3000:]
  return [err for _, err in results]


def test_two_processes_stop_together_resume_and_agree_with_one(tmp_path):
  """SIGTERM: JAX's preemption service agrees on the step, both save it.

  Both processes then resume from it, and the run ends where a one-process
  run of as many steps ends.
  """
  two, one = tmp_path / 'two', tmp_path / 'one'
  args = [
      f'--config={CONFIG}',
      *QUICK,
      '--config.train.checkpoint_every=10000',
      '--config.train.eval_every=10000',
      '--config.train.log_every=1',
      # One length bucket: one training step for each process to compile.
      '--config.data.num_buckets=1',
  ]
  port = free_port()
  # 600 steps: still running when the signal comes.
  long_run = [*args, '--config.train.num_steps=600', f'--workdir={two}']
  processes = [start(0, port, *long_run), start(1, port, *long_run)]
  try:
    metrics = two / 'metrics.jsonl'
    wait_until(
        lambda: metrics.exists() and metrics.stat().st_size > 500, processes
    )
    for p in processes:
      p.send_signal(signal.SIGTERM)
    errors = [p.communicate(timeout=120)[1] for p in processes]
  finally:
    for p in processes:
      if p.poll() is None:
        p.kill()
  assert 'in 2 process(es)' in errors[0]
  # The last line nmt_jax wrote: the C++ preemption notifier's own log line
  # ('W1127 ... preemption_notifier.cc:90] SIGTERM caught at ...') may reach
  # stderr after it.
  lasts = [
      [line for line in err.strip().splitlines() if not GLOG.match(line)][-1]
      for err in errors
  ]
  for p, err, last in zip(processes, errors, lasts):
    assert p.returncode == 143, err[-3000:]
    assert last.startswith('stopped by SIGTERM after step'), last
  assert lasts[0] == lasts[1]  # the same step
  step = lasts[0].split('after step ')[1].split(',')[0]
  assert os.listdir(two / 'checkpoints') == [step]
  # A newer step only one process cannot read (its own data-iterator file)
  # is damaged for both: both set it aside and resume from the saved step.
  # Alone, process 1 set it aside and waited while process 0 trained on.
  newer = two / 'checkpoints' / str(int(step) + 1)
  shutil.copytree(two / 'checkpoints' / step, newer)
  (newer / 'data' / 'process_1-of-2.json').write_text('{"next_in')
  # Restarted on the same workdir: both restore the saved step and go on,
  # profiling the third step after it (a traced compilation, of the first,
  # is slow). In one shared profile folder a process read back another's
  # half-written trace (EOFError) and the other hung at the next collective:
  # one folder per process.
  end = int(step) + 4
  logs = run_two_processes(
      *args,
      f'--config.train.num_steps={end}',
      f'--workdir={two}',
      f'--config.train.profile_from_step={int(step) + 2}',
      '--config.train.profile_steps=1',
  )
  assert 'process 1 cannot read its data-iterator state' in logs[0]
  assert os.listdir(two / 'checkpoints' / 'corrupt') == [newer.name]
  assert all(f'resuming from step {step}' in log for log in logs)
  assert str(end) in os.listdir(two / 'checkpoints')
  for process in (0, 1):
    traces = list(
        (two / 'profile' / f'process_{process}').glob(
            'plugins/profile/*/perfetto_trace.json.gz'
        )
    )
    assert len(traces) == 1, process
  # One process, in this one: the command line's config.
  config = cli_config(*args, f'--config.train.num_steps={end}')
  train.train_and_evaluate(config, str(one))

  distributed, single = final_params(two, end), final_params(one, end)
  assert set(distributed) == set(single)
  for key in single:
    np.testing.assert_allclose(
        distributed[key], single[key], rtol=2e-5, atol=2e-5, err_msg=key
    )
  # Translating in two processes: process 0 writes the lines, and stdout
  # carries nothing else (gloo printed '[Gloo] Rank 0 is connected ...' there).
  sentences = 'a b c d\ne f a\n'
  alone = ''.join(
      line + '\n'
      for line in inference.translate(
          config, [str(two)], sentences.split('\n')[:2]
      )
  )
  port = free_port()
  translate = [*args, f'--workdir={two}', '--mode=translate']
  (tmp_path / 'input.txt').write_text(sentences)
  with open(tmp_path / 'input.txt') as f0, open(tmp_path / 'input.txt') as f1:
    processes = [
        start(i, port, *translate, stdin=f) for i, f in enumerate((f0, f1))
    ]
  try:
    outputs = [p.communicate(timeout=300) for p in processes]
  finally:
    for p in processes:
      if p.poll() is None:
        p.kill()
  assert [p.returncode for p in processes] == [0, 0], outputs[1][1][-2000:]
  assert [out for out, _ in outputs] == [alone, '']
  assert len(alone.splitlines()) == 2
  with open(two / 'eval_results.json') as f:
    two_eval = json.load(f)
  with open(one / 'eval_results.json') as f:
    one_eval = json.load(f)
  # Decoding was sharded over the processes and gathered: the same sentences, the same scores.
  assert two_eval['num_sentences'] == one_eval['num_sentences'] == 32
  assert two_eval['loss'] == pytest.approx(one_eval['loss'], rel=1e-4)
  assert (two / 'eval_hypotheses.txt').read_text() == (
      one / 'eval_hypotheses.txt'
  ).read_text()
  # Only process 0 writes metrics: one record per logged step, not two.
  with open(metrics) as f:
    steps = [json.loads(line)['step'] for line in f if '"train"' in line]
  assert steps == list(range(1, end + 1))


def test_processes_that_read_different_input_stop_with_one_line(tmp_path):
  # Each process reads the input; one that read other lines (or none) made
  # the others die in a collective (gloo aborted on mismatched sizes, or a
  # traceback after its 30 s timeout). The check comes before the workdir is
  # read: this one has no checkpoints.
  workdir = tmp_path / 'untrained'
  inputs = [tmp_path / 'a.txt', tmp_path / 'b.txt']
  inputs[0].write_text('a b c\nd e\n')
  inputs[1].write_text('a b c\n')

  def translate(files, *args):
    port = free_port()
    opened = [open(f) for f in files]
    try:
      processes = [
          start(
              i,
              port,
              f'--config={CONFIG}',
              f'--workdir={workdir}',
              '--mode=translate',
              *args,
              stdin=f,
          )
          for i, f in enumerate(opened)
      ]
      results = [p.communicate(timeout=120) for p in processes]
    finally:
      for f in opened:
        f.close()
    lasts = [err.strip().splitlines()[-1] for _, err in results]
    assert [p.returncode for p in processes] == [2, 2], lasts
    assert not any('Traceback' in err for _, err in results)
    assert not any(out for out, _ in results)
    return lasts

  lasts = translate(inputs)
  assert lasts[0] == lasts[1]
  assert lasts[0].startswith('error: the processes read different input'), lasts
  assert '2 lines' in lasts[0] and '1 lines' in lasts[0]
  assert lasts[0].endswith(
      'give every process the same input (--input or stdin)'
  )
  # A mistake only process 0 sees (its --output folder does not exist).
  lasts = translate([inputs[0], inputs[0]], f'--output={tmp_path}/no/out.txt')
  assert 'folder' in lasts[0] and 'does not exist' in lasts[0], lasts
  assert lasts[1] == (
      'error: process 0 could not read the input or write --output; its log'
      ' says why'
  )


def test_unreachable_coordinator_is_a_clear_error_not_a_hang(tmp_path):
  workdir = tmp_path / 'run'
  began = time.monotonic()
  process = start(
      1,
      free_port(),
      f'--config={CONFIG}',
      f'--workdir={workdir}',
      '--distributed_timeout=3',
  )
  _, err = process.communicate(timeout=120)
  assert process.returncode != 0
  assert 'did not form within 3s' in err and '--coordinator_address' in err
  assert time.monotonic() - began < 60
  assert not workdir.exists()


@pytest.mark.parametrize(
    'flags, message',
    [
        (['--coordinator_address=localhost:1234'], 'go together'),
        (
            [
                '--coordinator_address=localhost',
                '--num_processes=2',
                '--process_id=0',
            ],
            'not host:port',
        ),
        (
            [
                '--coordinator_address=localhost:1234',
                '--num_processes=2',
                '--process_id=2',
            ],
            'outside [0, --num_processes=2)',
        ),
    ],
)
def test_distributed_flag_mistakes(tmp_path, flags, message):
  result = nmt(
      f'--config={CONFIG}', f'--workdir={tmp_path / "run"}', *flags, check=False
  )
  assert result.returncode == 2
  assert message in result.stderr.strip().splitlines()[-1]


def test_a_workdir_in_use_stops_every_process_with_one_line(tmp_path):
  # Only process 0 takes the lock; the others must learn of its refusal, not
  # run on into a collective and time out there.
  workdir = tmp_path / 'run'
  workdir.mkdir()
  holder = {'host': socket.gethostname(), 'pid': os.getpid(), 'since': 'now'}
  (workdir / 'lock').write_text(json.dumps(holder))
  args = [f'--config={CONFIG}', *QUICK, f'--workdir={workdir}']
  for status, err in two_processes(*args, timeout=300):
    assert status == 2, err[-3000:]
    last = [line for line in err.strip().splitlines() if not GLOG.match(line)]
    assert last[-1].startswith('error: workdir') and 'in use' in last[-1]
    assert 'Traceback' not in err
  assert json.loads((workdir / 'lock').read_text()) == holder


def test_process_0_builds_the_vocabulary_the_others_read_it(tmp_path):
  """Both processes building into one workdir collided on the temporary
  file, and SentencePiece's sampling would build each its own vocabulary."""
  workdir = tmp_path / 'run'
  args = [
      f'--config={CONFIG}',
      f'--workdir={workdir}',
      (
          f'--config.data.name=text:{os.path.join(ROOT, "tests", "corpora", "numbers")}'
      ),
      '--config.data.max_length=60',
      '--config.data.vocab.kind=sentencepiece',
      '--config.data.vocab.size=48',
      '--mode=prepare',
  ]
  logs = run_two_processes(*args, timeout=300)
  built = [[x for x in log.splitlines() if 'vocabulary: ' in x] for log in logs]
  assert len(built[0]) == 2 and not built[1], built  # source, target (shared)
  assert all('prepared: train 400 pairs' in log for log in logs)
  # A failure on process 0 stops both, the other with one line.
  (workdir / 'vocab' / 'spm_shared.model').write_bytes(b'not a model')
  results = two_processes(*args, timeout=300)
  lasts = [
      [x for x in err.strip().splitlines() if not GLOG.match(x)][-1]
      for _, err in results
  ]
  assert [status for status, _ in results] == [2, 2], results[1][1][-2000:]
  assert 'spm_shared.model' in lasts[0], lasts[0]
  assert (
      lasts[1] == 'error: process 0 failed preparing the data; its log says why'
  )


WAIT_FOR_PROCESS_0 = """
import sys, time, jax
jax.distributed.initialize(sys.argv[1], 2, int(sys.argv[2]))
from nmt_jax.system import parallel
def work():
  if jax.process_index() == 0:
    time.sleep(35)
  return jax.process_index()
print('returned', parallel.process_0_first(work, 'sleeping'))
"""


@pytest.fixture(scope='module', autouse=True)
def process_0_sleeping():
  """The two processes of the last test, started with the module's first.

  Process 0 sleeps 35 s; the other tests run meanwhile.
  """
  address = f'localhost:{free_port()}'
  processes = [
      subprocess.Popen(
          [sys.executable, '-c', WAIT_FOR_PROCESS_0, address, str(i)],
          cwd=ROOT,
          env=conftest.subprocess_env(),
          stdout=subprocess.PIPE,
          stderr=subprocess.PIPE,
          text=True,
      )
      for i in (0, 1)
  ]
  try:
    yield processes
  finally:
    for p in processes:
      if p.poll() is None:
        p.kill()
        p.communicate()


def test_the_others_wait_for_process_0_longer_than_a_collective_would(
    process_0_sleeping,
):
  """A corpus download or vocabulary build on process 0 takes minutes to
  hours; the others waited in a collective, whose first call on a CPU gave
  up after 30 s (gloo: DEADLINE_EXCEEDED)."""
  processes = process_0_sleeping
  outputs = [p.communicate(timeout=150) for p in processes]
  for i, (p, (out, err)) in enumerate(zip(processes, outputs)):
    assert p.returncode == 0, err[-2000:]
    assert out.split() == ['returned', str(i)]
