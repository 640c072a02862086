"""Which parameters eval reads: a kept step (decode.step), the EMA.

The reference for a kept step is a second run trained only that far: the
same seed and batches, so the same parameters and the same scores. For
train.ema_decay, the arrays the checkpoint holds.
"""

import json
import os
import shutil

import jax
import numpy as np
import pytest

from nmt_jax import average
from nmt_jax import inference
from nmt_jax import train
from nmt_jax.config import validation
from nmt_jax.system import errors
from nmt_jax.workdir import checkpoint
from nmt_jax.workdir import init_from
from tests.commands import QUICK
from tests.commands import cli_config
from tests.commands import final_params

pytestmark = pytest.mark.slow

RUN = [
    '--config=configs/global_general.py:tiny',
    *QUICK,
    '--config.train.checkpoint_every=2',
    '--config.train.eval_every=6',
    '--config.train.keep_checkpoints=1',
]
PAIRS = [(1, 'a b c', 'c b a'), (2, 'd e', 'e d')]


def _steps(workdir):
  ckpts = checkpoint.Checkpoints(workdir, create=False)
  try:
    return sorted(ckpts.manager.all_steps())
  finally:
    ckpts.close()


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  """(6 steps keeping every 4th, the same run stopped at step 4)."""
  root = tmp_path_factory.mktemp('kept')
  long_run, short_run = str(root / 'six'), str(root / 'four')
  train.train_and_evaluate(
      cli_config(
          *RUN,
          '--config.train.num_steps=6',
          '--config.train.keep_every=4',
      ),
      long_run,
  )
  train.train_and_evaluate(
      cli_config(*RUN, '--config.train.num_steps=4'), short_run
  )
  return long_run, short_run


def test_keep_every_keeps_its_multiples_beside_the_newest(runs):
  long_run, short_run = runs
  assert _steps(long_run) == [4, 6]  # step 2: neither newest nor kept
  assert _steps(short_run) == [4]


def test_a_named_step_scores_as_the_run_that_stopped_there(runs):
  long_run, short_run = runs
  named = cli_config(*RUN, '--config.decode.step=4')
  at_four = inference.score(named, [long_run], PAIRS)
  assert at_four == inference.score(cli_config(*RUN), [short_run], PAIRS)
  assert at_four != inference.score(cli_config(*RUN), [long_run], PAIRS)


def test_eval_of_a_named_step_writes_beside_the_best_ones_results(runs):
  long_run, _ = runs
  with open(os.path.join(long_run, 'eval_results.json')) as f:
    best = json.load(f)
  inference.evaluate(cli_config(*RUN, '--config.decode.step=4'), [long_run])
  with open(os.path.join(long_run, 'eval_step_4', 'eval_results.json')) as f:
    assert json.load(f)['checkpoint_step'] == 4
  with open(os.path.join(long_run, 'eval_results.json')) as f:
    assert json.load(f) == best  # the best checkpoint's evaluation stays
  with open(os.path.join(long_run, 'metrics.jsonl')) as f:
    records = [json.loads(line) for line in f]
  assert [r['step'] for r in records if r['split'] == 'eval'] == [6, 4]


def test_a_step_not_kept_is_one_error_naming_the_kept_ones(runs):
  long_run, _ = runs
  config = cli_config(*RUN, '--config.decode.step=2')
  # --mode=score, translate and eval, in this process.
  for run in (
      lambda: inference.score(config, [long_run], PAIRS),
      lambda: inference.translate(config, [long_run], ['a b']),
      lambda: inference.evaluate(config, [long_run]),
  ):
    with pytest.raises(errors.CheckpointError, match=r'step 2 \(kept: 4, 6\)'):
      run()


def test_a_resume_without_keep_every_deletes_no_kept_step(runs, tmp_path):
  long_run, _ = runs
  with open(os.path.join(long_run, 'kept_steps.json')) as f:
    assert json.load(f) == {'steps': [4]}
  listed, older = str(tmp_path / 'listed'), str(tmp_path / 'older')
  shutil.copytree(long_run, listed)
  shutil.copytree(long_run, older)
  # A workdir from before kept_steps.json: its config.json says keep_every=4.
  os.remove(os.path.join(older, 'kept_steps.json'))
  for workdir in (listed, older):
    for steps in (8, 10):  # twice: the second resume's config.json says 0
      train.train_and_evaluate(
          cli_config(*RUN, f'--config.train.num_steps={steps}'),
          workdir,
          evaluate=False,
      )
      assert 4 in _steps(workdir) and steps in _steps(workdir)
  assert _steps(listed) == _steps(older)


def test_keep_every_must_be_a_multiple_of_checkpoint_every():
  config = cli_config(*RUN, '--config.train.keep_every=3')
  with pytest.raises(errors.ConfigError, match='multiple of'):
    validation.resolve(config)


