"""nmt_jax command line: train, evaluate, translate, score, prepare a corpus.

  python -m nmt_jax.main --config=configs/memory_k64.py --workdir=runs/k64
  python -m nmt_jax.main --config=... --workdir=... --mode=eval
  echo "a b c" | python -m nmt_jax.main --config=... --workdir=... \\
      --mode=translate
  python -m nmt_jax.main --config=... --workdir=A,B --mode=score \\
      --source=src.txt --target=tgt.txt

--workdir=A,B (eval, translate, score) decodes with an ensemble. The same
command resumes an interrupted training run. The logic lives in importable
modules (train.py, inference.py); this file parses flags.
"""

import os
import signal
import sys
from typing import List
import zlib

from absl import app
from absl import flags
from absl import logging
import jax
from ml_collections import config_flags

from nmt_jax import inference
from nmt_jax import train
from nmt_jax.config import cli_flags
from nmt_jax.config import compiler_options
from nmt_jax.system import compile_cache
from nmt_jax.system import cpu_threads
from nmt_jax.system import errors
from nmt_jax.system import parallel
from nmt_jax.training import preemption
from nmt_jax.workdir import library_logs
from nmt_jax.workdir import writers

_CONFIG = config_flags.DEFINE_config_file(
    'config',
    None,
    'Experiment config file, path[:presets] (the lists above).',
    lock_config=True,
)
_WORKDIR = flags.DEFINE_string(
    'workdir',
    None,
    'Directory for checkpoints and metrics. eval, translate and score take'
    ' several, comma-separated, to decode with their ensemble.',
)
_MODE = flags.DEFINE_enum(
    'mode',
    'train',
    ['train', 'eval', 'translate', 'score', 'prepare'],
    'train (then evaluate), eval (best checkpoint), translate, score (the'
    ' log-probability of given translations), or prepare (download a real'
    ' corpus, build its vocabularies and its encoded cache, once).',
)
_INPUT = flags.DEFINE_string(
    'input',
    '-',
    'translate: source sentences, one per line; score: source<TAB>target'
    ' pairs (- = stdin).',
)
_SOURCE = flags.DEFINE_string(
    'source', None, 'score: source sentences, one per line (with --target).'
)
_TARGET = flags.DEFINE_string(
    'target', None, 'score: target sentences, one per line (with --source).'
)
_OUTPUT = flags.DEFINE_string(
    'output',
    '-',
    'translate, score: where to write the lines (- = stdout); eval of an'
    ' ensemble: the folder for its results.',
)
_DISTRIBUTED = flags.DEFINE_enum(
    'distributed',
    'auto',
    ['auto', 'on', 'off'],
    'Join a multi-process run with jax.distributed: auto = when the coordinator'
    ' flags are given or a multi-process SLURM job or TPU pod is detected; on ='
    ' always (JAX detects the cluster).',
)
_COORDINATOR = flags.DEFINE_string(
    'coordinator_address',
    None,
    'Multi-process: host:port of process 0 (with the two below).',
)
_NUM_PROCESSES = flags.DEFINE_integer(
    'num_processes', None, 'Multi-process: number of processes.'
)
_PROCESS_ID = flags.DEFINE_integer(
    'process_id', None, 'Multi-process: this process, 0..N-1.'
)
_LOCAL_DEVICE_IDS = flags.DEFINE_list(
    'local_device_ids',
    None,
    'Multi-process: the local accelerators this process drives (e.g. 0,1,2,3'
    ' for one process per node under SLURM, where JAX defaults to one per'
    ' process).',
)
_DISTRIBUTED_TIMEOUT = flags.DEFINE_integer(
    'distributed_timeout',
    300,
    'Seconds to wait for all processes to join before giving up.',
    lower_bound=1,
)
_THREADS = flags.DEFINE_integer(
    'threads',
    None,
    'CPU threads: the process runs on the first N cores it may use (XLA:CPU'
    ' sizes its thread pool from them); default: all. Two runs on one'
    ' machine: place each with taskset -c instead.',
    lower_bound=1,
)
flags.mark_flags_as_required(['config', 'workdir'])


