"""Helpers of benchmarks/real_vocab.sh: nmt_jax against OpenNMT-py at real
vocabulary sizes (a WMT-shaped synthetic corpus and the gettext corpus, one
shared SentencePiece BPE per corpus, the same piece files for both toolkits).

  python -m benchmarks.real_vocab synthetic --output=DIR --vocab_size=16000 [--pairs=100000]
  python -m benchmarks.real_vocab pieces --corpus=PREFIX --source_lang=en \
      --target_lang=de --output=DIR --vocab_size=16000
  python -m benchmarks.real_vocab onmt_config --data=DIR --run=RUNDIR > train.yaml
  python -m benchmarks.real_vocab summary OUT

`synthetic` writes a WMT-shaped corpus (`data_speed.write_synthetic_corpus`:
Zipfian pseudo-words, news-like lengths) and turns it into pieces as
`pieces` does for any corpus: a SentencePiece BPE of `vocab_size` pieces
trained on both training sides (or, where the corpus has too few distinct
pieces, the largest size SentencePiece accepts), every split encoded to
space-separated pieces in DIR/pieces.{train,dev}.{src,tgt} (test too if the
corpus has one), training pairs longer than `max_length` pieces on either
side dropped, and DIR/manifest.json with the counts.

real_vocab.sh times nmt_jax with `python -m benchmarks.bench ...
--data_workdir=WD`: the piece corpus's vocabularies and encoded cache are
read from that workdir (`python -m nmt_jax.main --mode=prepare` fills it).
`summary` prints the ratios of the JSON files real_vocab.sh wrote.
"""

import argparse
import glob
import json
import os
import re
import statistics
import sys
import tempfile
from typing import Dict, List, Optional

from benchmarks import data_speed
from benchmarks import peer

SPLITS = ('train', 'dev', 'test')


# ----------------------------------------------------------------- pieces


def train_bpe(text_path: str, model_prefix: str, vocab_size: int) -> int:
  """A SentencePiece BPE of vocab_size pieces (or the most the text allows).

  Returns the size trained.
  """
  import sentencepiece as spm  # pylint: disable=import-outside-toplevel

  size = vocab_size
  while True:
    try:
      spm.SentencePieceTrainer.train(
          input=text_path,
          model_prefix=model_prefix,
          model_type='bpe',
          vocab_size=size,
          character_coverage=1.0,
          bos_id=-1,
          eos_id=-1,
          pad_id=-1,
          unk_id=0,
          num_threads=os.cpu_count() or 1,
          minloglevel=2,
      )
      return size
    except RuntimeError as e:
      # "Vocabulary size too high (16000). Please set it to a value <= 9021."
      match = re.search(r'value <= (\d+)', str(e))
      if not match or int(match.group(1)) >= size:
        raise
      size = int(match.group(1))
      print(
          f'SentencePiece: at most {size} pieces on this corpus',
          file=sys.stderr,
      )


def read(path: str) -> List[str]:
  with open(path, encoding='utf-8') as f:
    return f.read().splitlines()


def write(path: str, lines: List[str]):
  with open(path + '.part', 'w', encoding='utf-8') as f:
    f.write(''.join(line + '\n' for line in lines))
  os.replace(path + '.part', path)


