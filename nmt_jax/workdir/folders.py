"""A run's workdir folder: created and checked writable, removed when empty.

A workdir has `config.json` (the resolved config; run_config.py), `checkpoints/`
(checkpoint.py), `metrics.jsonl` and TensorBoard events (writers.py),
`vocab/` and `data_cache/` for real corpora (nmt_jax/data/encoding.py) and,
after evaluation, `eval_results.json`, `eval_hypotheses.txt` and
`eval_references.txt`.
"""

import contextlib
import os
from typing import Optional

from nmt_jax.system import workdir_files
from nmt_jax.system.errors import CheckpointError


def prepare(workdir: str) -> Optional[str]:
  """Creates the workdir and checks it is writable.

  Returns the topmost folder it created (for remove_if_empty), or None when
  the workdir existed. This happens before anything is written.
  """
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise CheckpointError(
        f'workdir {workdir} is a file, not a directory; give another'
        ' --workdir (or move the file away)'
    )
  created, missing = None, os.path.abspath(workdir)
  while not os.path.exists(missing):
    created, missing = missing, os.path.dirname(missing)
  checkpoints = os.path.join(workdir, workdir_files.CHECKPOINTS)
  if os.path.exists(checkpoints) and not os.path.isdir(checkpoints):
    raise CheckpointError(
        f'{checkpoints} is a file, not a directory; move it away or use'
        ' another --workdir'
    )
  try:
    os.makedirs(workdir, exist_ok=True)
    probe = os.path.join(workdir, f'.write-test-{os.getpid()}')
    with open(probe, 'w') as f:
      f.write('ok')
    os.remove(probe)
  except OSError as e:
    raise CheckpointError(
        f'workdir {workdir} is not writable ({e.strerror}); '
        'choose another --workdir'
    ) from None
  return created


def remove_if_empty(workdir: str, created: Optional[str] = None):
  """Removes a workdir this run created when a failure left nothing in it.

  An empty checkpoints/ (made by opening them) counts as nothing; so do the
  empty folders above it up to `created` (prepare's result: a mistyped
  --workdir=a/b/c leaves no a/b either).
  """
  directory = os.path.abspath(workdir)
  with contextlib.suppress(OSError):
    os.rmdir(os.path.join(directory, workdir_files.CHECKPOINTS))
  top = os.path.abspath(created) if created else directory
  if os.path.commonpath([top, directory]) != top:
    return  # `created` is not above it: nothing of this run's to remove
  while True:
    try:
      os.rmdir(directory)
    except OSError:
      return
    if directory == top:
      return
    directory = os.path.dirname(directory)
