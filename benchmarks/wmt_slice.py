"""The WMT presets end to end on a slice, offline: time and memory per stage.

  python -m benchmarks.wmt_slice --preset=wmt17_de_en --pairs=200000 \\
      --steps=20 --output=/tmp/wmt_slice --json=wmt17_slice.json

TFDS cannot download here, so the preset's `tfds:` corpus is served by
`tfds.testing.mock_data` with a synthetic WMT-shaped corpus of --pairs
training pairs (Zipfian pseudo-words of two "languages", news-like lengths
up to data.max_length; benchmarks/data_speed.py writes it) and its
validation and test slices. Everything after the corpus reader is the
preset's own path: its vocabularies (16k shared BPE for wmt17_de_en, 50k
words per side for shu_de_en), encoding and the encoded cache
(`--mode=prepare`), --steps training steps of the preset's model, and the
evaluation of the checkpoint on the test slice with the preset's beam.

Each stage runs in a process of its own, so its wall time, CPU time and
peak resident memory are its own (os.wait4): `vocab` (the vocabularies
from the training text), `encode` (encoding and the cache), `train` (with
compilation) and `eval` (decoding and scoring, with compilation).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List

from tabulate import tabulate

from benchmarks import data_speed
from nmt_jax.config import defaults
from nmt_jax.workdir import library_logs
from nmt_jax.workdir import writers

STAGES = ('vocab', 'encode', 'train', 'eval')
SPLIT_FILES = {'train': 'train', 'validation': 'dev', 'test': 'test'}


def corpus_prefix(output: str) -> str:
  return os.path.join(output, 'corpus', 'wmt')


def write_corpus(config, output: str, pairs: int, eval_pairs: int):
  """<prefix>.{train,dev,test}.{de,en}: the synthetic slice."""
  prefix = corpus_prefix(output)
  os.makedirs(os.path.dirname(prefix), exist_ok=True)
  data_speed.write_synthetic_corpus(
      prefix,
      pairs,
      config.data.max_length,
      config.seed,
      config.data.source_lang,
      config.data.target_lang,
  )
  # The generator's dev split: the first pairs validate, the next test.
  for lang in (config.data.source_lang, config.data.target_lang):
    with open(f'{prefix}.dev.{lang}', encoding='utf-8') as f:
      lines = f.read().splitlines()
    if len(lines) < 2 * eval_pairs:
      raise ValueError(
          f'--eval_pairs={eval_pairs} needs {2 * eval_pairs} dev lines;'
          f' the corpus has {len(lines)}: lower --eval_pairs'
      )
    for name, part in (
        ('dev', lines[:eval_pairs]),
        ('test', lines[eval_pairs : 2 * eval_pairs]),
    ):
      with open(f'{prefix}.{name}.{lang}', 'w', encoding='utf-8') as f:
        f.write('\n'.join(part) + '\n')


def _slice_source(prefix: str, langs):
  """tfds' as_data_source, reading the slice: split -> [{lang: text}]."""

  def as_data_source(builder, split=None, **unused):
    del builder, unused
    columns = {}
    for lang in langs:
      path = f'{prefix}.{SPLIT_FILES[str(split)]}.{lang}'
      with open(path, encoding='utf-8') as f:
        columns[lang] = f.read().splitlines()
    return [dict(zip(columns, row)) for row in zip(*columns.values())]

  return as_data_source


