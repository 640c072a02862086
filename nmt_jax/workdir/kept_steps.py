"""The steps train.keep_every kept: never deleted by a later resume.

<workdir>/kept_steps.json lists them as they are saved. A resume whose
train.keep_every differs (0 when the flag is not repeated) still preserves
every listed step; removing a step's folder under checkpoints/ by hand is
the way to drop one. Workdirs from before the file existed: the steps on
disk that are multiples of the keep_every in their config.json.
"""

import json
import os
from typing import Set

from absl import logging
import jax

from nmt_jax.system import workdir_files
from nmt_jax.workdir import run_config
from nmt_jax.workdir import writers


def _path(workdir: str) -> str:
  return os.path.join(workdir, workdir_files.KEPT_STEPS)


def _on_disk(directory: str) -> Set[int]:
  if not os.path.isdir(directory):
    return set()
  return {int(name) for name in os.listdir(directory) if name.isdigit()}


def read(workdir: str, directory: str, keep_every: int) -> Set[int]:
  """The kept steps a run resuming in `workdir` must preserve."""
  listed = set()
  if os.path.isfile(_path(workdir)):
    with open(_path(workdir), encoding='utf-8') as f:
      listed = set(json.load(f)['steps'])
  kept = set(listed)
  try:
    earlier = run_config.load_config(workdir).train.keep_every
  except OSError:  # a new workdir
    earlier = 0
  if earlier:
    kept |= {s for s in _on_disk(directory) if s % earlier == 0}
  kept &= _on_disk(directory)  # those removed by hand stay removed
  if kept != listed:  # listed now: the next resume's config.json may say 0
    write(workdir, kept)
  if kept and earlier != keep_every:
    logging.warning(
        'kept steps %s (train.keep_every=%d when saved) stay whatever'
        ' train.keep_every=%d says; remove a step folder under %s by hand to'
        ' drop it',
        ', '.join(map(str, sorted(kept))),
        earlier,
        keep_every,
        directory,
    )
  return kept


def write(workdir: str, kept: Set[int]):
  if jax.process_index() == 0:
    writers.write_json(_path(workdir), {'steps': sorted(kept)})
