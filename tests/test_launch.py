"""launch/ scripts (and the benchmark scripts' arguments): the exact commands of
--dry-run, and one-line argument errors."""

import itertools
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from tests import conftest

ROOT = conftest.ROOT
CONFIG = 'configs/memory_k64.py'


def launch(script, *args):
  """Runs a launcher (launch/NAME) or a script named from the root (a/b.sh)."""
  path = script if '/' in script else os.path.join('launch', script)
  return subprocess.run(
      ['bash', os.path.join(ROOT, path), *args],
      cwd=ROOT,
      capture_output=True,
      text=True,
      timeout=60,
  )


def dry_run(script, *args):
  args = list(args)
  # nmt_jax flags go after '--'
  at = args.index('--') if '--' in args else len(args)
  result = launch(script, *args[:at], '--dry-run', *args[at:])
  assert result.returncode == 0, result.stderr
  return [line for line in result.stdout.splitlines() if line]


def test_tpu_pod_run_starts_every_worker_with_the_exact_command():
  lines = dry_run(
      'tpu_pod.sh',
      'run',
      '--name=nmt',
      '--zone=us-central2-b',
      '--project=p1',
      f'--config={CONFIG}:wmt17_de_en',
      "--workdir=/mnt/shared/it's x",
      '--',
      '--config.train.batch_size=512',
  )
  assert len(lines) == 1
  argv = shlex.split(lines[0])
  assert argv[:6] == ['gcloud', 'compute', 'tpus', 'tpu-vm', 'ssh', 'nmt']
  assert {'--zone=us-central2-b', '--project=p1', '--worker=all'} <= set(argv)
  remote = next(a for a in argv if a.startswith('--command='))[
      len('--command=') :
  ]
  head = 'cd ~/nmt_jax && { nohup '
  tail = '> ~/nmt_jax.log 2>&1 & echo $! > ~/nmt_jax.pid; }'
  assert remote.startswith(head) and remote.endswith(tail)
  command = shlex.split(remote[len(head) : -len(tail)])
  assert command == [
      'python3',
      '-m',
      'nmt_jax.main',
      '--distributed=on',
      f'--config={CONFIG}:wmt17_de_en',
      "--workdir=/mnt/shared/it's x",
      '--config.train.batch_size=512',
  ]


@pytest.mark.parametrize(
    'action, expected',
    [
        (
            'create',
            (
                'gcloud compute tpus tpu-vm create nmt --zone=z'
                ' --accelerator-type=v4-32 --version=tpu-ubuntu2204-base'
            ),
        ),
        (
            'stop',
            (
                'gcloud compute tpus tpu-vm ssh nmt --zone=z --worker=all '
                "'--command=[ -f ~/nmt_jax.pid ] && kill -INT"
                " $(cat ~/nmt_jax.pid) 2>/dev/null; rm -f ~/nmt_jax.pid; true'"
            ),
        ),
        ('delete', 'gcloud compute tpus tpu-vm delete nmt --zone=z --quiet'),
        (
            'logs',
            (
                'gcloud compute tpus tpu-vm ssh nmt --zone=z --worker=0 '
                "'--command=tail -n 200 -f ~/nmt_jax.log'"
            ),
        ),
    ],
)
def test_tpu_pod_lifecycle_commands(action, expected):
  assert dry_run(
      'tpu_pod.sh', action, '--name=nmt', '--zone=z', '--accelerator=v4-32'
  ) == [expected]


def test_tpu_pod_install_ships_the_committed_tree_to_all_workers():
  lines = dry_run('tpu_pod.sh', 'install', '--name=nmt', '--zone=z')
  assert lines[0].startswith(f'git -C {ROOT} archive --format=tar.gz')
  assert 'scp' in lines[1] and '--worker=all' in lines[1]
  assert (
      "pip install -e ~/nmt_jax[data] 'jax[tpu]>=0.10.2,<0.11'"
      in shlex.split(lines[2])[-1]
  )