def encode_corpus(
    prefix: str,
    source_lang: str,
    target_lang: str,
    output: str,
    vocab_size: int,
    max_length: int,
    extra: Optional[Dict] = None,
) -> Dict:
  """<prefix>.<split>.<lang> -> output/pieces.<split>.{src,tgt}, manifest."""
  import sentencepiece as spm  # pylint: disable=import-outside-toplevel

  os.makedirs(output, exist_ok=True)
  splits = {
      split: (
          read(f'{prefix}.{split}.{source_lang}'),
          read(f'{prefix}.{split}.{target_lang}'),
      )
      for split in SPLITS
      if os.path.exists(f'{prefix}.{split}.{source_lang}')
  }
  with tempfile.TemporaryDirectory() as scratch:
    both = os.path.join(scratch, 'both.txt')
    write(both, splits['train'][0] + splits['train'][1])
    size = train_bpe(both, os.path.join(output, 'bpe'), vocab_size)
  sp = spm.SentencePieceProcessor(model_file=os.path.join(output, 'bpe.model'))
  manifest = {
      'source': prefix,
      'source_lang': source_lang,
      'target_lang': target_lang,
      'vocab_size_asked': vocab_size,
      'vocab_size': size,
      'max_length': max_length,
      **(extra or {}),
  }
  for split, (source, target) in splits.items():
    pairs = list(
        zip(
            sp.encode(source, out_type=str),
            sp.encode(target, out_type=str),
        )
    )
    kept = [
        (s, t)
        for s, t in pairs
        if split != 'train'
        or (0 < len(s) <= max_length and 0 < len(t) <= max_length)
    ]
    write(
        os.path.join(output, f'pieces.{split}.src'),
        [' '.join(s) for s, _ in kept],
    )
    write(
        os.path.join(output, f'pieces.{split}.tgt'),
        [' '.join(t) for _, t in kept],
    )
    manifest[split] = {
        'pairs': len(kept),
        'dropped_over_max_length': len(pairs) - len(kept),
        'mean_source_pieces': statistics.mean(len(s) for s, _ in kept),
        'mean_target_pieces': statistics.mean(len(t) for _, t in kept),
        'longest_source_pieces': max(len(s) for s, _ in kept),
        'distinct_source_pieces': len({p for s, _ in kept for p in s}),
        'distinct_target_pieces': len({p for _, t in kept for p in t}),
    }
  write(os.path.join(output, 'manifest.json'), [json.dumps(manifest, indent=2)])
  return manifest


def onmt_config(data: str, run: str, seed: int = 1234) -> str:
  """OpenNMT-py 3.5.1's train.yaml of the matched model on DIR/pieces.*."""
  pieces = f'{data}/pieces'
  model = peer.matched_model_yaml(
      run,
      (f'{pieces}.train.src', f'{pieces}.train.tgt'),
      (f'{pieces}.dev.src', f'{pieces}.dev.tgt'),
  )
  return f"""\
# OpenNMT-py 3.5.1 on {pieces}.* (benchmarks/real_vocab.sh): the model of
# nmt_jax's configs/global_general.py with bidirectional=all, bridge=copy.
save_data: {run}/prep
{model}valid_steps: 1000000
save_model: {run}/model
seed: {seed}
num_workers: 0
world_size: 1
gpu_ranks: []
"""


# ----------------------------------------------------------------- summary


def _load(path: str):
  with open(path) as f:
    return json.load(f)


def _runs(out: str, pattern: str) -> Dict[str, str]:
  """{'r1': path, ...} of OUT's files matching pattern (with {r})."""
  found = {}
  for path in glob.glob(os.path.join(out, pattern.format(r='r*'))):
    match = re.search(r'_(r\d+)\.json$', path)
    if match:
      found[match.group(1)] = path
  return found


def _spread(values: List[float]) -> str:
  if not values:
    return '-'
  if len(values) == 1:
    return f'{values[0]:.2f}'
  return (
      f'{statistics.median(values):.2f} [{min(values):.2f} - {max(values):.2f}]'
  )


def _peer_train(path: str) -> Optional[Dict[str, float]]:
  summary = _load(path).get('summary') or {}
  if not summary.get('tgt_tok_per_s'):
    return None
  return {
      'wall': summary['tgt_tok_per_s'],
      'cpu': summary['tgt_tok_per_s'] / summary['cpu_util_window'],
  }


def _peer_decode(path: str) -> Optional[Dict[str, float]]:
  timing = _load(path).get('timing') or {}
  if not timing.get('translate_s'):
    return None
  return {
      'wall': timing['n_sent'] / timing['translate_s'],
      'cpu': timing['n_sent'] / timing['translate_cpu_s'],
      'tokens': timing['hyp_tokens'] / timing['n_sent'],
  }


