"""Speed and memory benchmarks: prints a table and writes JSON.

  python -m benchmarks.bench train --config=configs/global_general.py:copy50 \
      --threads=1 --json=t.json
  python -m benchmarks.bench decode --config=configs/memory_k64.py:copy200 \
      --compare=configs/global_concat.py:copy200 --json=d.json
  python -m benchmarks.bench data --config=configs/memory_k64_pe.py:wmt17_de_en \
      --synthetic=100000 --json=data.json
  python -m benchmarks.bench train_memory --config=configs/memory_k64.py:wmt17_de_en \
      --vocab_size=16000 --json=memory.json
  python -m benchmarks.bench startup --config=configs/global_general.py:copy50 \
      --steps=20 --json=startup.json
  python -m benchmarks.bench ops --config=configs/global_general.py:copy50 \
      --threads=1 --steps=4 --json=ops.json
  python -m benchmarks.bench ops --config=configs/global_general.py:copy100 \
      --trace=greedy --threads=1 --steps=3 --json=ops_greedy.json

What each measures: benchmarks/train_speed.py (train, train_memory),
benchmarks/decode_speed.py (decode; --sentences_per_batch),
benchmarks/data_speed.py (data), benchmarks/startup.py (startup:
seconds to the first training step and translation with an empty and with a
filled compilation cache), benchmarks/op_times.py (ops: where a
training step's or a decoding call's time goes, per loop and per op, from a
profiler trace).
--compare runs a second config in the same
process, alternating repetitions, and adds `speedup` = other's time / this
config's time for each figure. --peer='runs/*/bench.json' reads the OpenNMT-py
benchmark scripts' JSON (benchmarks/peer.py) into `peer` and adds
`vs_peer` = this rate / the peer's (wall and per CPU second).

Every result names the platform, the device kind and count, the compute
dtype and the thread count, so CPU, GPU and TPU runs share one format.
"""

import datetime
import glob
import json
import os
import sys
from typing import Any, Dict

from absl import app
from absl import flags
import jax
from ml_collections import config_flags

from benchmarks import data_speed
from benchmarks import decode_speed
from benchmarks import hlo
from benchmarks import op_times
from benchmarks import peer
from benchmarks import startup
from benchmarks import train_speed
from nmt_jax import attention
from nmt_jax.config import cli_flags
from nmt_jax.system import allocator
from nmt_jax.system import cpu_threads
from nmt_jax.system import errors
from nmt_jax.workdir import library_logs
from nmt_jax.workdir import writers

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Config to benchmark.', lock_config=True
)
_COMPARE = config_flags.DEFINE_config_file(
    'compare', None, 'Config to compare against.', lock_config=True
)
_JSON = flags.DEFINE_string(
    'json', None, 'Write the results to this JSON file.'
)
_THREADS = flags.DEFINE_integer(
    'threads',
    None,
    'CPU threads (pins the process to that many cores); default: all.',
    lower_bound=1,
)
_REPEATS = flags.DEFINE_integer(
    'repeats',
    3,
    'Timed repetitions (the one of median rate is reported).',
    lower_bound=1,
)
_STEPS = flags.DEFINE_integer(
    'steps',
    10,
    'train: timed steps per repetition; startup: steps of each training run;'
    ' ops: traced steps.',
    lower_bound=1,
)
_WORKDIR = flags.DEFINE_string(
    'workdir',
    None,
    "decode: use this workdir's best checkpoint (with --compare on both"
    ' sides: the other config may change decoding options, not the model).',
)
_MODES = flags.DEFINE_list(
    'modes', 'greedy,beam,forced', 'decode: modes to time.'
)
flags.register_validator(
    'modes',
    lambda modes: bool(modes) and set(modes) <= {'greedy', 'beam', 'forced'},
    "--modes takes greedy, beam and forced, comma-separated (the beam's size"
    ' is --config.decode.beam_size)',
)
_NUM_SENTENCES = flags.DEFINE_integer(
    'num_sentences', None, 'decode: sentences (default: all).', lower_bound=1
)
_VOCAB_SIZE = flags.DEFINE_integer(
    'vocab_size', 16_000, 'train_memory: words per side (the WMT BPE size).'
)
_SYNTHETIC = flags.DEFINE_integer(
    'synthetic',
    0,
    'data: write and use a synthetic corpus of this many '
    "pairs (0: the config's corpus).",
)
_DATA_WORKDIR = flags.DEFINE_string(
    'data_workdir',
    None,
    "workdir holding a real corpus's vocabularies: data copies them"
    ' (default: a temporary one); train, decode and ops read them and the'
    ' encoded cache there (built if missing), as a text or TFDS corpus'
    ' needs.',
)
_SENTENCES_PER_BATCH = flags.DEFINE_integer(
    'sentences_per_batch',
    None,
    'decode, ops --trace=greedy|beam: sentences per decoding batch in every'
    " mode (decode.batch_size = sentences x beam size), as OpenNMT-py's"
    ' -batch_size N -batch_type sents; default: decode.batch_size'
    ' hypotheses.',
    lower_bound=1,
)
_PEER = flags.DEFINE_list(
    'peer',
    None,
    'train, decode: OpenNMT-py benchmark JSON files (paths or globs) to '
    'compare with.',
)
_SENTENCE = flags.DEFINE_string(
    'sentence',
    None,
    'startup: the sentence to translate (default: the first validation'
    ' source of generated data).',
)
_STARTUP_DIR = flags.DEFINE_string(
    'startup_dir',
    None,
    'startup: keep the workdirs, caches and logs here (default: a temporary'
    ' directory, removed).',
)
_TOP = flags.DEFINE_integer(
    'top', 20, 'ops: the costliest ops listed.', lower_bound=1
)
_TRACE = flags.DEFINE_enum(
    'trace',
    'train',
    ['train', 'greedy', 'beam'],
    "ops: trace training steps or decoding calls (the evaluation split's"
    ' longest batch; --steps calls).',
)
_TRAIN_STEPS = flags.DEFINE_integer(
    'train_steps', 10, 'data: timed training steps (0: skip).'
)


