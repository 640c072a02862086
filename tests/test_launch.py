"""launch/ scripts: the exact commands of --dry-run, and one-line argument errors."""

import itertools
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest

from nmt_jax.tools import op_times
from nmt_jax.tools import performance_kinds
from nmt_jax.tools import performance_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = 'configs/memory_k64.py'


def launch(script, *args):
  return subprocess.run(
      ['bash', os.path.join(ROOT, 'launch', script), *args],
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
        ('performance.sh', [], 'give the directory for the JSON files'),
        ('performance.sh', ['a', 'b'], "one OUT directory, not 'a' and 'b'"),
        ('performance.sh', ['a', '--frobnicate'], 'unknown argument'),
        ('peer_setup.sh', [], 'set PEER_SCRIPTS'),
        ('peer_setup.sh', ['--frobnicate'], "unknown argument '--frobnicate'"),
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
      '--config.train.log_every=1',
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
  metrics = workdir / 'metrics.jsonl'
  deadline = time.time() + 300
  while not (metrics.exists() and metrics.stat().st_size > 200):
    assert time.time() < deadline and os.path.exists(f'/proc/{pid}'), (
        home / 'nmt_jax.log'
    ).read_text()[-2000:]
    time.sleep(0.5)
  subprocess.run(['bash', '-c', _remote(['stop', *where])], env=env, check=True)
  deadline = time.time() + 120
  while os.path.exists(f'/proc/{pid}') and time.time() < deadline:
    time.sleep(0.5)
  log = (home / 'nmt_jax.log').read_text()
  assert not os.path.exists(f'/proc/{pid}'), log[-2000:]
  assert 'interrupted; run the same command again to resume' in log
  assert not (home / 'nmt_jax.pid').exists()


@pytest.mark.parametrize(
    'script',
    [
        'performance.sh',
        'peer_setup.sh',
        'multi_gpu.sh',
        'slurm.sh',
        'tpu_pod.sh',
    ],
)
def test_help_prints_the_whole_header_comment(script):
  result = launch(script, '--help')
  assert result.returncode == 0, result.stderr
  with open(os.path.join(ROOT, 'launch', script)) as f:
    lines = f.read().splitlines()[1:]  # after the #! line
  header = itertools.takewhile(lambda line: line.startswith('#'), lines)
  assert result.stdout.splitlines() == [line[2:] for line in header]


def _performance_dry_run(tmp_path, **env):
  """launch/performance.sh --dry-run with a stand-in peer installation."""
  peer = tmp_path / 'peer'
  (peer / 'bin').mkdir(parents=True, exist_ok=True)
  (peer / 'runs' / 'L50').mkdir(parents=True, exist_ok=True)
  for f in ('bin/python', 'train_bench.py', 'translate_bench.py'):
    (peer / f).write_text('')
  (peer / 'runs' / 'L50' / 'train.yaml').write_text('')
  result = subprocess.run(
      ['bash', 'launch/performance.sh', str(tmp_path / 'out'), '--dry-run'],
      cwd=ROOT,
      env=dict(
          os.environ,
          PEER_VENV=str(peer),
          PEER_SCRIPTS=str(peer),
          PEER_WORK=str(peer),
          **env,
      ),
      capture_output=True,
      text=True,
      timeout=60,
  )
  if result.returncode == 0:  # the commands, after the cd they need
    first, _, result.stdout = result.stdout.partition('\n')
    assert first == f'cd {shlex.quote(ROOT)}', first
  return result


def test_performance_runs_alternate_toolkits_on_one_pinned_core(tmp_path):
  result = _performance_dry_run(
      tmp_path, REPEATS='2', PARTS='train decode page', CORE='1'
  )
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  timed = [shlex.split(line) for line in lines[:-1]]
  # Every timed run is pinned to the chosen core.
  assert all(args[args.index('taskset') + 2] == '1' for args in timed)
  who = [
      'peer' if 'train_bench.py' in ' '.join(a) else 'nmt_jax' for a in timed
  ]
  # Training: peer, nmt_jax per length and repeat (2 lengths x 2 repeats).
  assert who[:8] == ['peer', 'nmt_jax'] * 4
  # nmt_jax's repetitions in a pair cover OpenNMT-py's 80-step window.
  assert all(
      '--steps=27' in a for a, w in zip(timed[:8], who) if w == 'nmt_jax'
  )
  assert not (tmp_path / 'out').exists()  # --dry-run creates nothing
  assert 'nmt_jax.tools.performance' in lines[-1]


def test_performance_levers_compare_repetitions_of_ten_steps(tmp_path):
  names = ('lever_fitted16', 'best_train_L50_t1_r1')
  result = _performance_dry_run(tmp_path, PARTS='levers', ONLY=' '.join(names))
  assert result.returncode == 0, result.stderr
  steps = {}
  for args in map(shlex.split, result.stdout.splitlines()):
    for name in names:
      if f'--json={tmp_path / "out" / name}.json' in args:
        steps[name] = [x for x in args if x.startswith('--steps=')]
  # In-process lever comparisons pair short repetitions; the run paired with
  # OpenNMT-py covers its 80-step window.
  assert steps == {
      'lever_fitted16': ['--steps=10'],
      'best_train_L50_t1_r1': ['--steps=27'],
  }, result.stdout


def test_performance_on_a_gpu_runs_both_toolkits_there_unpinned(tmp_path):
  result = _performance_dry_run(tmp_path, PLATFORM='gpu')
  assert result.returncode == 0, result.stderr
  timed = [shlex.split(line) for line in result.stdout.splitlines()[:-1]]
  assert not any('taskset' in args or '--threads=1' in args for args in timed)
  trains = [a for a in timed if any('train_bench.py' in x for x in a)]
  decodes = [a for a in timed if any('translate_bench.py' in x for x in a)]
  assert trains and all(
      a[-4:] == ['-world_size', '1', '-gpu_ranks', '0'] for a in trains
  )
  assert decodes and all(a[a.index('-gpu') + 1] == '0' for a in decodes)
  # No all-cores part: every run is one process.
  assert not any(re.search(r'_t(?!1_)\d+_', ' '.join(a)) for a in timed)
  # A training repetition is 100 steps: 10 take a few milliseconds there.
  ours = [a for a in timed if 'nmt_jax.bench' in a and 'train' in a]
  assert ours and all('--steps=100' in a for a in ours)
  result = _performance_dry_run(tmp_path, PLATFORM='tpu')
  assert result.returncode == 2
  assert result.stderr.strip() == 'error: PLATFORM=tpu: use cpu or gpu'


def test_performance_only_runs_the_runs_it_names(tmp_path):
  result = _performance_dry_run(
      tmp_path,
      PARTS='train levers',
      ONLY='lever_bfloat16 peer_train_L50_t1_r2',
  )
  assert result.returncode == 0, result.stderr
  timed = [shlex.split(line) for line in result.stdout.splitlines()]
  out = tmp_path / 'out'
  assert len(timed) == 2, timed
  assert f'--json={out}/lever_bfloat16.json' in timed[1]
  assert (
      timed[0][timed[0].index('--json') + 1]
      == f'{out}/peer_train_L50_t1_r2.json'
  )


def test_the_script_writes_every_file_the_performance_page_reads(tmp_path):
  result = _performance_dry_run(
      tmp_path,
      PARTS='train decode levers startup',
      TCMALLOC='/lib/libtcmalloc.so',
  )
  assert result.returncode == 0, result.stderr
  written = set(re.findall(r'--json[= ]\S*/(\w+\.json)', result.stdout))
  read = [
      entry[0] for entry in performance_text.LEVERS + performance_kinds.KINDS
  ] + [performance_text.STARTUP_FILE, *op_times.PAGE_FILES]
  for on, off, *_ in performance_text.PROCESS_LEVERS:  # 3 pairs (REPEATS)
    read += [name.format(r=r) for name in (on, off) for r in (1, 2, 3)]
  for prefix, _ in performance_text.TRAINING_FIGURES[1:]:  # one thread
    read += [
        f'{p}{prefix}train_L{length}_t1_r{r}.json'
        for p in ('', 'peer_')
        for length in (50, 100)
        for r in (1, 2, 3)
    ]
  assert len(read) == 55 and set(read) <= written, set(read) - written
  preloaded = [
      line for line in result.stdout.splitlines() if 'LD_PRELOAD' in line
  ]
  assert len(preloaded) == 6  # nmt_jax and OpenNMT-py, 3 runs each
  gpu_only = [
      entry[0]
      for entry in performance_text.GPU_LEVERS + performance_kinds.GPU_KINDS
  ]
  assert len(gpu_only) == 9 and not set(gpu_only) & written
  on_gpu = _performance_dry_run(tmp_path, PARTS='levers', PLATFORM='gpu')
  assert on_gpu.returncode == 0, on_gpu.stderr
  assert set(gpu_only) <= set(
      re.findall(r'--json[= ]\S*/(\w+\.json)', on_gpu.stdout)
  )
  # The option reaches both sides of each graphs-against-graphs comparison.
  graphs = [
      line
      for line in on_gpu.stdout.splitlines()
      if re.search(r'/kinds_\w*_cuda_graphs\.json', line)
  ]
  assert len(graphs) == 5
  for line in graphs:
    assert line.count('compiler_options=--xla_gpu_enable_command_buffer') == 2
  # The decoders' default is CUDA graphs on a GPU: the other comparisons turn
  # it off on both sides, and the decoding lever on its default-less side.
  plain = (
      '--config.decode.compiler_options= --compare.decode.compiler_options= '
  )
  kinds_lines = [
      line
      for line in on_gpu.stdout.splitlines()
      if re.search(r'/kinds_\w*\.json', line) and line not in graphs
  ]
  assert len(kinds_lines) == 9
  assert all(plain in line for line in kinds_lines)
  lever = next(
      line
      for line in on_gpu.stdout.splitlines()
      if 'cuda_graphs_decode' in line
  )
  assert ' --compare.decode.compiler_options= ' in lever
  assert '--config.decode.compiler_options' not in lever


def test_the_fastest_training_pairs_run_on_all_cores_too(tmp_path):
  result = _performance_dry_run(tmp_path, PARTS='all', REPEATS='2')
  assert result.returncode == 0, result.stderr
  cores = len(os.sched_getaffinity(0))  # what nproc counts
  best = [line for line in result.stdout.splitlines() if 'best_train' in line]
  names = [re.search(r'(\w+)\.json', line).group(1) for line in best]
  assert names == [
      f'{who}best_train_L{length}_t{cores}_r{r}'
      for length in (50, 100)
      for r in (1, 2)
      for who in ('peer_', '')
  ]
  for line in best:  # every run of a pair on the same cores
    assert f'taskset -c 0-{cores - 1} ' in line or cores == 1
  ours = [line for line in best if 'nmt_jax.bench' in line]
  for line in ours:
    assert 'NMT_JAX_KEEP_FREED_MEMORY=1' in line
    assert '--config.data.num_buckets=16' in line


def _peer_setup(tmp_path, *args, **env):
  """launch/peer_setup.sh with stand-in peer scripts -> (result, scripts)."""
  scripts = tmp_path / 'scripts'
  scripts.mkdir(exist_ok=True)
  for f in ('gen_copy_data.py', 'make_config.py'):
    (scripts / f).write_text('')
  result = subprocess.run(
      ['bash', 'launch/peer_setup.sh', *args],
      cwd=ROOT,
      env=dict(
          os.environ,
          PEER_SCRIPTS=str(scripts),
          PEER_VENV=str(tmp_path / 'venv'),
          PEER_WORK=str(tmp_path / 'work'),
          **env,
      ),
      capture_output=True,
      text=True,
      timeout=60,
  )
  return result, scripts


def _peer_setup_dry_run(tmp_path, **env):
  result, scripts = _peer_setup(tmp_path, '--dry-run', **env)
  assert result.returncode == 0, result.stderr
  return result.stdout.splitlines(), scripts


def test_peer_setup_builds_the_environment_and_data_performance_sh_reads(
    tmp_path,
):
  lines, scripts = _peer_setup_dry_run(tmp_path, TORCH='torch==2.13.0')
  py, work = f'{tmp_path}/venv/bin/python', f'{tmp_path}/work'
  assert lines[:4] == [
      f'python3 -m venv {tmp_path}/venv',
      f'{py} -m pip install -q torch==2.13.0',
      f'{py} -m pip install -q --no-deps opennmt-py==3.5.1',
      (
          f'{py} -m pip install -q configargparse pyyaml six sacrebleu'
          " 'pyonmttok>=1.37,<2' spacy pyahocorasick rapidfuzz fasttext-wheel"
      ),
  ]
  for length in (50, 100):
    run = f'{work}/runs/L{length}'
    assert (
        f'{py} {scripts}/gen_copy_data.py --out {work}/data --L {length}'
        in lines
    )
    assert (
        f'{py} {scripts}/make_config.py --data {work}/data/L{length} --run'
        f' {run} > {run}/train.yaml'
    ) in lines
    # launch/performance.sh checks for this file before it times the peer.
    assert (
        f'{tmp_path}/venv/bin/onmt_build_vocab -config {run}/train.yaml'
        ' -n_sample -1'
    ) in lines
  # A machine with torch (a CUDA build) installed: the environment sees it.
  lines, _ = _peer_setup_dry_run(tmp_path, SYSTEM_TORCH='1')
  assert lines[0] == f'python3 -m venv --system-site-packages {tmp_path}/venv'
  # A machine without internet: every package from the wheels folder alone.
  wheels = tmp_path / 'wheels'
  wheels.mkdir()
  lines, _ = _peer_setup_dry_run(tmp_path, WHEELS=str(wheels))
  installs = [line for line in lines if ' -m pip install ' in line]
  assert len(installs) == 3, lines
  for line in installs:
    assert f' -m pip install -q --no-index --find-links {wheels} ' in line


def test_peer_setup_sees_the_torch_of_a_python3_in_a_virtual_env(tmp_path):
  # A GPU image whose python3 is a virtual environment's, with torch in it
  # (a stand-in package here).
  image = tmp_path / 'image'
  subprocess.run(
      [sys.executable, '-m', 'venv', '--without-pip', str(image)], check=True
  )
  version = f'python{sys.version_info[0]}.{sys.version_info[1]}'
  torch = image / 'lib' / version / 'site-packages' / 'torch'
  torch.mkdir(parents=True)
  (torch / '__init__.py').write_text('')
  wheels = tmp_path / 'wheels'  # empty: the install after torch's check fails
  wheels.mkdir()
  path = f"{image / 'bin'}:{os.environ['PATH']}"
  result, _ = _peer_setup(
      tmp_path, SYSTEM_TORCH='1', WHEELS=str(wheels), PATH=path
  )
  assert 'cannot import torch' not in result.stderr
  assert 'opennmt-py' in result.stderr  # it went on to install OpenNMT-py
  found = subprocess.run(
      [
          tmp_path / 'venv' / 'bin' / 'python',
          '-c',
          'import torch; print(torch.__file__)',
      ],
      capture_output=True,
      text=True,
      check=True,
  )
  assert found.stdout.strip() == str(torch / '__init__.py')


def test_peer_setup_names_a_missing_wheels_folder(tmp_path):
  result, _ = _peer_setup(tmp_path, WHEELS=str(tmp_path / 'missing'))
  assert result.returncode == 2
  assert result.stderr.strip() == (
      f'error: WHEELS={tmp_path}/missing is not a directory; point it at the'
      ' wheels fetched for this machine (launch/README.md)'
  )
  assert not (tmp_path / 'venv').exists()  # nothing made before the check


def test_performance_from_another_directory_and_an_empty_gpu_part(tmp_path):
  script = os.path.join(ROOT, 'launch', 'performance.sh')
  result = subprocess.run(
      ['bash', script, 'out', '--dry-run'],
      cwd=tmp_path,
      env=dict(os.environ, PARTS='train'),
      capture_output=True,
      text=True,
      check=True,
  )
  assert f'--json={tmp_path}/out/train_L50_t1_r1.json' in result.stdout
  result = subprocess.run(
      ['bash', script, 'out', '--dry-run'],
      cwd=tmp_path,
      env=dict(os.environ, PARTS='all', PLATFORM='gpu'),
      capture_output=True,
      text=True,
  )
  assert result.returncode == 2
  assert 'PARTS names nothing to run on a gpu' in result.stderr
