"""Data parallelism on 8 fake CPU devices: same numbers as 1 device, jit == pmap, checkpoints
move between device counts, and device-count mistakes are one-line errors."""

import json

import numpy as np
import pytest

from nmt_jax.system import errors
from nmt_jax.system import parallel
from tests import conftest

ROOT = conftest.ROOT
STEPS = 4

pytestmark = pytest.mark.slow


# Several runs of tests/parallel_worker.py in one process: the device count
# is the process's (XLA_FLAGS), a run's arguments are the worker's command
# line.
DRIVER = """
import json, sys
from tests import parallel_worker
for args in sys.argv[1:]:
  sys.argv = ['parallel_worker.py', *json.loads(args)]
  parallel_worker.main()
"""


def devices_env(devices):
  """The tests' environment with `devices` fake CPU devices."""
  env = conftest.subprocess_env()
  env['XLA_FLAGS'] += f' --xla_force_host_platform_device_count={devices}'
  return env


def python_on_devices(devices, code, *args, timeout=600):
  """`python -c code args` in the repository on `devices` fake CPU devices."""
  return conftest.run_code(
      code, *args, check=False, timeout=timeout, env=devices_env(devices)
  )


def run_workers(tmp_path, devices, runs):
  """{name: the worker's output} of `runs` ({name: [args]}), in order."""
  outs = {name: str(tmp_path / f'{name}.npz') for name in runs}
  result = python_on_devices(
      devices,
      DRIVER,
      *(
          json.dumps([outs[name], f'--steps={STEPS}', *args])
          for name, args in runs.items()
      ),
  )
  assert result.returncode == 0, result.stderr[-3000:]
  loaded = {}
  for name, out in outs.items():
    with np.load(out) as run:
      assert int(run['devices']) == devices
      loaded[name] = {k: run[k] for k in run.files if k != 'devices'}
  return loaded


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
  """Every worker run of the tests below, in three processes."""
  tmp = tmp_path_factory.mktemp('parallel')
  done = run_workers(
      tmp, 1, {'one': ['--save_at=2', f'--save_dir={tmp}/ckpt1']}
  )
  done |= run_workers(
      tmp,
      8,
      {
          'eight': ['--save_at=2', f'--save_dir={tmp}/ckpt8'],
          'from_one': [f'--restore_dir={tmp}/ckpt1'],
          # Dropout off: pmap draws its masks per device, jit over the global
          # batch.
          'jit': ['--mode=jit', '--no_dropout'],
          'pmap': ['--mode=pmap', '--no_dropout'],
          # Two micro-batches of 8 rows (one per device) a step.
          'batch16': ['--no_dropout', '--batch_size=16'],
          **{
              f'accumulated_{mode}': [
                  f'--mode={mode}',
                  '--no_dropout',
                  '--batch_size=16',
                  '--accumulate=2',
              ]
              for mode in ('jit', 'pmap')
          },
      },
  )
  done |= run_workers(tmp, 1, {'from_eight': [f'--restore_dir={tmp}/ckpt8']})
  return done


def test_eight_devices_equal_one(runs):
  one, eight = runs['one'], runs['eight']
  assert len(one['losses']) == STEPS
  # the steps did update
  assert not np.allclose(one['losses'][0], one['losses'][-1])
  assert_same(one, eight)


def test_pmap_equals_jit(runs):
  assert_same(runs['jit'], runs['pmap'])


@pytest.mark.parametrize('mode', ['jit', 'pmap'])
def test_accumulated_micro_batches_make_the_big_batchs_update(runs, mode):
  assert_same(runs['batch16'], runs[f'accumulated_{mode}'])


def test_checkpoint_moves_between_device_counts(runs):
  # Saved at step 2 on 8 devices, continued on 1 -> the uninterrupted 1-device
  # run, and the other way.
  params = lambda run: {k: v for k, v in run.items() if k != 'losses'}
  assert_same(params(runs['from_eight']), params(runs['one']))
  assert_same(params(runs['from_one']), params(runs['eight']))
  np.testing.assert_allclose(
      runs['from_eight']['losses'], runs['one']['losses'][2:], rtol=2e-5
  )


def nmt_on_devices(devices, *args):
  return conftest.run_module(
      'nmt_jax.main', *args, check=False, timeout=300, env=devices_env(devices)
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


# A test split with sentences over the last bucket, decoded on `devices`:
# every batch's rows split over the devices, the long sentences' own batch
# rounded up to a multiple of them (3 long ones: 3 rows on 1 device, 8 on 8).
DECODE_DRIVER = """
import json, sys
import jax
import numpy as np
from nmt_jax import data
from nmt_jax.data import batching
from nmt_jax.data import dataset
from nmt_jax.data.vocab import EOS
from nmt_jax.decoding import evaluation
from nmt_jax.model import seq2seq
from nmt_jax.system import parallel
from tests import helpers
config = helpers.tiny_config()
task = data.load_task(config.data, seed=0)
short = list(task.eval.source[:21])
body = np.concatenate([s[:-1] for s in task.eval.source[:6]])
long = [np.append(body[:n], EOS) for n in (17, 23, 29)]
assert min(map(len, long)) > task.max_length
sources = short + long
split = dataset.Split(sources, sources, [''] * 24, [''] * 24)
model = seq2seq.create_model(config, task)
params = helpers.init_params(model, seed=0)
evaluator = evaluation.Evaluator(config, model, task, parallel.make_mesh())
*_, (_, tail) = batching.eval_batches(
    split, 16, evaluator.boundaries, row_multiple=jax.device_count()
)
out = {'tail_shape': list(tail['source'].shape)}
for beam in (1, 3):
  decoded = evaluator.decode(params, split, beam_size=beam, batch_size=16)
  out[f'texts{beam}'] = decoded.texts
  out[f'scores{beam}'] = [n[0].score for n in decoded.nbest]
print(json.dumps(out))
"""


def decode_on_devices(devices):
  result = python_on_devices(devices, DECODE_DRIVER)
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(result.stdout.strip().splitlines()[-1])


def test_long_test_sentences_decode_alike_on_one_device_and_eight():
  one, eight = decode_on_devices(1), decode_on_devices(8)
  assert one['tail_shape'] == [3, 30] and eight['tail_shape'] == [8, 30]
  for beam in (1, 3):
    assert len(one[f'texts{beam}']) == 24
    assert one[f'texts{beam}'] == eight[f'texts{beam}']
    np.testing.assert_allclose(
        one[f'scores{beam}'], eight[f'scores{beam}'], rtol=1e-5, atol=1e-5
    )