def describe(config) -> Dict[str, Any]:
  """The config's headline fields: the kind with the fields it reads, sizes."""
  m = config.model
  kind = attention.get(m.attention.kind)
  return {
      'attention': m.attention.kind,
      **{field: m.attention[field] for field in kind.FIELDS},
      'hidden_size': m.hidden_size,
      'embed_size': m.embed_size,
      'layers': [m.num_encoder_layers, m.num_decoder_layers],
      # Britz et al.'s copy model sets the first two (bidirectional=all,
      # bridge=copy): the JSON says which model ran.
      'bidirectional': m.bidirectional,
      'bridge': m.bridge,
      'input_feeding': m.input_feeding,
      'dtype': m.dtype,
      'max_length': config.data.max_length,
      'batch_size': config.train.batch_size,
      'beam_size': config.decode.beam_size,
      'decode_batch_size': config.decode.batch_size,
      'compiler_options': config.compiler_options,
      'decode_compiler_options': config.decode.get('compiler_options', ''),
  }


def print_table(result: Dict[str, Any]):
  for section, values in result.items():
    if not isinstance(values, dict):
      print(f'{section:<30} {values}')
      continue
    print(f'[{section}]')
    for key, value in values.items():
      if isinstance(value, dict):
        shown = ', '.join(
            f'{k} {v:,.2f}' for k, v in value.items() if isinstance(v, float)
        )
        print(f'  {key:<10} {shown}')
      elif key in ('loops', 'ops') and isinstance(value, list):
        print('\n'.join('  ' + line for line in op_times.table(key, value)))
      elif key == 'loop_ops':
        print(f'  {key:<28} {hlo.largest(value, 4)} (ops/dots per iteration)')
      elif isinstance(value, float):
        print(f'  {key:<28} {value:,.3f}')
      else:
        print(f'  {key:<28} {value}')