@pytest.mark.parametrize(
    'per, tasks, local_ids', [('gpu', 4, None), ('node', 1, '0,1,2,3')]
)
def test_slurm_script(per, tasks, local_ids):
  lines = dry_run(
      'slurm.sh',
      '--nodes=2',
      '--gpus-per-node=4',
      f'--per={per}',
      '--partition=a100',
      f'--config={CONFIG}',
      '--workdir=/shared/my runs/x',
      '--venv=/shared/venv',
      '--',
      '--config.train.num_steps=10',
  )
  assert lines[0] == '#!/bin/bash'
  directives = {
      line.split('=')[0]: line.split('=', 1)[1]
      for line in lines
      if line.startswith('#SBATCH')
  }
  assert directives['#SBATCH --nodes'] == '2'
  assert directives['#SBATCH --ntasks-per-node'] == str(tasks)
  assert directives['#SBATCH --gpus-per-node'] == '4'
  assert directives['#SBATCH --partition'] == 'a100'
  assert f'cd {ROOT}' in lines and 'source /shared/venv/bin/activate' in lines
  srun = shlex.split(next(line for line in lines if line.startswith('srun ')))
  expected = [
      'srun',
      'python',
      '-m',
      'nmt_jax.main',
      '--distributed=on',
      f'--config={CONFIG}',
      '--workdir=/shared/my runs/x',
  ]
  expected += [f'--local_device_ids={local_ids}'] if local_ids else []
  assert srun == expected + ['--config.train.num_steps=10']


def test_multi_gpu_one_process_per_gpu():
  lines = dry_run(
      'multi_gpu.sh',
      '--gpus=0,1,2',
      '--processes=per-gpu',
      '--port=4000',
      f'--config={CONFIG}',
      '--workdir=runs/x',
  )
  # The commands name configs/ and runs/x from the repository root.
  assert shlex.split(lines[0]) == ['cd', ROOT]
  assert lines[1] == 'mkdir -p runs/x' and lines[-1] == 'wait'
  starts = lines[2:-1]
  assert len(starts) == 3
  for i, line in enumerate(starts):
    argv = shlex.split(line)
    assert argv[:2] == ['env', 'CUDA_VISIBLE_DEVICES=0,1,2']
    assert argv[-4:] == ['>', f'runs/x/process{i}.log', '2>&1', '&']
    assert {
        '--coordinator_address=localhost:4000',
        '--num_processes=3',
        f'--process_id={i}',
        f'--local_device_ids={i}',
    } <= set(argv)


FAKE_PYTHON = """#!/usr/bin/env python3
# Stands in for `python -m nmt_jax.main` of one process: on SIGINT it closes
# its checkpoints (2 s, process 1: 1 s), then records how many SIGINTs came.
import os, signal, sys, time
out = os.environ['FAKE_OUT']
i = next(a.split('=')[1] for a in sys.argv if a.startswith('--process_id='))
count = 0
def on_int(signum, frame):
  global count
  count += 1
signal.signal(signal.SIGINT, on_int)
open(f'{out}/started{i}', 'w').write(str(os.getpid()))
while not count:
  time.sleep(0.02)
time.sleep(2.0 - int(i))
open(f'{out}/closed{i}', 'w').write(str(count))
sys.exit(130)
"""


def _with_fake_python(tmp_path, source):
  """The environment with `source` as the `python` on PATH."""
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  (bin_dir / 'python').write_text(source)
  (bin_dir / 'python').chmod(0o755)
  return dict(os.environ, PATH=f'{bin_dir}:{os.environ["PATH"]}')


def _two_processes_per_gpu(tmp_path):
  return [
      'bash',
      os.path.join(ROOT, 'launch', 'multi_gpu.sh'),
      '--gpus=0,1',
      '--processes=per-gpu',
      f'--config={CONFIG}',
      f'--workdir={tmp_path / "run"}',
  ]


