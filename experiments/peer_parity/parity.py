"""nmt_jax against OpenNMT-py 3.5.1 on a real corpus: same pieces, same model.

  python -m experiments.peer_parity.parity prepare --corpus=/tmp/gt/corpus --work=W
  python -m experiments.peer_parity.parity train --work=W --toolkit=nmt_jax --seed=1
  python -m experiments.peer_parity.parity evaluate --work=W --toolkit=nmt_jax --seed=1
  python -m experiments.peer_parity.parity table --work=W [--json=W/parity.json]
  python -m experiments.peer_parity.parity all --corpus=... --work=W --seeds=1,2,3

The corpus is `<corpus>.{train,dev,test}.{src,tgt}` (plain text, one sentence
a line; `python -m experiments.corpora.gettext_catalogues --output=DIR --lang=de` writes
one, English->German, with --corpus=DIR/corpus). `prepare` trains one
SentencePiece BPE model (--pieces, 4,000; character coverage 1.0, no BOS/EOS)
on both training sides, writes every split as space-separated pieces under
W/data/ and drops training and validation pairs with more than --max_length
pieces on a side (the test split is kept whole), so both toolkits read the
same files; W/data/stats.json holds the counts and lengths.

`train` trains one toolkit with one seed to --steps (5,000), keeping the
checkpoints of --eval_steps (1000,2000,5000) and validating there; the run's
folder is W/runs/<toolkit>_s<seed>/ (train.log, timing.json). `evaluate`
translates the test split with each kept checkpoint saved so far (a run may
still be training; run it again for the rest), greedy and beam 5, and
scores the outputs the same way for both toolkits, outside both: the pieces
joined by SentencePiece, then sacreBLEU (13a) BLEU and chrF against the raw
test references (scores.json). `table` prints the BLEU/chrF table (means over
seeds, nmt_jax minus OpenNMT-py) and the validation cross-entropies.

The model, both sides: a 1-layer bidirectional LSTM encoder (128 units per
direction) whose final states start a 1-layer LSTM decoder of 256 units,
embeddings 256, Luong general attention with input feeding, dropout 0.2, Adam
(lr 1e-3, constant), global gradient-norm clipping 5, batches of 64 sentences,
the loss a mean over target tokens, no label smoothing, per-side word
vocabularies of every piece seen. OpenNMT-py's options for it are in
peer_yaml() below, with why each is set; its pitfalls: `-beam_size 1` samples
unless `-random_sampling_topk 1` is given; torch >= 2.6 loads its checkpoints
only with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1; its default `normalization:
sents` and `vocab_size_multiple: 8` would change the loss clipping sees and
the vocabulary. Decoding on both sides: no length penalty (nmt_jax
decode.length_penalty=0, OpenNMT-py's default `none`), nothing blocked,
hypotheses of at most about twice the source (nmt_jax: 2 x source + 10
tokens per sentence, its default; OpenNMT-py: 2 x the batch's longest
source + 5, `-max_length_ratio 2`). nmt_jax keeps the steps with
train.keep_every and translates one with decode.step. OpenNMT-py batches
its default way: a pool of 262,144 examples (here several epochs) sorted by
length, cut into batches of one length, shuffled;
nmt_jax draws each batch from one of 4 even length buckets of a shuffled
epoch (set here: the published runs were made with them; a corpus's default
is now 16 fitted buckets).

Each training and decoding process runs on one core (--cpu, default 1):
`taskset -c CPU`, OMP_NUM_THREADS=MKL_NUM_THREADS=1 for OpenNMT-py, XLA_FLAGS
with one intra-op thread for nmt_jax. --peer_venv is a virtual environment
with OpenNMT-py 3.5.1 and torch (benchmarks/peer_setup.sh builds one; with
the peer scripts' copy data left out, `python3 -m venv V; V/bin/pip install
torch; V/bin/pip install --no-deps opennmt-py==3.5.1` and the packages
peer_setup.sh lists). nmt_jax runs with this interpreter from the repository
root; --nmt_jax_flag adds `--config.a.b=v` overrides to its training (an
experiment, e.g. another initialisation), --onmt_option KEY=VALUE a line to
OpenNMT-py's YAML (e.g. bucket_size=32768), and --tag names such runs apart.
"""