def stage_config(preset: str, steps: int):
  """The preset's config, trained `steps` steps (one checkpoint at the end)."""
  config = defaults.get_config(preset)
  config.train.num_steps = steps
  config.train.log_every = max(1, steps // 4)
  config.train.eval_every = config.train.checkpoint_every = steps
  config.train.eval_num_sentences = 16
  return config


def run_stage(stage: str, preset: str, output: str, steps: int):
  """One stage in this process (the corpus is the mocked TFDS one)."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  from nmt_jax import inference  # pylint: disable=g-import-not-at-top
  from nmt_jax import train  # pylint: disable=g-import-not-at-top
  from nmt_jax.data import encoding  # pylint: disable=g-import-not-at-top

  config = stage_config(preset, steps)
  workdir = os.path.join(output, 'workdir')
  prefix = corpus_prefix(output)
  langs = (config.data.source_lang, config.data.target_lang)
  with tfds.testing.mock_data(as_data_source_fn=_slice_source(prefix, langs)):
    if stage == 'vocab':
      lines = {}
      for lang in langs:
        with open(f'{prefix}.train.{lang}', encoding='utf-8') as f:
          lines[lang] = f.read().splitlines()
      encoding.build_vocabs(
          config.data, os.path.join(workdir, 'vocab'), *lines.values()
      )
    elif stage == 'encode':
      train.prepare(config, workdir)
    elif stage == 'train':
      train.train_and_evaluate(config, workdir, evaluate=False)
    else:
      result = inference.evaluate(config, [workdir])
      print('RESULT ' + json.dumps(result, default=str))


def measure(stage: str, argv: List[str], log: str) -> Dict[str, Any]:
  """Runs `stage` in a child process: wall, CPU seconds, peak RSS."""
  command = [sys.executable, '-m', 'benchmarks.wmt_slice', *argv]
  command.append(f'--stage={stage}')
  start = time.perf_counter()
  with open(log, 'w') as out:
    child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(child.pid, 0)
  wall = time.perf_counter() - start
  child.returncode = os.waitstatus_to_exitcode(status)
  if child.returncode:
    with open(log) as f:
      tail = f.read().strip().splitlines()[-3:]
    raise SystemExit(f'error: stage {stage} failed ({log}): {" | ".join(tail)}')
  return {
      'wall_s': wall,
      'cpu_s': usage.ru_utime + usage.ru_stime,
      'peak_rss_mb': usage.ru_maxrss / 1024.0,
  }


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
      '--preset', default='wmt17_de_en', choices=['wmt17_de_en', 'shu_de_en']
  )
  parser.add_argument(
      '--pairs', type=int, default=200_000, help='training pairs of the slice'
  )
  parser.add_argument(
      '--eval_pairs',
      type=int,
      default=200,
      help='pairs of the validation and test slices',
  )
  parser.add_argument(
      '--steps', type=int, default=20, help='training steps of the model'
  )
  parser.add_argument(
      '--output',
      required=True,
      help='folder for the corpus, the workdir and the stage logs',
  )
  parser.add_argument('--json', help='write the results here')
  # Internal: run one stage in this process.
  parser.add_argument('--stage', choices=STAGES, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.pairs < 100 or args.eval_pairs < 1 or args.steps < 1:
    parser.error('--pairs >= 100, --eval_pairs >= 1 and --steps >= 1')
  if not args.stage and os.path.exists(os.path.join(args.output, 'workdir')):
    parser.error(
        f'--output={args.output} holds a workdir of an earlier run; give an'
        ' empty folder'
    )
  return args


def main(argv=None):
  args = parse_args(argv)
  library_logs.install()
  preset, output, steps = args.preset, args.output, args.steps
  if args.stage:
    run_stage(args.stage, preset, output, steps)
    return 0
  if args.json:
    writers.check_writable(args.json, 'json')
  config = stage_config(preset, steps)
  start = time.perf_counter()
  try:
    write_corpus(config, output, args.pairs, args.eval_pairs)
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  corpus_s = time.perf_counter() - start
  child_argv = [
      f'--preset={preset}',
      f'--output={output}',
      f'--steps={steps}',
  ]
  stages = {}
  for stage in STAGES:
    log = os.path.join(output, f'{stage}.log')
    stages[stage] = measure(stage, child_argv, log)
    print(f'{stage}: {stages[stage]}', file=sys.stderr, flush=True)
  with open(os.path.join(output, 'eval.log')) as f:
    line = next(row for row in f if row.startswith('RESULT '))
  evaluation = json.loads(line[len('RESULT ') :])
  vocab_dir = os.path.join(output, 'workdir', 'vocab')
  result = {
      'preset': preset,
      'corpus': f'synthetic WMT-shaped, {args.pairs:,} training pairs',
      'eval_pairs': args.eval_pairs,
      'vocabulary': config.data.vocab.to_dict(),
      'vocab_files': sorted(
          f for f in os.listdir(vocab_dir) if not f.endswith('.json')
      ),
      'model': {
          'hidden_size': config.model.hidden_size,
          'layers': [
              config.model.num_encoder_layers,
              config.model.num_decoder_layers,
          ],
          'batch_size': config.train.batch_size,
          'beam_size': config.decode.beam_size,
      },
      'steps': steps,
      'corpus_write_s': corpus_s,
      'stages': stages,
      'train_s_per_step': stages['train']['wall_s'] / steps,
      'eval_ms_per_sentence': evaluation['decode_ms_per_sentence'],
      'eval_bleu': evaluation['bleu'],
      'cpus': len(os.sched_getaffinity(0)),
      'load_average_at_end': os.getloadavg(),
  }
  rows = [
      [
          stage,
          f'{v["wall_s"]:.1f}',
          f'{v["cpu_s"]:.1f}',
          f'{v["peak_rss_mb"]:,.0f}',
      ]
      for stage, v in stages.items()
  ]
  print(
      tabulate(
          rows,
          headers=['stage', 'wall s', 'CPU s', 'peak RSS MB'],
          tablefmt='github',
      )
  )
  if args.json:
    writers.write_json(args.json, result)
  return 0


if __name__ == '__main__':
  sys.exit(main())