def multi_process_cluster() -> bool:
  """True in a multi-task SLURM job step (srun) or on a multi-host TPU slice."""
  # SLURM_STEP_NUM_TASKS is set by srun only: a plain `python` in a batch
  # script stays single.
  if int(os.environ.get('SLURM_STEP_NUM_TASKS', '1') or 1) > 1:
    return True
  return (
      len([
          h for h in os.environ.get('TPU_WORKER_HOSTNAMES', '').split(',') if h
      ])
      > 1
  )


def maybe_initialize_distributed():
  explicit = any(
      f.value is not None for f in (_COORDINATOR, _NUM_PROCESSES, _PROCESS_ID)
  )
  if _DISTRIBUTED.value == 'off' or (
      _DISTRIBUTED.value == 'auto'
      and not explicit
      and not multi_process_cluster()
  ):
    return
  local_device_ids = _LOCAL_DEVICE_IDS.value
  if local_device_ids is not None:
    if not all(i.isdigit() for i in local_device_ids):
      _fail(
          f'--local_device_ids={",".join(local_device_ids)} must be device'
          ' numbers, e.g. 0,1,2,3'
      )
    local_device_ids = [int(i) for i in local_device_ids]
  parallel.initialize_distributed(
      _COORDINATOR.value,
      _NUM_PROCESSES.value,
      _PROCESS_ID.value,
      _DISTRIBUTED_TIMEOUT.value,
      local_device_ids,
  )


def run(config, workdir: str, mode: str, stdout=None):
  """Runs `mode`; translate and score write their lines to `stdout`."""
  paths = [p for p in workdir.split(',') if p]
  if not paths:
    _fail(f'--workdir={workdir!r} names no folder; give --workdir=DIR')
  if mode in ('train', 'prepare') and len(paths) != 1:
    _fail(
        f'--mode={mode} takes one --workdir (several, comma-separated, make an'
        ' ensemble for eval, translate and score)'
    )
  if mode == 'train':
    train.train_and_evaluate(config, paths[0])
  elif mode == 'prepare':
    train.prepare(config, paths[0])
  elif mode == 'eval':
    output = _OUTPUT.value if _OUTPUT.value != '-' else None
    inference.evaluate(config, paths, output)
  else:
    lines, output = _read_on_every_process(mode, config)
    if mode == 'score':
      out = inference.score(config, paths, lines)
    else:
      out = inference.translate(config, paths, lines, _regular_file(output))
    if jax.process_index() != 0:  # every process decodes; one writes
      return
    text = ''.join(h + '\n' for h in out)
    if output is not None and (
        os.path.isfile(output) or not os.path.exists(output)
    ):
      writers.write_text(output, text)  # whole or not at all
      return
    try:
      if output is None:
        stdout = stdout or sys.stdout
        stdout.write(text)
        stdout.flush()
      else:  # a FIFO or a device: written into, never replaced
        with open(output, 'w', encoding='utf-8') as f:
          f.write(text)
    except BrokenPipeError:
      raise  # the reader left: main ends quietly
    except OSError as e:
      where = 'stdout' if output is None else f'--output={output}'
      raise errors.WriteError(
          f'cannot write the {mode} output to {where} ({e.strerror or e});'
          ' give --output=FILE on a disk with space'
      ) from None


def _regular_file(output):
  """--output's path when it is (or will be) a plain file, else None.

  Soft alignments go beside a file, not beside stdout, a FIFO or a device.
  """
  if output and (os.path.isfile(output) or not os.path.exists(output)):
    return output
  return None