def _signal_states(script_pid, tmp_path):
  """What each process's signal state was when the script did not end."""
  states = {}
  for name, pid in [('script', script_pid)] + [
      (f'process {i}', (tmp_path / f'started{i}').read_text()) for i in (0, 1)
  ]:
    try:
      with open(f'/proc/{pid}/status') as f:
        fields = dict(line.split(':\t', 1) for line in f if ':\t' in line)
      states[name] = {
          k: fields[k].strip() for k in ('State', 'SigBlk', 'SigIgn', 'SigCgt')
      }
    except OSError:
      states[name] = 'exited'
  closed = [i for i in (0, 1) if (tmp_path / f'closed{i}').exists()]
  return f'{states}, closed: {closed}'


def test_multi_gpu_ctrl_c_waits_for_every_process_to_close(tmp_path):
  """Ctrl-C (SIGINT to the foreground process group) reaches each process
  once, and the script exits only after all have closed: `wait` returned
  early on the signal, leaving process 0 saving (and locking the workdir)."""
  env = _with_fake_python(tmp_path, FAKE_PYTHON)
  env['FAKE_OUT'] = str(tmp_path)
  # A suite started in the background (`pytest &`) hands SIGINT down
  # ignored, and bash cannot trap a signal ignored on entry: the script never
  # heard the Ctrl-C. A terminal's job has the default (a Python handler is
  # the default after exec; preexec_fn would fork a threaded process).
  before = signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    script = subprocess.Popen(
        _two_processes_per_gpu(tmp_path),
        cwd=ROOT,
        env=env,
        start_new_session=True,  # a terminal's foreground process group
    )
  finally:
    signal.signal(signal.SIGINT, before)
  try:
    deadline = time.time() + 30
    while not all((tmp_path / f'started{i}').exists() for i in (0, 1)):
      assert time.time() < deadline and script.poll() is None
      time.sleep(0.02)
    os.killpg(script.pid, signal.SIGINT)
    try:
      status = script.wait(timeout=30)
    except subprocess.TimeoutExpired:
      status = f'still running: {_signal_states(script.pid, tmp_path)}'
    assert status == 130
    closed = [(tmp_path / f'closed{i}') for i in (0, 1)]
    assert all(path.exists() for path in closed)  # when the script returned
    assert [path.read_text() for path in closed] == ['1', '1']
  finally:
    if script.poll() is None:
      script.kill()


def test_relative_paths_are_named_for_the_job_run_from_the_repository(
    tmp_path,
):
  # A config and workdir relative to the caller's directory; the job runs
  # from the repository root.
  (tmp_path / 'mine.py').write_text('')
  result = subprocess.run(
      [
          'bash',
          os.path.join(ROOT, 'launch', 'multi_gpu.sh'),
          '--gpus=0',
          '--config=mine.py:tiny',
          '--workdir=runs/x',
          '--dry-run',
      ],
      cwd=tmp_path,
      capture_output=True,
      text=True,
      check=True,
  )
  argv = shlex.split(result.stdout)
  assert f'--config={tmp_path}/mine.py:tiny' in argv
  assert f'--workdir={tmp_path}/runs/x' in argv


def test_multi_gpu_one_process():
  cd, command = dry_run(
      'multi_gpu.sh', '--gpus=0,1', f'--config={CONFIG}', '--workdir=runs/x'
  )
  assert shlex.split(cd) == ['cd', ROOT]
  assert command == (
      f'env CUDA_VISIBLE_DEVICES=0,1 python -m nmt_jax.main --config={CONFIG}'
      ' --workdir=runs/x'
  )


FAILING_PYTHON = """#!/usr/bin/env python3
# Process 1 fails at once; process 0 ends well a second later.
import sys, time
i = next(a.split('=')[1] for a in sys.argv if a.startswith('--process_id='))
if i == '1':
  sys.exit(3)
time.sleep(1)
"""


