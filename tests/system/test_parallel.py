"""Data parallelism on 8 fake CPU devices: same numbers as 1 device, jit == pmap, checkpoints
move between device counts, and device-count mistakes are one-line errors."""

import os
import subprocess
import sys

import numpy as np
import pytest

from nmt_jax.system import errors
from nmt_jax.system import parallel
from tests import conftest

ROOT = conftest.ROOT
WORKER = os.path.join(ROOT, 'tests', 'parallel_worker.py')
STEPS = 4

pytestmark = pytest.mark.slow


def run_worker(tmp_path, name, devices, *args):
  env = conftest.subprocess_env()
  env['XLA_FLAGS'] = f'--xla_force_host_platform_device_count={devices}'
  out = str(tmp_path / f'{name}.npz')
  result = subprocess.run(
      [sys.executable, WORKER, out, f'--steps={STEPS}', *args],
      cwd=ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=600,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  loaded = np.load(out)
  assert int(loaded['devices']) == devices
  return {k: loaded[k] for k in loaded.files if k != 'devices'}


def assert_same(a, b, rtol=2e-5, atol=2e-5):
  # Devices change the summation order only. Adam divides by sqrt(v): in a weight whose
  # gradient is near zero that noise moves the update by up to ~1e-3 of a step (lr 3e-3),
  # hence atol; a wrong reduction (a mean of means, a missing psum) is off by whole steps.
  assert set(a) == set(b)
  for key in a:
    np.testing.assert_allclose(
        a[key], b[key], rtol=rtol, atol=atol, err_msg=key
    )


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('parallel')
  one = run_worker(tmp, 'one', 1, '--save_at=2', f'--save_dir={tmp}/ckpt1')
  eight = run_worker(tmp, 'eight', 8, '--save_at=2', f'--save_dir={tmp}/ckpt8')
  return tmp, one, eight


def test_eight_devices_equal_one(runs):
  _, one, eight = runs
  assert len(one['losses']) == STEPS
  # the steps did update
  assert not np.allclose(one['losses'][0], one['losses'][-1])
  assert_same(one, eight)


def test_pmap_equals_jit(tmp_path):
  # Dropout off: pmap draws its masks per device, jit over the global batch.
  jit = run_worker(tmp_path, 'jit', 8, '--mode=jit', '--no_dropout')
  pmap = run_worker(tmp_path, 'pmap', 8, '--mode=pmap', '--no_dropout')
  assert_same(jit, pmap)


def test_checkpoint_moves_between_device_counts(runs):
  tmp, one, eight = runs
  # Saved at step 2 on 8 devices, continued on 1 -> the uninterrupted 1-device run.
  from_eight = run_worker(tmp, 'from_eight', 1, f'--restore_dir={tmp}/ckpt8')
  from_one = run_worker(tmp, 'from_one', 8, f'--restore_dir={tmp}/ckpt1')
  params = lambda run: {k: v for k, v in run.items() if k != 'losses'}
  assert_same(params(from_eight), params(one))
  assert_same(params(from_one), params(eight))
  np.testing.assert_allclose(from_eight['losses'], one['losses'][2:], rtol=2e-5)


def nmt_on_devices(devices, *args):
  env = conftest.subprocess_env()
  env['XLA_FLAGS'] = f'--xla_force_host_platform_device_count={devices}'
  return subprocess.run(
      [sys.executable, '-m', 'nmt_jax.main', *args],
      cwd=ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=300,
  )


@pytest.mark.parametrize(
    'override, message',
    [
        (
            '--config.train.batch_size=12',
            'train.batch_size=12 is not divisible by the 8 devices',
        ),
        (
            '--config.parallel.mesh_shape=(4,)',
            'parallel.mesh_shape=(4,) does not match the 8 devices',
        ),
        (
            '--config.train.dropout_rng=philox2x32',
            'philox2x32 does not compile in a step sharded over 8 devices',
        ),
    ],
)
def test_device_mistakes_are_one_line_errors(tmp_path, override, message):
  workdir = tmp_path / 'run'
  result = nmt_on_devices(
      8,
      '--config=configs/global_general.py:tiny',
      f'--workdir={workdir}',
      override,
  )
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1].startswith('error: ')
  assert message in result.stderr
  assert not workdir.exists()  # refused before anything was written


@pytest.mark.parametrize(
    'shape', [('a',), 'abc', (2.5,), (True,), (0,), (-1, 1), ()]
)
def test_a_mesh_shape_that_is_not_one_device_count_is_a_config_error(shape):
  # ('a',) reached a comparison with 0: TypeError and a traceback.
  with pytest.raises(errors.ConfigError, match='must be one axis'):
    parallel.make_mesh(shape)


def test_batches_by_tokens_need_no_divisible_batch_size(tmp_path):
  # data.batch_tokens decides the training batches (rounded to multiples of
  # the 3 devices); train.batch_size (8) is not checked against them.
  result = nmt_on_devices(
      3,
      '--config=configs/global_general.py:tiny',
      f'--workdir={tmp_path / "run"}',
      '--config.data.batch_tokens=100',
      '--config.train.num_steps=2',
      '--config.decode.beam_size=1',
      '--config.train.eval_num_sentences=8',
  )
  assert result.returncode == 0, result.stderr[-3000:]
