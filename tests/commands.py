"""The command lines run as a user runs them, and what the tests read back."""

import hashlib
import json
import os
import shutil
import time

from absl import flags
import jax
from ml_collections import config_flags
import numpy as np

from nmt_jax.workdir import checkpoint
from tests import conftest

CONFIG = 'configs/global_general.py:tiny'
# Small and quick: greedy final evaluation, a few validation sentences, and
# one length bucket (one training step to compile, a third of a tiny run's
# time). Bucketed batches and their restored iterator are tested in
# tests/data/test_pipeline.py, and end to end with two buckets by
# test_cli.py's resume after SIGKILL.
QUICK = [
    '--config.decode.beam_size=1',
    '--config.train.eval_num_sentences=8',
    '--config.data.num_buckets=1',
]


def nmt(*args, check=True, input_text=None, timeout=600, fork=True):
  """`python -m nmt_jax.main args` (conftest.run_module)."""
  return conftest.run_module(
      'nmt_jax.main',
      *args,
      check=check,
      input_text=input_text,
      timeout=timeout,
      fork=fork,
  )


def cli_config(*args):
  """The config `nmt(*args)` runs: --config=FILE[:ARG] and --config.F=V.

  For in-process runs (train.train_and_evaluate, inference.translate) that
  stand for a command line's. Parsed by ml_collections' config flag, as the
  command line parses them; other flags are ignored.
  """
  argv = ['nmt']
  for arg in args:
    if arg.startswith('--config='):  # a path from the repository root
      arg = '--config=' + os.path.join(conftest.ROOT, arg[len('--config=') :])
    if arg.startswith('--config'):
      argv.append(arg)
  flag_values = flags.FlagValues()
  # The override flags are found in sys_argv (sys.argv by default).
  config_flags.DEFINE_config_file(
      'config', flag_values=flag_values, sys_argv=argv
  )
  flag_values(argv)
  return flag_values.config


def snapshot(workdir):
  """{relative path: sha256} of every file under workdir."""
  digest = {}
  for base, _, files in os.walk(workdir):
    for name in files:
      path = os.path.join(base, name)
      with open(path, 'rb') as f:
        digest[os.path.relpath(path, workdir)] = hashlib.sha256(
            f.read()
        ).hexdigest()
  return digest


def wait_until(condition, processes, timeout=300):
  """Polls `condition()`; fails if a process ends first or time runs out."""
  deadline = time.time() + timeout
  while not condition():
    assert time.time() < deadline, 'timed out waiting'
    assert all(p.poll() is None for p in processes), 'a process ended'
    time.sleep(0.02)


def final_params(workdir, step):
  ckpts = checkpoint.Checkpoints(workdir, create=False)
  try:
    # Onto this process's first device, whatever device count wrote it.
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    target = jax.tree_util.tree_map(
        lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=sharding),
        ckpts.manager.item_metadata(step)['state'],
    )
    restored = ckpts.manager.restore(
        step,
        args=checkpoint.ocp.args.Composite(
            state=checkpoint.ocp.args.StandardRestore(target)
        ),
    )
  finally:
    ckpts.close()
  return {
      jax.tree_util.keystr(p): np.asarray(v)
      for p, v in jax.tree_util.tree_flatten_with_path(restored.state)[0]
  }


def copy_reading_backwards(workdir, copy):
  """`workdir` copied to `copy`, its config.json with data.reverse_source.

  The model then reads each source backwards, as one trained with
  data.reverse_source does.
  """
  shutil.copytree(workdir, copy)
  path = os.path.join(copy, 'config.json')
  with open(path) as f:
    config = json.load(f)
  config['data']['reverse_source'] = True
  with open(path, 'w') as f:
    json.dump(config, f)