def test_multi_gpu_exits_with_a_failure_of_any_process(tmp_path):
  # A process that ended while the script waited for another was never
  # waited for: its failure went unseen and the script exited 0.
  result = subprocess.run(
      _two_processes_per_gpu(tmp_path),
      cwd=ROOT,
      env=_with_fake_python(tmp_path, FAILING_PYTHON),
      capture_output=True,
      text=True,
      timeout=60,
  )
  assert result.returncode == 3, result.stderr


@pytest.mark.parametrize(
    'script, args, message',
    [
        ('tpu_pod.sh', [], 'no action'),
        ('tpu_pod.sh', ['launch'], "unknown action 'launch'"),
        ('tpu_pod.sh', ['create', '--zone=z'], '--name is required'),
        (
            'tpu_pod.sh',
            ['create', '--name=Bad_Name', '--zone=z'],
            'not a valid TPU name',
        ),
        (
            'tpu_pod.sh',
            ['create', '--name=nmt', '--zone=z', '--accelerator=a100'],
            'not a TPU type',
        ),
        (
            'tpu_pod.sh',
            [
                'run',
                '--name=nmt',
                '--zone=z',
                '--config=configs/nope.py',
                '--workdir=w',
            ],
            'config file configs/nope.py does not exist',
        ),
        (
            'tpu_pod.sh',
            ['run', '--name=nmt', '--zone=z', f'--config={CONFIG}'],
            'needs --workdir',
        ),
        ('tpu_pod.sh', ['stop', '--name', 'nmt'], 'write --name=VALUE'),
        (
            'slurm.sh',
            ['--nodes=0', '--gpus-per-node=8'],
            '--nodes=0 must be a positive integer',
        ),
        (
            'slurm.sh',
            ['--nodes=1', '--gpus-per-node=8', '--per=socket'],
            "must be 'gpu' or 'node'",
        ),
        (
            'slurm.sh',
            ['--nodes=1', '--gpus-per-node=8', '--time=tomorrow'],
            'not a SLURM time',
        ),
        (  # a newline would add a line of its own to the batch script
            'slurm.sh',
            ['--nodes=1', '--gpus-per-node=8', '--partition=gpu\n#SBATCH -x'],
            "--partition=$'gpu\\n#SBATCH -x' may hold only letters",
        ),
        (
            'slurm.sh',
            ['--nodes=1', '--gpus-per-node=8', '--job-name=my run'],
            'may hold only letters',
        ),
        (
            'slurm.sh',
            ['--nodes=1', '--gpus-per-node=8', f'--config={CONFIG}'],
            '--workdir is required',
        ),
        (
            'slurm.sh',
            [
                '--nodes=1',
                '--gpus-per-node=8',
                f'--config={CONFIG}',
                '--workdir=w',
                '--venv=/nonexistent',
            ],
            'has no bin/activate',
        ),
        (
            'multi_gpu.sh',
            [f'--config={CONFIG}', '--workdir=w', '--gpus=0;1'],
            'must be GPU numbers',
        ),
        (
            'multi_gpu.sh',
            [f'--config={CONFIG}', '--workdir=w', '--processes=2'],
            "'one' or 'per-gpu'",
        ),
        (
            'multi_gpu.sh',
            ['--workdir=w', '--frobnicate'],
            "unknown argument '--frobnicate'",
        ),
        (
            'tpu_pod.sh',
            [
                'run',
                '--name=n',
                '--zone=z',
                f'--config={CONFIG}',
                '--workdir=w',
            ],
            '--workdir=w must be absolute',
        ),
        (
            'tpu_pod.sh',
            [
                'run',
                '--name=n',
                '--zone=z',
                f'--config={ROOT}/{CONFIG}',
                '--workdir=/w',
            ],
            'must be a committed file of this checkout, named from its root',
        ),
        (
            'benchmarks/performance.sh',
            [],
            'give the directory for the JSON files',
        ),
        (
            'benchmarks/performance.sh',
            ['a', 'b'],
            "one OUT directory, not 'a' and 'b'",
        ),
        (
            'benchmarks/performance.sh',
            ['a', '--frobnicate'],
            'unknown argument',
        ),
        ('benchmarks/peer_setup.sh', [], 'set PEER_SCRIPTS'),
        (
            'benchmarks/peer_setup.sh',
            ['--frobnicate'],
            "unknown argument '--frobnicate'",
        ),
    ],
)
def test_argument_errors(script, args, message):
  result = launch(script, *args)
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert (
      len(lines) == 1 and lines[0].startswith('error: ') and message in lines[0]
  ), lines


