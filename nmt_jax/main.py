"""nmt_jax command line.

  python -m nmt_jax.main --config=configs/memory_k64.py --workdir=runs/memory_k64
  python -m nmt_jax.main --config=... --workdir=... --mode=eval
  echo "a b c" | python -m nmt_jax.main --config=... --workdir=... --mode=translate

Config values are overridden with --config.<field>=<value>, presets chosen
with a config string argument (configs/global_general.py:copy100).
The logic lives in importable modules (train.py); this file parses flags.
"""

import logging as std_logging
import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from nmt_jax import errors

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Experiment config file.',
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory for checkpoints and metrics.')
_MODE = flags.DEFINE_enum('mode', 'train', ['train', 'eval', 'translate'],
                          'train (then evaluate), eval (best checkpoint), translate.')
_INPUT = flags.DEFINE_string('input', '-', 'translate: source sentences, one per line (- = stdin).')
_OUTPUT = flags.DEFINE_string('output', '-', 'translate: where to write translations (- = stdout).')
flags.mark_flags_as_required(['config', 'workdir'])


def run(config, workdir: str, mode: str):
  from nmt_jax import train  # pylint: disable=g-import-not-at-top  (keeps --help fast)
  if mode == 'train':
    train.train_and_evaluate(config, workdir)
  elif mode == 'eval':
    train.evaluate(config, workdir)
  else:
    source = sys.stdin if _INPUT.value == '-' else open(_INPUT.value, encoding='utf-8')
    with source:
      lines = [line.strip() for line in source]
    lines = [line for line in lines if line]
    hypotheses = train.translate(config, workdir, lines)
    out = sys.stdout if _OUTPUT.value == '-' else open(_OUTPUT.value, 'w', encoding='utf-8')
    out.write(''.join(h + '\n' for h in hypotheses))
    out.flush()


class _QuietLibraries:
  """Drops INFO records from Orbax's files (dozens per save), keeping their warnings."""

  def filter(self, record):
    return record.levelno >= std_logging.WARNING or '/orbax/' not in record.pathname


def main(argv):
  std_logging.getLogger('absl').addFilter(_QuietLibraries())
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  try:
    run(_CONFIG.value, _WORKDIR.value, _MODE.value)
  except errors.UserError as e:
    logging.flush()
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)


if __name__ == '__main__':
  app.run(main)