def summary(out: str) -> List[str]:
  """Lines: per corpus and setting, nmt_jax / OpenNMT-py per pair of runs."""
  lines = []
  corpora = sorted({
      m.group(1)
      for p in glob.glob(os.path.join(out, 'train_*_t*_r*.json')) + glob.glob(
          os.path.join(out, 'decode_*_t*_r*.json')
      )
      for m in [re.search(r'(?:train|decode)_(.+)_t\d+_r\d+\.json$', p)]
      if m
  })
  threads = sorted({
      int(m.group(1))
      for p in glob.glob(os.path.join(out, '*_t*_r*.json'))
      for m in [re.search(r'_t(\d+)_r\d+\.json$', p)]
      if m
  })
  for path in sorted(
      glob.glob(os.path.join(out, 'data', '*', 'manifest.json'))
  ):
    manifest = _load(path)
    train = manifest['train']
    lines.append(
        f'{os.path.basename(os.path.dirname(path)):<14} BPE'
        f" {manifest['vocab_size']:,} (asked {manifest['vocab_size_asked']:,});"
        f" pieces seen in training: {train['distinct_source_pieces']:,} source,"
        f" {train['distinct_target_pieces']:,} target; {train['pairs']:,}"
        f" training pairs ({train['dropped_over_max_length']:,} over"
        f" {manifest['max_length']} pieces dropped), mean"
        f" {train['mean_source_pieces']:.1f} /"
        f" {train['mean_target_pieces']:.1f} pieces"
    )
  if lines:
    lines.append('')
  lines.append('nmt_jax / OpenNMT-py, median [min - max] over pairs of runs')
  lines.append(
      f'{"corpus":<14} {"what":<14} {"thr":>3} {"per CPU s":<22} {"wall":<22}'
      ' nmt_jax | peer (per CPU s)'
  )
  for corpus in corpora:
    for t in threads:
      ours = _runs(out, f'train_{corpus}_t{t}_{{r}}.json')
      theirs = _runs(out, f'peer_train_{corpus}_t{t}_{{r}}.json')
      cpu, wall, pair = [], [], ''
      for r in sorted(set(ours) & set(theirs)):
        this = _load(ours[r])['this']
        them = _peer_train(theirs[r])
        if them:
          cpu.append(this['tokens_per_cpu_sec'] / them['cpu'])
          wall.append(this['tokens_per_sec'] / them['wall'])
          pair = f"{this['tokens_per_cpu_sec']:,.0f} | {them['cpu']:,.0f} tok/s"
      if cpu:
        lines.append(
            f'{corpus:<14} {"train":<14} {t:>3} {_spread(cpu):<22} '
            f'{_spread(wall):<22} {pair}'
        )
      ours = _runs(out, f'decode_{corpus}_t{t}_{{r}}.json')
      for label, beam in (('greedy', 1), ('beam10', 10)):
        theirs = _runs(out, f'peer_decode_{corpus}_b{beam}_t{t}_{{r}}.json')
        cpu, wall, pair = [], [], ''
        for r in sorted(set(ours) & set(theirs)):
          this = _load(ours[r])['this'].get(label)
          them = _peer_decode(theirs[r])
          if this and them:
            # Per output token: the peer's runs are longer (EOS blocked to
            # the longest source of its batch + 5).
            this = peer.with_output_tokens(this)
            tokens = them['tokens']
            cpu.append(this['output_tokens_per_cpu_sec'] / them['cpu'] / tokens)
            wall.append(this['output_tokens_per_sec'] / them['wall'] / tokens)
            pair = (
                f"{this['output_tokens_per_cpu_sec']:,.0f} |"
                f" {them['cpu'] * tokens:,.0f} output tok/s"
                f" ({this['output_tokens_per_sentence']:.1f} | {tokens:.1f}"
                ' a sentence)'
            )
        if cpu:
          lines.append(
              f'{corpus:<14} {label:<14} {t:>3} {_spread(cpu):<22} '
              f'{_spread(wall):<22} {pair}'
          )
  kinds = sorted(glob.glob(os.path.join(out, 'kinds_*.json')))
  if kinds:
    lines.append('')
    lines.append(
        "attention kind against global general (speedup = its speed / global's)"
    )
    for path in kinds:
      result = _load(path)
      speedup = result.get('speedup', {})
      shown = ', '.join(
          f'{label} {value:.2f}' for label, value in speedup.items()
      )
      name = os.path.basename(path)[len('kinds_') : -len('.json')]
      window = {
          label: result['this'][label].get('avg_window_fraction')
          for label in speedup
          if isinstance(result['this'].get(label), dict)
      }
      shown_window = ', '.join(
          f'{k} {v:.2f}' for k, v in window.items() if isinstance(v, float)
      )
      lines.append(
          f'{name:<28} {shown}  (window fraction: {shown_window or "-"})'
      )
  for path in sorted(glob.glob(os.path.join(out, 'ops_*.json'))):
    this = _load(path)['this']
    lines.append('')
    lines.append(
        f'{os.path.basename(path)}: traced'
        f' {this.get("traced_ms_per_step", 0):,.1f} ms per step; by loop:'
    )
    for loop in this.get('loops', [])[:8]:
      lines.append(
          '  '
          + ', '.join(
              f'{k} {v:,.3f}' if isinstance(v, float) else f'{k} {v}'
              for k, v in loop.items()
              if not isinstance(v, (list, dict))
          )
      )
    lines.append('  costliest ops:')
    for op in this.get('ops', [])[:10]:
      lines.append(
          f"  {op['share']:6.1%} {op['ms_per_step']:9.2f} ms  {op['where']}:"
          f" {op['what']}"
      )
  return lines