import argparse
import collections
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

from benchmarks import peer

REPO_ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
SPLITS = ('train', 'dev', 'test')
MODES = {'greedy': 1, 'beam5': 5}


# ---------------------------------------------------------------- data


def _read(path: str) -> List[str]:
  with open(path, encoding='utf-8') as f:
    return [line.rstrip('\n') for line in f]


def _write(path: str, lines: List[str]) -> None:
  with open(path + '.part', 'w', encoding='utf-8') as f:
    for line in lines:
      f.write(line + '\n')
  os.replace(path + '.part', path)


def prepare(args) -> None:
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top

  data = os.path.join(args.work, 'data')
  os.makedirs(data, exist_ok=True)
  model_prefix = os.path.join(data, 'spm')
  stats_path = os.path.join(data, 'stats.json')
  if os.path.exists(stats_path):
    print(f'{stats_path} exists: data prepared')
    return
  raw = {
      (split, lang): _read(f'{args.corpus}.{split}.{lang}')
      for split in SPLITS
      for lang in (args.src, args.tgt)
  }
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(raw['train', args.src] + raw['train', args.tgt]),
      model_prefix=model_prefix,
      vocab_size=args.pieces,
      model_type='bpe',
      character_coverage=1.0,
      bos_id=-1,
      eos_id=-1,
      unk_id=0,
      pad_id=-1,
      num_threads=1,
      input_sentence_size=0,
      minloglevel=2,
  )
  sp = spm.SentencePieceProcessor(model_file=model_prefix + '.model')
  stats = {'pieces': sp.get_piece_size(), 'max_length': args.max_length}
  for split in SPLITS:
    src = [' '.join(p) for p in sp.encode(raw[split, args.src], out_type=str)]
    tgt = [' '.join(p) for p in sp.encode(raw[split, args.tgt], out_type=str)]
    keep = [
        i
        for i, (s, t) in enumerate(zip(src, tgt))
        if split == 'test'
        or (
            0 < len(s.split()) <= args.max_length
            and 0 < len(t.split()) <= args.max_length
        )
    ]
    _write(f'{data}/pieces.{split}.{args.src}', [src[i] for i in keep])
    _write(f'{data}/pieces.{split}.{args.tgt}', [tgt[i] for i in keep])
    if split == 'test':  # the raw references, for sacreBLEU
      _write(f'{data}/raw.test.{args.tgt}', raw[split, args.tgt])
      _write(f'{data}/raw.test.{args.src}', raw[split, args.src])
    entry = {'pairs_read': len(src), 'pairs': len(keep)}
    for lang, side in ((args.src, src), (args.tgt, tgt)):
      lengths = [len(side[i].split()) for i in keep]
      entry[lang] = {
          'pieces': sum(lengths),
          'mean_length': round(statistics.mean(lengths), 2),
          'max_length': max(lengths),
          'distinct_pieces': len({p for i in keep for p in side[i].split()}),
      }
    stats[split] = entry
  stats['languages'] = [args.src, args.tgt]
  with open(stats_path, 'w') as f:
    json.dump(stats, f, indent=1)
  print(json.dumps(stats, indent=1))


# ---------------------------------------------------------------- runs


def _run_dir(args, toolkit: str, seed: int) -> str:
  tag = f'_{args.tag}' if args.tag else ''
  return os.path.join(args.work, 'runs', f'{toolkit}{tag}_s{seed}')


def _pinned(args) -> List[str]:
  return ['taskset', '-c', str(args.cpu)] if args.cpu >= 0 else []


def _env(toolkit: str) -> Dict[str, str]:
  env = dict(os.environ, OMP_NUM_THREADS='1', MKL_NUM_THREADS='1')
  if toolkit == 'nmt_jax':
    env['XLA_FLAGS'] = (
        '--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1'
    )
  else:
    env['TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'] = '1'
  return env


