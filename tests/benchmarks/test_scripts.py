"""benchmarks/performance.sh and peer_setup.sh: the runs they make (--dry-run)
and the files the performance page reads."""

import fnmatch
import os
import re
import shlex
import subprocess
import sys

from benchmarks import performance
from tests import conftest

ROOT = conftest.ROOT


def _performance_dry_run(tmp_path, **env):
  """benchmarks/performance.sh --dry-run with a stand-in peer installation."""
  peer = tmp_path / 'peer'
  (peer / 'bin').mkdir(parents=True, exist_ok=True)
  (peer / 'runs' / 'L50').mkdir(parents=True, exist_ok=True)
  for f in ('bin/python', 'train_bench.py', 'translate_bench.py'):
    (peer / f).write_text('')
  (peer / 'runs' / 'L50' / 'train.yaml').write_text('')
  result = subprocess.run(
      ['bash', 'benchmarks/performance.sh', str(tmp_path / 'out'), '--dry-run'],
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
  assert 'benchmarks.performance' in lines[-1]


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
  ours = [a for a in timed if 'benchmarks.bench' in a and 'train' in a]
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
  read = []
  for name in performance.files_read('cpu'):
    if '*' in name:  # a glob: a written file matches it
      assert fnmatch.filter(written, name), name
    else:  # {r}: each of 3 pairs (REPEATS)
      read += sorted({name.format(r=r) for r in (1, 2, 3)})
  for prefix, _ in performance.TRAINING_FIGURES[1:]:  # one thread
    read += [
        f'{p}{prefix}train_L{length}_t1_r{r}.json'
        for p in ('', 'peer_')
        for length in (50, 100)
        for r in (1, 2, 3)
    ]
  assert len(read) == 58 and set(read) <= written, set(read) - written
  preloaded = [
      line for line in result.stdout.splitlines() if 'LD_PRELOAD' in line
  ]
  assert len(preloaded) == 6  # nmt_jax and OpenNMT-py, 3 runs each
  gpu_only = set(performance.files_read('gpu')) - set(
      performance.files_read('cpu')
  )
  assert len(gpu_only) == 9 and not gpu_only & written
  on_gpu = _performance_dry_run(tmp_path, PARTS='levers', PLATFORM='gpu')
  assert on_gpu.returncode == 0, on_gpu.stderr
  assert gpu_only <= set(
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
  ours = [line for line in best if 'benchmarks.bench' in line]
  for line in ours:
    assert 'NMT_JAX_KEEP_FREED_MEMORY=1' in line
    assert '--config.data.num_buckets=16' in line


def _peer_setup(tmp_path, *args, **env):
  """benchmarks/peer_setup.sh with stand-in peer scripts -> (result, scripts)."""
  scripts = tmp_path / 'scripts'
  scripts.mkdir(exist_ok=True)
  for f in ('gen_copy_data.py', 'make_config.py'):
    (scripts / f).write_text('')
  result = subprocess.run(
      ['bash', 'benchmarks/peer_setup.sh', *args],
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
    # benchmarks/performance.sh checks for this file before it times the peer.
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
  script = os.path.join(ROOT, 'benchmarks', 'performance.sh')
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