def run(command: str) -> Dict[str, Any]:
  peer_paths = find_peer_files(_PEER.value) if _PEER.value else None
  config = _CONFIG.value
  compare = _COMPARE.value if _COMPARE.present else None
  result = {
      'benchmark': command,
      'threads': _THREADS.value or len(os.sched_getaffinity(0)),
      'platform': jax.default_backend(),
      'device': str(jax.devices()[0].device_kind),
      'device_count': jax.device_count(),
      'jax': jax.__version__,
      'cpu': train_speed.cpu_name(),
      'malloc': allocator.describe(),
      'date': datetime.date.today().isoformat(),
      'config': describe(config),
  }
  if command == 'train':
    if compare is None:
      result['this'] = train_speed.bench_train(
          config, _STEPS.value, _REPEATS.value, _DATA_WORKDIR.value
      )
    else:
      result.update(
          train_speed.bench_train(
              config,
              _STEPS.value,
              _REPEATS.value,
              _DATA_WORKDIR.value,
              compare=compare,
          )
      )
      result['compare_config'] = describe(compare)
  elif command == 'train_memory':
    result['this'] = train_speed.bench_memory(config, _VOCAB_SIZE.value)
    if compare is not None:
      result['other'] = train_speed.bench_memory(compare, _VOCAB_SIZE.value)
      result['compare_config'] = describe(compare)
  elif command == 'startup':
    result['this'] = startup.bench_startup(
        config_args(sys.argv[1:]),
        _SENTENCE.value or startup.first_source(config),
        _STEPS.value,
        _REPEATS.value,
        _STARTUP_DIR.value,
    )
  elif command == 'ops':
    if _TRACE.value == 'train':
      result['this'] = op_times.bench_ops(
          config, _STEPS.value, _TOP.value, _DATA_WORKDIR.value
      )
    else:
      result['this'] = op_times.bench_decode_ops(
          config,
          _TRACE.value,
          _STEPS.value,
          _TOP.value,
          _SENTENCES_PER_BATCH.value,
          _DATA_WORKDIR.value,
      )
  elif command == 'data':
    result['this'] = data_speed.bench_data(
        config,
        _SYNTHETIC.value,
        _DATA_WORKDIR.value,
        _STEPS.value,
        _TRAIN_STEPS.value,
    )
  else:
    result.update(
        decode_speed.bench_decode(
            config,
            compare,
            _WORKDIR.value,
            _MODES.value,
            _REPEATS.value,
            _NUM_SENTENCES.value,
            _SENTENCES_PER_BATCH.value,
            _DATA_WORKDIR.value,
        )
    )
    if compare is not None:
      result['compare_config'] = describe(compare)
  if peer_paths and command in ('train', 'decode'):
    add_peer(result, command, peer_paths)
  return result


def config_args(argv):
  """The --config flags of a command line (for the processes it starts)."""
  found = []
  for i, arg in enumerate(argv):
    if arg == '--config' and i + 1 < len(argv):
      found += [arg, argv[i + 1]]
    elif arg.startswith(('--config=', '--config.')):
      found.append(arg)
  return found


def find_peer_files(patterns):
  """The files --peer names (paths or globs); one-line error if none."""
  paths = sorted({p for pattern in patterns for p in glob.glob(pattern)})
  if not paths:
    raise errors.ConfigError(
        f'--peer={",".join(patterns)} matches no file; give the bench.json '
        'files the OpenNMT-py benchmark scripts wrote'
    )
  return paths


def add_peer(result: Dict[str, Any], command: str, paths):
  """Adds the peer's figures and this run's ratios to them."""
  if command == 'train':
    result['peer'] = peer.train_figures(paths)
    result['vs_peer'] = peer.ratios(result['this'], result['peer'])
    return
  result['peer'] = peer.decode_figures(paths)
  result['vs_peer'] = {}
  for label, figures in result['peer'].items():
    this = result['this'].get(label)
    if this is None:
      continue
    result['vs_peer'][label] = peer.ratios(this, figures)
    # The ratio nmt_jax would reach running its step's products alone.
    result['vs_peer'][label]['at_product_floor'] = (
        this['product_floor_output_tokens_per_sec']
        / figures['output_tokens_per_sec']
    )


def main(argv):
  library_logs.install()
  cli_flags.check_command(
      argv,
      ('train', 'decode', 'data', 'train_memory', 'startup', 'ops'),
      'python -m benchmarks.bench',
  )
  # Flags a command does not read would be dropped without a word.
  if _COMPARE.present and argv[1] not in ('train', 'decode', 'train_memory'):
    cli_flags.fail(f'bench {argv[1]} takes no --compare')
  if _PEER.value and argv[1] not in ('train', 'decode'):
    cli_flags.fail(f'bench {argv[1]} takes no --peer')
  try:
    if _JSON.value:  # before the run, not after it
      writers.check_writable(_JSON.value, 'json')
    cpu_threads.pin_threads(_THREADS.value)  # before JAX starts its backend
    result = run(argv[1])
  except errors.UserError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
  print_table(result)
  if _JSON.value:
    writers.write_text(_JSON.value, json.dumps(result, indent=2) + '\n')


if __name__ == '__main__':
  flags.mark_flags_as_required(['config'])
  app.run(main, flags_parser=cli_flags.parse_flags)