def test_eval_and_averaging_read_the_ema_of_a_run_that_kept_one(tmp_path):
  workdir, averaged = str(tmp_path / 'ema'), str(tmp_path / 'avg')
  config = cli_config(
      *RUN,
      '--config.train.num_steps=4',
      '--config.train.keep_checkpoints=2',
      '--config.train.ema_decay=0.5',
  )
  train.train_and_evaluate(config, workdir, evaluate=False)
  stored = {step: final_params(workdir, step) for step in (2, 4)}
  ema, raw = "['ema_params']", "['params']"
  averages = {
      k[len(ema) :]: v for k, v in stored[4].items() if k.startswith(ema)
  }
  assert averages and any(
      not np.array_equal(v, stored[4][raw + k]) for k, v in averages.items()
  )
  ckpts = checkpoint.Checkpoints(workdir, create=False)
  try:
    read, _ = ckpts.restore_params(
        4,
        ckpts.manager.item_metadata(4)['state']['params'],
        jax.sharding.SingleDeviceSharding(jax.devices()[0]),
    )
  finally:
    ckpts.close()
  flat = jax.tree_util.tree_flatten_with_path(read)[0]
  assert len(flat) == len(averages)
  for path, value in flat:
    np.testing.assert_array_equal(value, averages[jax.tree_util.keystr(path)])
  # Averaging two checkpoints averages their EMAs (in float64).
  average.average_checkpoints(workdir, averaged, last=2)
  mean = final_params(averaged, 4)
  for key in averages:
    expected = (
        stored[4][ema + key].astype(np.float64) + stored[2][ema + key]
    ) / 2
    np.testing.assert_allclose(mean[ema + key], expected, rtol=1e-6)


def test_fine_tuning_can_start_at_the_parents_last_rate(runs, tmp_path):
  """train.init_from_learning_rate: the rate of the parent's last training
  records before the checkpoint it starts from, not train.learning_rate."""
  long_run, _ = runs
  parent = str(tmp_path / 'parent')
  shutil.copytree(long_run, parent)
  # A rate that decayed as at plateaus: a different one at every step.
  path = os.path.join(parent, 'metrics.jsonl')
  with open(path) as f:
    records = [json.loads(line) for line in f]
  for record in records:
    if record.get('split') == 'train':
      record['learning_rate'] = 1e-3 / record['step']
  with open(path, 'w') as f:
    f.writelines(json.dumps(record) + '\n' for record in records)
  logged = [r['step'] for r in records if r.get('split') == 'train']
  assert logged == [2, 4, 6]
  # Only step 6 was validated, so it is the best (step 4 is kept too).
  assert init_from.init_from_learning_rate(parent) == (6, 1e-3 / 6)

  child = str(tmp_path / 'child')
  tune = [
      *RUN,
      f'--config.train.init_from={parent}',
      '--config.train.init_from_learning_rate=true',
      '--config.train.learning_rate=0.5',  # replaced
  ]
  train.train_and_evaluate(
      cli_config(*tune, '--config.train.num_steps=2'), child, evaluate=False
  )
  # Resumed: the same rate again, so config.json still matches.
  train.train_and_evaluate(
      cli_config(*tune, '--config.train.num_steps=4'), child, evaluate=False
  )
  with open(os.path.join(child, 'config.json')) as f:
    assert json.load(f)['train']['learning_rate'] == pytest.approx(1e-3 / 6)
  with open(os.path.join(child, 'metrics.jsonl')) as f:
    rates = [
        r['learning_rate']
        for r in map(json.loads, f)
        if r.get('split') == 'train'
    ]
  assert len(rates) == 2  # steps 2 and 4
  np.testing.assert_allclose(rates, 1e-3 / 6, rtol=1e-6)
  # A parent whose rate reached 0 (or NaN) gives none to start from: refused
  # before any step, as train.learning_rate=0 would be.
  for bad in (0.0, float('nan')):
    for record in records:
      if record.get('split') == 'train':
        record['learning_rate'] = bad
    with open(path, 'w') as f:
      f.writelines(json.dumps(record) + '\n' for record in records)
    with pytest.raises(errors.ConfigError) as error:
      train.train_and_evaluate(
          cli_config(*tune, '--config.train.num_steps=2'),
          str(tmp_path / f'child_{bad}'),
      )
    assert 'which must be a positive number' in str(error.value)
    assert not os.path.exists(tmp_path / f'child_{bad}' / 'checkpoints' / '2')


def test_the_parents_rate_needs_a_parent():
  config = cli_config(*RUN, '--config.train.init_from_learning_rate=true')
  with pytest.raises(
      errors.ConfigError, match='train.init_from names, but that is empty'
  ):
    validation.resolve(config)