# ----------------------------------------------------------------- main


def main(argv: List[str]):
  parser = argparse.ArgumentParser(
      prog='python -m benchmarks.real_vocab',
      description=__doc__,
      formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  commands = parser.add_subparsers(dest='command', required=True)
  synthetic = commands.add_parser('synthetic')
  synthetic.add_argument('--output', required=True)
  synthetic.add_argument('--vocab_size', type=int, required=True)
  synthetic.add_argument('--pairs', type=int, default=100_000)
  synthetic.add_argument('--max_length', type=int, default=50)
  synthetic.add_argument(
      '--max_words', type=int, default=50, help='words per sentence, at most'
  )
  synthetic.add_argument('--seed', type=int, default=0)
  pieces = commands.add_parser('pieces')
  pieces.add_argument(
      '--corpus', required=True, help='PREFIX of PREFIX.train.LANG'
  )
  pieces.add_argument('--source_lang', required=True)
  pieces.add_argument('--target_lang', required=True)
  pieces.add_argument('--output', required=True)
  pieces.add_argument('--vocab_size', type=int, required=True)
  pieces.add_argument('--max_length', type=int, default=50)
  config = commands.add_parser('onmt_config')
  config.add_argument('--data', required=True)
  config.add_argument('--run', required=True)
  report = commands.add_parser('summary')
  report.add_argument('out')
  args = parser.parse_args(argv)
  if args.command == 'synthetic':
    with tempfile.TemporaryDirectory() as scratch:
      prefix = os.path.join(scratch, 'synthetic')
      data_speed.write_synthetic_corpus(
          prefix, args.pairs, args.max_words, args.seed, 'src', 'tgt'
      )
      manifest = encode_corpus(
          prefix,
          'src',
          'tgt',
          args.output,
          args.vocab_size,
          args.max_length,
          {
              'source': 'benchmarks.data_speed.write_synthetic_corpus',
              'synthetic_pairs': args.pairs,
              'max_words': args.max_words,
              'seed': args.seed,
          },
      )
    print(json.dumps(manifest, indent=2))
  elif args.command == 'pieces':
    manifest = encode_corpus(
        args.corpus,
        args.source_lang,
        args.target_lang,
        args.output,
        args.vocab_size,
        args.max_length,
    )
    print(json.dumps(manifest, indent=2))
  elif args.command == 'onmt_config':
    print(
        onmt_config(os.path.abspath(args.data), os.path.abspath(args.run)),
        end='',
    )
  else:
    print('\n'.join(summary(args.out)))


if __name__ == '__main__':
  main(sys.argv[1:])