def _nmt_jax_flags(args, seed: int) -> List[str]:
  data = os.path.join(args.work, 'data')
  return [
      '--config=configs/global_general.py',
      f'--config.seed={seed}',
      f'--config.data.name=text:{data}/pieces',
      f'--config.data.source_lang={args.src}',
      f'--config.data.target_lang={args.tgt}',
      f'--config.data.max_length={args.max_length}',
      '--config.data.vocab.kind=word',
      '--config.data.vocab.size=0',
      '--config.data.bucketing=even',
      '--config.data.num_buckets=4',
      '--config.data.vocab.min_count=1',
      '--config.data.vocab.shared=false',
      '--config.model.bidirectional=all',
      '--config.model.bridge=copy',
      '--config.model.num_encoder_layers=1',
      '--config.model.num_decoder_layers=1',
      '--config.model.hidden_size=256',
      '--config.model.embed_size=256',
      '--config.model.dropout=0.2',
      '--config.train.learning_rate=1e-3',
      '--config.train.clip_norm=5',
      '--config.train.batch_size=64',
      '--config.train.label_smoothing=0',
  ] + list(args.nmt_jax_flag or [])


def peer_yaml(args, run: str, seed: int) -> str:
  """OpenNMT-py 3.5.1's training config for the same model and data."""
  pieces = os.path.join(args.work, 'data', 'pieces')
  model = peer.matched_model_yaml(
      run,
      (f'{pieces}.train.{args.src}', f'{pieces}.train.{args.tgt}'),
      (f'{pieces}.dev.{args.src}', f'{pieces}.dev.{args.tgt}'),
  )
  steps = max(args.eval_steps)
  return f"""\
# OpenNMT-py 3.5.1, the model of nmt_jax's global_general config with
# bidirectional=all, bridge=copy, 1+1 layers of 256 (real_corpus_parity.py).
save_data: {run}/onmt
src_seq_length: {args.max_length}
tgt_seq_length: {args.max_length}
{model}valid_batch_size: 64
train_steps: {steps}
valid_steps: {min(args.eval_steps)}
save_checkpoint_steps: {min(args.eval_steps)}
keep_checkpoint: -1
save_model: {run}/model
report_every: 100
num_workers: 0
seed: {seed}
""" + ''.join(
      f'{option.replace("=", ": ", 1)}\n' for option in args.onmt_option or []
  )


def train(args) -> None:
  for seed in args.seeds:
    for toolkit in args.toolkits:
      _train_one(args, toolkit, seed)


