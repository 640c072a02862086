"""docs/performance.md's real-vocabulary sections from real_vocab.sh's files."""

import json
import os
import re

from benchmarks import performance
from tests.benchmarks.test_bench import write_peer_decode
from tests.benchmarks.test_bench import write_peer_train
from tests.benchmarks.test_real_vocab import _dry_run


def _write_train(path, rate):
  this = {
      'tokens_per_sec': rate,
      'tokens_per_cpu_sec': rate,
      'padding_fraction': 0.08,
      'compile_s': 100.0,
  }
  path.write_text(json.dumps({'jax': '0.0', 'this': this}))


def _write_decode(path, greedy, beam):
  mode = lambda rate: {
      'sentences_per_sec': rate,
      'sentences_per_cpu_sec': rate,
      'compile_s': 10.0,
      # A file of before output tokens were counted: global attention's
      # window, the source with its EOS: 5 output tokens a sentence.
      'avg_window': 6.0,
  }
  this = {'greedy': mode(greedy), 'beam10': mode(beam)}
  path.write_text(json.dumps({'jax': '0.0', 'this': this}))


def test_real_vocabularies_get_rows_per_corpus_paired_with_the_peer(tmp_path):
  # V = 16k: two pairs; the gettext corpus: one.
  for r, ours, theirs in ((1, 3000.0, 2000.0), (2, 2400.0, 2000.0)):
    _write_train(tmp_path / f'train_V16000_t1_r{r}.json', ours)
    write_peer_train(tmp_path / f'peer_train_V16000_t1_r{r}.json', theirs, 1.0)
  _write_train(tmp_path / 'train_gettext_t1_r1.json', 1800.0)
  write_peer_train(tmp_path / 'peer_train_gettext_t1_r1.json', 1200.0, 1.0)
  # 8 sentences of 10 output tokens: the peer's greedy in 0.1 CPU s (800
  # tokens/s), beam 10 in 1 (80/s); nmt_jax's 320 and 24 sentences/s of 5.
  _write_decode(tmp_path / 'decode_V16000_t1_r1.json', 320.0, 24.0)
  write_peer_decode(tmp_path / 'peer_decode_V16000_b1_t1_r1.json', 1, 0.1, 0.1)
  write_peer_decode(
      tmp_path / 'peer_decode_V16000_b10_t1_r1.json', 10, 1.0, 1.0
  )
  text = performance.page([str(tmp_path)])
  section = text.split('\n### Real vocabularies (CPU, one thread)')[1]
  section = section.split('\n### ')[0]
  rows = [line for line in section.splitlines() if line.startswith('| ')]
  assert rows[0].startswith('| figure | corpus |')
  # 3,000 / 2,000 and 2,400 / 2,000: median 1.35 [1.20 - 1.50].
  assert rows[1].startswith('| training, target tok/s | V = 16k |')
  assert '**1.35 [1.20 - 1.50]**' in rows[1]
  assert (
      '| decoding greedy, output tok/s | V = 16k | 1,600 | 800 | **2.00** |'
      in (rows[2])
  )
  assert (
      '| decoding beam10, output tok/s | V = 16k | 120 | 80 | **1.50** |'
      in (rows[3])
  )
  assert '5.0 output tokens a sentence (peer 10.0)' in rows[2]
  assert rows[4].startswith('| training, target tok/s | gettext')
  assert '**1.50**' in rows[4]
  assert len(rows) == 5  # V = 8k and 32k were not measured: no rows
  # No all-cores runs, no kinds, no floor of products: left out.
  assert 'Real vocabularies, all cores' not in text
  assert 'Attention kinds against global attention' not in text
  assert 'bound by its matrix products' not in text
  # The summary at the top: the same pairs against the aim (1.25x on a CPU).
  summary = text.split('## Summary')[1].split('\n## ')[0]
  row = next(
      line
      for line in summary.splitlines()
      if line.startswith('| training, real vocabulary V = 16k |')
  )
  assert '| **1.35** [1.20 - 1.50] (2 pairs, 1 at the aim) |' in row
  assert '`train_V16000_t1_r*.json`, `peer_train_V16000_t1_r*.json`' in row
  row = next(
      line
      for line in summary.splitlines()
      if line.startswith('| greedy decoding, V = 16k')
  )
  assert '| **2.00** (1 pair, at the aim) |' in row
  # Rows of records no directory holds are left out.
  assert 'gettext corpus, per output token' not in summary


