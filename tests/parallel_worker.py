"""A few training steps in a process of its own (device count from XLA_FLAGS), for test_parallel.

  python tests/parallel_worker.py OUT.npz --mode=jit|pmap --steps=4
      [--save_at=2 --save_dir=DIR] [--restore_dir=DIR]
      [--batch_size=N] [--accumulate=N]

Writes the losses and the final parameters to OUT.npz. The config is the
'tiny' preset with dropout on (jit must match across device counts with it)
unless --no_dropout.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

from nmt_jax import train  # pylint: disable=g-import-not-at-top
from nmt_jax.config import defaults  # pylint: disable=g-import-not-at-top
from nmt_jax.config import validation  # pylint: disable=g-import-not-at-top
from nmt_jax.system import parallel  # pylint: disable=g-import-not-at-top
from nmt_jax.workdir import checkpoint  # pylint: disable=g-import-not-at-top


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('out')
  parser.add_argument('--mode', default='jit')
  parser.add_argument('--steps', type=int, default=4)
  parser.add_argument('--save_at', type=int, default=0)
  parser.add_argument('--save_dir')
  parser.add_argument('--restore_dir')
  parser.add_argument('--no_dropout', action='store_true')
  parser.add_argument('--batch_size', type=int, default=0)
  parser.add_argument('--accumulate', type=int, default=1)
  args = parser.parse_args()

  config = defaults.get_config('tiny')
  config.parallel.mode = args.mode
  config.model.dropout = 0.0 if args.no_dropout else 0.2
  config.train.batch_size = args.batch_size or config.train.batch_size
  config.train.accumulate_steps = args.accumulate
  config = validation.resolve(config)
  setup = train.build(config)
  runner = parallel.data_parallel_step(
      setup.step_fn(), config.parallel.mode, setup.mesh
  )
  rows = parallel.process_rows(config.train.batch_size, setup.mesh)

  state, start = setup.state, 0
  if args.restore_dir:
    ckpts = checkpoint.Checkpoints(args.restore_dir, create=False)
    start = ckpts.latest_step()
    state, _ = ckpts.restore(start, checkpoint.abstract(state))
    ckpts.close()
  state = runner.to_loop(state)
  losses = []
  for step in range(start, args.steps):
    state, device_metrics = runner(state, setup.batches.batch(step, rows))
    metrics = runner.metrics(device_metrics)
    losses.append(float(metrics['loss_sum']) / float(metrics['tokens']))
    if args.save_at and step + 1 == args.save_at:
      ckpts = checkpoint.Checkpoints(args.save_dir)
      ckpts.save(step + 1, runner.to_global(state), {'step': step + 1})
      ckpts.close()
  params = parallel.to_host(runner.to_global(state).params)
  flat = {
      jax.tree_util.keystr(path): np.asarray(value)
      for path, value in jax.tree_util.tree_flatten_with_path(params)[0]
  }
  np.savez(
      args.out,
      losses=np.asarray(losses),
      devices=setup.mesh.devices.size,
      **flat
  )


if __name__ == '__main__':
  main()