def _remote(script_args):
  """The --command= a tpu_pod.sh action runs on each worker."""
  (line,) = dry_run('tpu_pod.sh', *script_args)
  return next(
      a for a in shlex.split(line) if a.startswith('--command=')
  ).removeprefix('--command=')


def _cmdline(pid):
  """The process's command line ('' once it has exited or while it execs)."""
  try:
    with open(f'/proc/{pid}/cmdline') as f:
      return f.read().replace('\0', ' ')
  except OSError:
    return ''


@pytest.mark.slow
def test_tpu_pod_stop_interrupts_the_run_that_run_started(tmp_path):
  # The two remote commands as a worker's ssh runs them (a non-interactive
  # bash), with ~ in tmp_path: `stop` must reach the python process (not a
  # subshell) and the run, started with SIGINT ignored by `&`, must take it.
  home = tmp_path / 'home'
  home.mkdir()
  (home / 'nmt_jax').symlink_to(ROOT)
  workdir = tmp_path / 'run'
  where = ['--name=nmt', '--zone=z']
  run = _remote([
      'run',
      *where,
      '--config=configs/global_general.py:tiny',
      f'--workdir={workdir}',
      '--',
      '--distributed=off',
      '--config.train.num_steps=100000',
  ])
  env = dict(
      os.environ,
      HOME=str(home),
      PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ['PATH'],
  )
  subprocess.run(['bash', '-c', run], env=env, check=True, timeout=60)
  pid = int((home / 'nmt_jax.pid').read_text())
  # The pid is nohup's until it execs python; while a process execs, its
  # cmdline reads empty. Wait for the python command line, not one read.
  deadline = time.time() + 60
  while 'nmt_jax.main' not in _cmdline(pid):
    assert time.time() < deadline and os.path.exists(f'/proc/{pid}'), (
        _cmdline(pid),
        (home / 'nmt_jax.log').read_text()[-2000:],
    )
    time.sleep(0.1)
  # The run holds the workdir's lock: it has taken SIGINT over (main, first)
  # and is preparing its training.
  lock = workdir / 'lock'
  deadline = time.time() + 300
  while not lock.exists():
    assert time.time() < deadline and os.path.exists(f'/proc/{pid}'), (
        home / 'nmt_jax.log'
    ).read_text()[-2000:]
    time.sleep(0.05)
  subprocess.run(['bash', '-c', _remote(['stop', *where])], env=env, check=True)
  deadline = time.time() + 120
  while os.path.exists(f'/proc/{pid}') and time.time() < deadline:
    time.sleep(0.05)
  log = (home / 'nmt_jax.log').read_text()
  assert not os.path.exists(f'/proc/{pid}'), log[-2000:]
  assert 'interrupted; run the same command again to resume' in log
  assert not (home / 'nmt_jax.pid').exists()


@pytest.mark.parametrize(
    'script',
    [
        'benchmarks/performance.sh',
        'benchmarks/peer_setup.sh',
        'multi_gpu.sh',
        'slurm.sh',
        'tpu_pod.sh',
    ],
)
def test_help_prints_the_whole_header_comment(script):
  result = launch(script, '--help')
  assert result.returncode == 0, result.stderr
  path = script if '/' in script else os.path.join('launch', script)
  with open(os.path.join(ROOT, path)) as f:
    lines = f.read().splitlines()[1:]  # after the #! line
  header = itertools.takewhile(lambda line: line.startswith('#'), lines)
  assert result.stdout.splitlines() == [line[2:] for line in header]