def _train_one(args, toolkit: str, seed: int) -> None:
  run = _run_dir(args, toolkit, seed)
  timing_path = os.path.join(run, 'timing.json')
  if os.path.exists(timing_path):
    print(f'{run}: trained already')
    return
  os.makedirs(run, exist_ok=True)
  steps = max(args.eval_steps)
  if toolkit == 'nmt_jax':
    workdir = os.path.join(run, 'workdir')
    every = min(args.eval_steps)
    command = (
        _pinned(args)
        + [sys.executable, '-m', 'nmt_jax.main', f'--workdir={workdir}']
        + _nmt_jax_flags(args, seed)
        + [
            f'--config.train.num_steps={steps}',
            f'--config.train.eval_every={every}',
            f'--config.train.checkpoint_every={every}',
            f'--config.train.keep_every={every}',
            '--config.train.log_every=100',
        ]
    )
  else:
    yaml_path = os.path.join(run, 'train.yaml')
    with open(yaml_path, 'w') as f:
      f.write(peer_yaml(args, run, seed))
    bin_dir = os.path.join(args.peer_venv, 'bin')
    subprocess.run(
        [
            f'{bin_dir}/onmt_build_vocab',
            '-config',
            yaml_path,
            '-n_sample',
            '-1',
        ],
        check=True,
        env=_env(toolkit),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    command = _pinned(args) + [f'{bin_dir}/onmt_train', '-config', yaml_path]
  log_path = os.path.join(run, 'train.log')
  print(f'{run}: training, log {log_path}', flush=True)
  start = time.time()
  with open(log_path, 'w') as log:
    log.write(' '.join(command) + '\n')
    log.flush()
    subprocess.run(
        command,
        check=True,
        cwd=REPO_ROOT,
        env=_env(toolkit),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
  seconds = time.time() - start
  with open(timing_path, 'w') as f:
    json.dump({'seconds': seconds, 'steps': steps}, f)


# ---------------------------------------------------------------- decoding


def _saved(toolkit: str, run: str, step: int) -> bool:
  """Whether the checkpoint of `step` is complete (a run may still train)."""
  if toolkit == 'nmt_jax':  # Orbax renames a step's folder when complete
    path = os.path.join(run, 'workdir', 'checkpoints', str(step))
    return os.path.isdir(path) and os.path.exists(
        os.path.join(path, 'state', '_METADATA')
    )
  path = os.path.join(run, f'model_step_{step}.pt')
  if os.path.exists(os.path.join(run, 'timing.json')):  # training ended
    return os.path.exists(path)
  # torch.save writes in place: a file untouched for 30 s is complete.
  return os.path.exists(path) and time.time() - os.path.getmtime(path) > 30


def _translate(args, toolkit: str, run: str, step: int, mode: str) -> str:
  data = os.path.join(args.work, 'data')
  source = f'{data}/pieces.test.{args.src}'
  out_dir = os.path.join(run, 'out')
  os.makedirs(out_dir, exist_ok=True)
  output = os.path.join(out_dir, f'step{step}.{mode}.pieces')
  if os.path.exists(output):
    return output
  beam = MODES[mode]
  if toolkit == 'nmt_jax':
    workdir = os.path.join(run, 'workdir')
    command = (
        _pinned(args)
        + [sys.executable, '-m', 'nmt_jax.main', f'--workdir={workdir}']
        + _nmt_jax_flags(args, 0)
        + [
            '--mode=translate',
            f'--config.decode.step={step}',
            f'--input={source}',
            f'--output={output}.part',
            f'--config.decode.beam_size={beam}',
            '--config.decode.length_penalty=0',
            '--config.decode.max_input_length=1000',
        ]
    )
  else:
    command = _pinned(args) + [
        os.path.join(args.peer_venv, 'bin', 'onmt_translate'),
        '-model',
        os.path.join(run, f'model_step_{step}.pt'),
        '-src',
        source,
        '-output',
        output + '.part',
        '-beam_size',
        str(beam),
        '-batch_size',
        '64',
        '-batch_type',
        'sents',
        '-max_length',
        '1000',
        '-max_length_ratio',
        '2',
    ]  # pyformat: disable
    if beam == 1:
      command += ['-random_sampling_topk', '1']
  start = time.time()
  with open(os.path.join(out_dir, f'step{step}.{mode}.log'), 'w') as log:
    subprocess.run(
        command,
        check=True,
        cwd=REPO_ROOT,
        env=_env(toolkit),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
  with open(os.path.join(out_dir, f'step{step}.{mode}.seconds'), 'w') as f:
    f.write(f'{time.time() - start:.1f}\n')
  os.replace(output + '.part', output)
  return output


def _repeating(pieces_line: str) -> bool:
  """An output stuck repeating: one piece 4+ times in a row, or a 2-4 piece
  group 3+ times in a row."""
  words = pieces_line.split()
  for n in range(1, 5):
    need = 4 if n == 1 else 3
    for i in range(len(words) - n * need + 1):
      group = words[i : i + n]
      if all(words[i + k * n : i + (k + 1) * n] == group for k in range(need)):
        return True
  return False


def _score(args, output: str) -> Dict[str, float]:
  import sacrebleu  # pylint: disable=g-import-not-at-top
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top

  data = os.path.join(args.work, 'data')
  sp = spm.SentencePieceProcessor(model_file=f'{data}/spm.model')
  pieces = _read(output)
  hyps = [sp.decode_pieces(line.split()) for line in pieces]
  refs = _read(f'{data}/raw.test.{args.tgt}')
  assert len(hyps) == len(refs), (output, len(hyps), len(refs))
  return {
      'bleu': round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
      'chrf': round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2),
      'repeating': sum(_repeating(line) for line in pieces),
      'mean_length': round(statistics.mean(len(p.split()) for p in pieces), 2),
  }


def _validation(toolkit: str, run: str) -> Dict[int, float]:
  """Validation cross-entropy (nats per target token) by step."""
  found = {}
  if toolkit == 'nmt_jax':
    for path in glob.glob(os.path.join(run, 'workdir', '*.jsonl')):
      with open(path) as f:
        for line in f:
          record = json.loads(line)
          if record.get('split') == 'valid' and 'loss' in record:
            found[int(record['step'])] = round(float(record['loss']), 4)
  else:
    step = None
    with open(os.path.join(run, 'train.log'), errors='replace') as f:
      for line in f:
        m = re.search(r'Step (\d+)/', line)
        if m:
          step = int(m.group(1))
        m = re.search(r'Validation perplexity: ([0-9.eE+-]+)', line)
        if m and step is not None:
          import math  # pylint: disable=g-import-not-at-top

          found[step] = round(math.log(float(m.group(1))), 4)
  return found


def _speed(toolkit: str, run: str) -> Dict[str, float]:
  """Seconds per 1,000 steps (from the first log line at step 100 to the
  last, validations included) and the mean target tokens/s of the log
  lines (training alone)."""
  points, rates = [], []  # (step, unix time), tokens/s
  if toolkit == 'nmt_jax':
    path = os.path.join(run, 'workdir', 'metrics.jsonl')
    if os.path.exists(path):
      with open(path) as f:
        for line in f:
          record = json.loads(line)
          if record.get('split') == 'train':
            points.append((record['step'], record['time']))
            rates.append(record['tokens_per_sec'])
  else:
    with open(os.path.join(run, 'train.log'), errors='replace') as f:
      for line in f:
        m = re.search(
            r'^\[(\S+ \S+),\d+ INFO\] Step (\d+)/.* (\d+)/(\d+) tok/s', line
        )
        if m:
          moment = time.mktime(time.strptime(m.group(1), '%Y-%m-%d %H:%M:%S'))
          points.append((int(m.group(2)), moment))
          rates.append(float(m.group(4)))
  if len(points) < 3:
    return {}
  (first_step, first), (last_step, last) = points[0], points[-1]
  return {
      'steps': last_step,
      'seconds_per_1k_steps': round(
          1000 * (last - first) / (last_step - first_step), 1
      ),
      'target_tokens_per_second': round(statistics.mean(rates[1:]), 1),
  }


def evaluate(args) -> None:
  for seed in args.seeds:
    for toolkit in args.toolkits:
      run = _run_dir(args, toolkit, seed)
      scores_path = os.path.join(run, 'scores.json')
      scores = {}
      if os.path.exists(scores_path):
        with open(scores_path) as f:
          scores = json.load(f)
      for step in args.eval_steps:
        for mode in MODES:
          key = f'{step}/{mode}'
          if key in scores:
            continue
          if not _saved(toolkit, run, step):
            print(f'{run}: no checkpoint of step {step} (yet)')
            break
          output = _translate(args, toolkit, run, step, mode)
          scores[key] = _score(args, output)
          print(f'{run} {key}: {scores[key]}', flush=True)
          with open(scores_path, 'w') as f:
            json.dump(scores, f, indent=1)


# ---------------------------------------------------------------- table


def table(args) -> None:
  rows = collections.defaultdict(dict)  # (toolkit, seed) -> record
  for toolkit in args.toolkits:
    for seed in args.seeds:
      run = _run_dir(args, toolkit, seed)
      record = {}
      for name in ('scores', 'timing'):
        path = os.path.join(run, f'{name}.json')
        if os.path.exists(path):
          with open(path) as f:
            record[name] = json.load(f)
      if os.path.exists(os.path.join(run, 'train.log')):
        record['validation_xent'] = _validation(toolkit, run)
        record['speed'] = _speed(toolkit, run)
      if record:
        rows[toolkit, seed] = record
  lines = []
  header = f'{"toolkit":<10} {"seed":>4} {"step":>5}'
  for mode in MODES:
    header += f' {mode + " BLEU":>11} {mode + " chrF":>11}'
  header += f' {"val xent":>8} {"rep":>7}'
  lines.append(header)
  means = collections.defaultdict(list)
  for (toolkit, seed), record in sorted(rows.items()):
    for step in args.eval_steps:
      line = f'{toolkit:<10} {seed:>4} {step:>5}'
      reps = []
      for mode in MODES:
        s = record.get('scores', {}).get(f'{step}/{mode}')
        if s:
          line += f' {s["bleu"]:>11.2f} {s["chrf"]:>11.2f}'
          means[toolkit, step, mode, 'bleu'].append(s['bleu'])
          means[toolkit, step, mode, 'chrf'].append(s['chrf'])
          reps.append(str(s['repeating']))
        else:
          line += f' {"-":>11} {"-":>11}'
      xent = record.get('validation_xent', {}).get(step)
      if xent is not None:
        means[toolkit, step, 'xent'].append(xent)
      line += f' {xent if xent is not None else "-":>8} {"/".join(reps):>7}'
      lines.append(line)
  lines.append('')
  lines.append('speed (one core, a shared machine: rough):')
  for (toolkit, seed), record in sorted(rows.items()):
    lines.append(f'  {toolkit:<10} {seed:>4} {record.get("speed")}')
  lines.append('')
  lines.append('means over seeds (n), nmt_jax minus OpenNMT-py:')
  summary = {}
  for step in args.eval_steps:
    for mode in MODES:
      for metric in ('bleu', 'chrf'):
        cell = {}
        for toolkit in args.toolkits:
          values = means.get((toolkit, step, mode, metric))
          if values:
            cell[toolkit] = (round(statistics.mean(values), 2), len(values))
        if len(cell) == 2 and 'nmt_jax' in cell:
          other = next(t for t in cell if t != 'nmt_jax')
          diff = round(cell['nmt_jax'][0] - cell[other][0], 2)
        else:
          diff = None
        summary[f'{step}/{mode}/{metric}'] = {
            **{t: v[0] for t, v in cell.items()},
            'n': {t: v[1] for t, v in cell.items()},
            'difference': diff,
        }
        if not cell:
          continue
        text = '  '.join(f'{t} {v[0]:.2f} ({v[1]})' for t, v in cell.items())
        lines.append(
            f'  {step:>5} {mode:<6} {metric:<4} {text}'
            + (f'  diff {diff:+.2f}' if diff is not None else '')
        )
    xent = {
        t: round(statistics.mean(means[t, step, 'xent']), 4)
        for t in args.toolkits
        if means.get((t, step, 'xent'))
    }
    summary[f'{step}/validation_xent'] = xent
    if xent:
      lines.append(f'  {step:>5} validation xent {xent}')
  print('\n'.join(lines))
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(
          {
              'runs': {f'{t}_s{s}': r for (t, s), r in rows.items()},
              'means': summary,
          },
          f,
          indent=1,
      )


def main(argv: Optional[List[str]] = None) -> None:
  parser = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
  )
  parser.add_argument(
      'command', choices=['prepare', 'train', 'evaluate', 'table', 'all']
  )
  parser.add_argument('--work', required=True, help='working folder')
  parser.add_argument('--corpus', help='prefix of <corpus>.<split>.<lang>')
  parser.add_argument('--src', default='en')
  parser.add_argument('--tgt', default='de')
  parser.add_argument('--pieces', type=int, default=4000)
  parser.add_argument('--max_length', type=int, default=50)
  parser.add_argument('--seeds', default='1,2,3')
  parser.add_argument('--toolkits', default='nmt_jax,onmt')
  parser.add_argument('--eval_steps', default='1000,2000,5000')
  parser.add_argument('--cpu', type=int, default=1, help='-1: not pinned')
  parser.add_argument('--peer_venv', default='/tmp/peer_onmt')
  parser.add_argument('--nmt_jax_flag', action='append')
  parser.add_argument(
      '--onmt_option', action='append', help='KEY=VALUE: a line of its YAML'
  )
  parser.add_argument('--tag', default='')
  parser.add_argument('--json', help='table: write the results here')
  args = parser.parse_args(argv)
  args.seeds = [int(s) for s in args.seeds.split(',')]
  args.toolkits = args.toolkits.split(',')
  args.eval_steps = sorted(int(s) for s in args.eval_steps.split(','))
  if args.command in ('prepare', 'all'):
    if not args.corpus:
      parser.error('prepare needs --corpus')
    prepare(args)
  if args.command == 'all':
    for seed in args.seeds:
      for toolkit in args.toolkits:
        _train_one(args, toolkit, seed)
        one = argparse.Namespace(**vars(args))
        one.seeds, one.toolkits = [seed], [toolkit]
        evaluate(one)
    table(args)
  elif args.command == 'train':
    train(args)
  elif args.command == 'evaluate':
    evaluate(args)
  elif args.command == 'table':
    table(args)


if __name__ == '__main__':
  main()