def _read_on_every_process(mode: str, config):
  """(input lines or pairs, --output's checked path) of translate/score.

  Every process reads the input and decodes its share: all must read the
  same. Only process 0 writes, so only it checks --output and translate's
  soft alignments file (before decoding, not after).
  """
  error = lines = output = digest = None
  try:
    if mode == 'score':
      lines = _read_pairs()
    else:
      lines = _read_input(_INPUT.value, 'input')
    if jax.process_index() == 0:
      output = _check_output(_OUTPUT.value)
      if mode == 'translate':
        inference.checked_alignments_file(config, _regular_file(output))
    crc = zlib.crc32(repr(lines).encode('utf-8'))
    digest = f'{len(lines)} lines, CRC-32 {crc:08x}'
  except errors.UserError as e:
    error = e
  parallel.check_same_everywhere(
      digest,
      'input',
      fix='give every process the same input (--input or stdin)',
      failed='could not read the input or write --output',
  )
  if error is not None:
    raise error
  return lines, output


def _read_pairs():
  """score's (line number, source, target) from --source/--target or a TSV."""
  if (_SOURCE.value is None) != (_TARGET.value is None):
    raise errors.UserError(
        '--mode=score needs both --source=FILE and --target=FILE (or neither,'
        ' and tab-separated pairs on --input)'
    )
  if _SOURCE.value is not None:
    sources = _read_input(_SOURCE.value, 'source')
    targets = _read_input(_TARGET.value, 'target')
    if len(sources) != len(targets):
      raise errors.UserError(
          f'--source has {len(sources)} lines, --target {len(targets)}; give'
          ' one target per source line'
      )
    return [(i + 1, s, t) for i, (s, t) in enumerate(zip(sources, targets))]
  pairs = []
  for i, line in enumerate(_read_input(_INPUT.value, 'input')):
    fields = line.split('\t')
    if len(fields) != 2:
      raise errors.UserError(
          f'--input line {i + 1} has {len(fields)} tab-separated fields;'
          ' score reads source<TAB>target per line (or give --source and'
          ' --target files)'
      )
    pairs.append((i + 1, fields[0], fields[1]))
  return pairs


def _lines(text: str) -> List[str]:
  """text split at '\\n' (and '\\r\\n') only, as `wc -l` counts lines.

  str.splitlines also splits at U+2028, U+0085, form feeds and lone carriage
  returns, which occur inside sentences of crawled text: one input line would
  give several output lines and shift every later one.
  """
  lines = text.split('\n')
  if lines and lines[-1] == '':
    lines.pop()
  return [line[:-1] if line.endswith('\r') else line for line in lines]


def _read_input(path: str, flag: str):
  """Lines of --input/--source/--target (stdin for '-'); UTF-8, no BOM."""
  try:
    if path == '-':
      # The bytes: a text-mode stdin would turn a lone '\r' into a line end.
      data = getattr(sys.stdin, 'buffer', None)
      text = data.read().decode('utf-8') if data else sys.stdin.read()
      return _lines(text.lstrip('\ufeff'))
    with open(path, encoding='utf-8-sig', newline='') as f:
      return _lines(f.read())
  except FileNotFoundError:
    raise errors.UserError(
        f'--{flag}={path} does not exist; give a text file, one sentence per'
        ' line (or - for stdin)'
    ) from None
  except (OSError, UnicodeDecodeError) as e:
    raise errors.UserError(
        f'--{flag}={path} cannot be read ({e}); give a UTF-8 text file'
    ) from None


def _check_output(path: str):
  """--output's file to write (None: stdout), checked before decoding.

  A FIFO or a device (/dev/stdout) is opened and written into.
  """
  return None if path == '-' else writers.check_writable(path, 'output')


_fail = cli_flags.fail


