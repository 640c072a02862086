"""benchmarks/real_vocab.sh (--dry-run) and its helpers (benchmarks/real_vocab.py)."""

import json
import os
import shlex
import subprocess

from benchmarks import real_vocab
from tests import conftest
from tests.benchmarks.test_bench import write_peer_decode

ROOT = conftest.ROOT


def _dry_run(tmp_path, **env):
  peer = tmp_path / 'peer'
  (peer / 'bin').mkdir(parents=True, exist_ok=True)
  for f in (
      'bin/python',
      'bin/onmt_build_vocab',
      'train_bench.py',
      'translate_bench.py',
  ):
    (peer / f).write_text('')
  result = subprocess.run(
      ['bash', 'benchmarks/real_vocab.sh', str(tmp_path / 'out'), '--dry-run'],
      cwd=ROOT,
      env=dict(os.environ, PEER_VENV=str(peer), PEER_SCRIPTS=str(peer), **env),
      capture_output=True,
      text=True,
      timeout=60,
  )
  assert result.returncode == 0, result.stderr
  first, _, rest = result.stdout.partition('\n')
  assert first == f'cd {shlex.quote(ROOT)}'
  return rest.splitlines()


def test_pairs_alternate_toolkits_on_one_core_with_the_same_pieces(tmp_path):
  lines = _dry_run(
      tmp_path,
      PARTS='train decode',
      REPEATS='2',
      CORE='1',
      CORPORA='V8000 gettext',
  )
  timed = [shlex.split(line) for line in lines]
  assert all(a[a.index('taskset') + 2] == '1' for a in timed)
  who = [
      'peer' if any('_bench.py' in x for x in a) else 'nmt_jax' for a in timed
  ]
  # Training: a pair per corpus and repeat; decoding: greedy and beam 10 of
  # the peer, then nmt_jax's both in one process.
  assert who[:8] == ['peer', 'nmt_jax'] * 4
  assert who[8:] == ['peer', 'peer', 'nmt_jax'] * 4
  data = tmp_path / 'out' / 'data'
  for a in timed[:2]:  # V8000, repeat 1: both read the same piece files
    joined = ' '.join(a)
    assert f'{data}/V8000/' in joined and 'gettext' not in joined
  ours = timed[1]
  for flag in (
      '--config.model.bidirectional=all',
      '--config.model.bridge=copy',
      '--config.model.num_encoder_layers=1',
      '--config.model.hidden_size=256',
      '--config.data.vocab.kind=word',
      '--config.data.vocab.shared=false',
      f'--data_workdir={data}/V8000/nmt_jax',
      '--threads=1',
      '--steps=27',
  ):
    assert flag in ours, flag
  greedy, beam = timed[8], timed[9]
  assert greedy[greedy.index('-beam_size') + 1] == '1'
  assert (
      '-random_sampling_topk' in greedy and '-random_sampling_topk' not in beam
  )
  assert beam[beam.index('-beam_size') + 1] == '10'
  assert '--sentences_per_batch=64' in timed[10]


def test_kinds_compare_against_global_with_the_same_model(tmp_path):
  lines = _dry_run(tmp_path, PARTS='kinds')
  assert len(lines) == 5
  for line in lines:
    args = shlex.split(line)
    config = [a for a in args if a.startswith('--config=')]
    assert (
        len(config) == 1 and config[0] != '--config=configs/global_general.py'
    )
    assert '--compare=configs/global_general.py' in args
    for side in ('config', 'compare'):
      assert f'--{side}.model.hidden_size=256' in args
      assert f'--{side}.decode.beam_size=10' in args
  assert '--config.model.attention.tau=1.2' in lines[3]


def test_pieces_fall_back_to_the_largest_vocabulary_and_drop_long_pairs(
    tmp_path,
):
  words = ['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta']
  source = [' '.join(words[: 1 + i % 8]) for i in range(200)]
  target = [' '.join(reversed(words[: 1 + (i + 3) % 8])) for i in range(200)]
  source[0] = ' '.join(words * 10)  # 80 words: over the limit
  prefix = tmp_path / 'c'
  for split in ('train', 'dev'):
    (tmp_path / f'c.{split}.en').write_text('\n'.join(source) + '\n')
    (tmp_path / f'c.{split}.de').write_text('\n'.join(target) + '\n')
  manifest = real_vocab.encode_corpus(
      str(prefix), 'en', 'de', str(tmp_path / 'out'), 16_000, max_length=50
  )
  assert manifest['vocab_size'] < 16_000
  assert manifest['train']['pairs'] == 199
  assert manifest['train']['dropped_over_max_length'] == 1
  assert manifest['dev']['pairs'] == 200  # dev is kept whole
  train = (tmp_path / 'out' / 'pieces.train.src').read_text().splitlines()
  assert len(train) == 199 and all(len(line.split()) <= 50 for line in train)
  assert (
      json.loads((tmp_path / 'out' / 'manifest.json').read_text()) == manifest
  )


def test_onmt_config_matches_the_model():
  text = real_vocab.onmt_config('/d', '/r')
  for setting in (
      'encoder_type: brnn',
      'enc_layers: 1',
      'dec_layers: 1',
      'hidden_size: 256',
      'word_vec_size: 256',
      'global_attention: general',
      'input_feed: 1',
      'batch_size: 64',
      'normalization: tokens',
      'vocab_size_multiple: 1',
      'learning_rate: 0.001',
      'max_grad_norm: 5',
      'path_src: /d/pieces.train.src',
  ):
    assert setting in text, setting


def test_summary_pairs_runs(tmp_path):
  def write(name, value):
    (tmp_path / name).write_text(json.dumps(value))

  for r, (ours, theirs) in enumerate([(300, 200), (330, 200)], 1):
    write(
        f'train_V8000_t1_r{r}.json',
        {'this': {'tokens_per_cpu_sec': ours, 'tokens_per_sec': ours}},
    )
    write(
        f'peer_train_V8000_t1_r{r}.json',
        {'summary': {'tgt_tok_per_s': theirs, 'cpu_util_window': 1.0}},
    )
  # Decoding, per output token: nmt_jax's 100 sentences/s of 10 tokens (a
  # file of before they were counted: its window, the source with EOS, less
  # one), the peer's 80/s of 10 (each run to its batch's longest source + 5).
  mode = {'sentences_per_cpu_sec': 100.0, 'sentences_per_sec': 100.0}
  write(
      'decode_V8000_t1_r1.json',
      {'this': {'greedy': dict(mode, avg_window=11.0)}},
  )
  write_peer_decode(tmp_path / 'peer_decode_V8000_b1_t1_r1.json', 1, 0.1, 0.1)
  lines = real_vocab.summary(str(tmp_path))
  row = next(line for line in lines if line.startswith('V8000'))
  assert 'train' in row and '1.57 [1.50 - 1.65]' in row
  greedy = next(line for line in lines if 'greedy' in line)
  assert '1.25' in greedy and '1,000 | 800 output tok/s' in greedy