def test_the_floor_of_products_under_decoding_at_a_real_vocabulary(tmp_path):
  def mode(ms, fraction, floor_ms):
    products = [  # the output layer's is the largest: 3 of a 4 ms step
        {'gflop': 0.1, 'ms': 1.0},
        {'gflop': 0.4, 'ms': 3.0},
    ]
    return {
        'ms_per_sentence': ms,
        'sentences_per_sec': 1000 / ms,
        'sentences_per_cpu_sec': 1000 / ms,
        'compile_s': 10.0,
        'avg_window': 6.0,
        'fraction_of_product_floor': fraction,
        'product_floor_ms_per_sentence': floor_ms,
        'product_floor': {'step_ms': 4.0, 'products': products},
    }

  for r, (ms, fraction) in enumerate([(7.0, 0.48), (8.0, 0.51)], 1):
    this = {'greedy': mode(ms, fraction, 4.0), 'beam10': mode(50, 0.4, 20)}
    path = tmp_path / f'decode_V16000_t1_r{r}.json'
    path.write_text(json.dumps({'jax': '0.0', 'this': this}))
  text = performance.page([str(tmp_path)])
  paragraph = text.split('bound by its matrix products.')[1].split('\n\n')[0]
  paragraph = ' '.join(paragraph.split())
  # 3 / 4 of the 4 ms floor a sentence: 3.0 ms.
  assert (
      "come to 48-51% (2 runs) of greedy decoding's time and 40% (2 runs) of"
      " beam 10's; the output layer's product alone is 3.0 ms of a greedy"
      " sentence's 7.0-8.0 ms."
  ) in paragraph


def test_attention_kinds_at_a_real_vocabulary_per_pair(tmp_path):
  runs = lambda times, window: {
      'ms_per_sentence': sorted(times)[1],
      'ms_per_sentence_runs': times,
      'avg_window_fraction': window,
  }
  result = {
      'jax': '0.0',
      'config': {'attention': 'memory', 'num_memory': 32},
      'compare_config': {'attention': 'global'},
      'this': {
          'greedy': runs([5.0, 6.0, 5.5], 2.5),
          'beam10': runs([50.0, 40.0, 45.0], 2.5),
      },
      'other': {
          'greedy': runs([6.0, 6.0, 6.6], 1.0),
          'beam10': runs([55.0, 44.0, 45.0], 1.0),
      },
      'speedup': {'greedy': 1.1, 'beam10': 1.0},
  }
  (tmp_path / 'kinds_memory_k32_V16000.json').write_text(json.dumps(result))
  text = performance.page([str(tmp_path)])
  section = text.split('### Attention kinds against global attention')[1]
  rows = [line for line in section.splitlines() if line.startswith('| ')]
  assert rows[0].startswith(
      '| comparison | greedy ms/sent, kind / global | greedy speedup |'
  )
  # global / memory per pair: greedy 1.2, 1.0, 1.2; beam 1.1, 1.1, 1.0; the
  # file has no op counts.
  assert rows[1] == (
      '| (o) memory K = 32 / global, V = 16k dev sentences, window 2.50 of'
      ' the source | 5.50 / 6.00 | x1.20 [1.00 - 1.20] | 45.0 / 45.0'
      ' | x1.10 [1.00 - 1.10] | – |'
  )
  assert len(rows) == 2  # the copy-task comparisons were not measured
  assert '- (o) beam search in batches of `decode.batch_size`' in section
  # The summary: the range of the kinds' median speedups.
  row = next(
      line
      for line in text.splitlines()
      if line.startswith('| attention at V = 16k')
  )
  assert '| x1.10 - x1.20 | `kinds_*_V16000.json` |' in row


def test_real_vocab_sh_writes_the_files_the_page_reads(tmp_path):
  lines = _dry_run(
      tmp_path,
      PARTS='train decode all kinds',
      REPEATS='1',
      CORPORA=' '.join(performance.REAL_VOCAB),
  )
  written = set(re.findall(r'--json[= ]\S*/(\w+\.json)', '\n'.join(lines)))
  for tag in performance.REAL_VOCAB:
    for name in (
        f'train_{tag}_t1_r1.json',
        f'peer_train_{tag}_t1_r1.json',
        f'decode_{tag}_t1_r1.json',
        f'peer_decode_{tag}_b1_t1_r1.json',
        f'peer_decode_{tag}_b10_t1_r1.json',
    ):
      assert name in written, name
  kinds = {
      name for name in written if re.fullmatch(r'kinds_\w+_V16000\.json', name)
  }
  assert len(kinds) == 5, kinds
  cores = len(os.sched_getaffinity(0))  # what nproc counts
  assert f'train_V16000_t{cores}_r1.json' in written
  assert f'decode_V16000_t{cores}_r1.json' in written