def _check_backend():
  """One line when the backend JAX_PLATFORMS names cannot start.

  JAX's own failure (no plugin for the platform, no device) is an exception
  from deep in its start-up; the user needs the variable and the fix.
  """
  try:
    jax.devices()
  except Exception as e:  # pylint: disable=broad-except
    platforms = os.environ.get('JAX_PLATFORMS', '')
    detail = ' '.join(str(e).split()) or type(e).__name__
    _fail(
        f'JAX cannot start the backend{"s" if "," in platforms else ""}'
        f' JAX_PLATFORMS={platforms!r} names ({detail}); install its plugin'
        " (e.g. pip install -U 'jax[cuda12]' for NVIDIA GPUs) and check the"
        ' device is visible, or unset JAX_PLATFORMS to run on the CPU'
    )


def _take_stdout():
  """A file on the process's stdout, which then carries only the output.

  File descriptor 1 (and with it sys.stdout) now leads to stderr: what
  libraries print there (gloo's '[Gloo] Rank 0 is connected ...' in a
  multi-process run) would be read as translations.
  """
  sys.stdout.flush()
  out = os.fdopen(os.dup(1), 'w', encoding='utf-8')
  os.dup2(2, 1)
  return out


def main(argv):
  library_logs.install()
  if len(argv) > 1:
    _fail(
        f'unexpected arguments: {" ".join(argv[1:])}; every option is a flag,'
        ' --name=value (--help lists them)'
    )
  try:
    config = _CONFIG.value
    config.keys()  # config_flags defers load failures to the first access
  except OSError as e:
    _fail(str(e).strip().splitlines()[-1])
  try:
    cpu_threads.pin_threads(_THREADS.value)  # before JAX starts its backend
  except errors.UserError as e:
    _fail(str(e))
  preemption.interrupt_on_sigint()
  stdout = None
  if _MODE.value in ('translate', 'score'):
    stdout = _take_stdout()
  try:
    maybe_initialize_distributed()
    _check_backend()
    compile_cache.configure()
    # XLA rejects a typo now, not at a first step.
    compiler_options.get_decode(config)
    if jax.process_count() == 1 or _MODE.value != 'train':
      # SIGTERM stops like Ctrl-C (the training loop saves a checkpoint
      # first). Multi-process training leaves it to JAX's preemption service
      # until its loop ends (nmt_jax/training/preemption.py).
      preemption.interrupt_on_sigterm()
    run(config, _WORKDIR.value, _MODE.value, stdout)
  except errors.UserError as e:
    logging.flush()
    _fail(str(e))
  except errors.Preempted as e:
    logging.flush()
    print(str(e), file=sys.stderr)
    sys.exit(143)  # 128 + SIGTERM, as if the signal had ended the process
  except BrokenPipeError:
    # The reader of the output went away (`| head -1`): end as command-line
    # tools do on SIGPIPE, without a traceback or a flush into the closed pipe.
    logging.flush()
    os._exit(128 + signal.SIGPIPE)  # pylint: disable=protected-access
  except KeyboardInterrupt:
    print(_interrupted_message(_MODE.value, _WORKDIR.value), file=sys.stderr)
    if _MODE.value in ('train', 'prepare'):
      sys.exit(130)  # their files were closed on the way out
    # eval, translate and score only read: end now. An orderly exit would
    # wait for the computation in flight (one long line decodes for
    # minutes).
    logging.flush()
    for stream in (stdout, sys.stdout, sys.stderr):
      if stream is not None:
        stream.flush()
    os._exit(130)  # pylint: disable=protected-access


def _interrupted_message(mode: str, workdir: str) -> str:
  if mode == 'train':
    # Checkpoints were closed on the way out; the same command resumes.
    return (
        'interrupted; run the same command again to resume from the last'
        f' checkpoint in {workdir}'
    )
  if mode == 'prepare':
    return (
        'interrupted; run the same command again (what was prepared is'
        ' kept, a half-built vocabulary or cache is not)'
    )
  # eval, translate and score only read checkpoints.
  return f'interrupted; the checkpoints in {workdir} are unchanged'


if __name__ == '__main__':
  __doc__ += cli_flags.config_help()  # what --help prints
  app.run(main, flags_parser=cli_flags.parse_flags)
