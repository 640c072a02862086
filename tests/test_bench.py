"""`python -m nmt_jax.bench` runs and writes its JSON (no timing asserted)."""

import json
import os

import pytest

from nmt_jax import data
from nmt_jax import default_config
from nmt_jax import validation
from nmt_jax.tools import bench as bench_lib
from nmt_jax.tools import bench_data
from tests import conftest

pytestmark = pytest.mark.slow


def bench(*args):
  return conftest.run_module('nmt_jax.bench', *args)


def test_bench_train_json(tmp_path):
  path = tmp_path / 'train.json'
  out = bench(
      'train',
      '--config=configs/global_general.py:tiny',
      '--steps=2',
      '--repeats=1',
      '--threads=1',
      f'--json={path}',
  )
  result = json.loads(path.read_text())
  assert result['threads'] == 1
  for key in (
      'tokens_per_sec',
      'compile_s',
      'peak_rss_mb',
      'fraction_of_matmul_rate',
  ):
    assert result['this'][key] > 0, key
  assert 'tokens_per_sec' in out.stdout


def test_bench_decode_json_with_compare(tmp_path):
  path = tmp_path / 'decode.json'
  bench(
      'decode',
      '--config=configs/memory_k64.py:tiny',
      '--compare=configs/global_concat.py:tiny',
      '--repeats=1',
      '--num_sentences=8',
      f'--json={path}',
  )
  result = json.loads(path.read_text())
  for name in ('this', 'other'):
    for mode in ('greedy', 'beam2', 'forced'):
      figures = result[name][mode]
      assert figures['ms_per_sentence'] > 0 and figures['sentences_per_sec'] > 0
      assert figures['avg_window'] > 0 and figures['compile_s'] > 0
  # K memory slots (memory_k64)
  assert result['this']['greedy']['avg_window'] == 64
  assert set(result['speedup']) == {'greedy', 'beam2', 'forced'}


def test_bench_data_json_on_a_synthetic_corpus(tmp_path):
  path = tmp_path / 'data.json'
  bench(
      'data',
      '--config=configs/global_general.py:tiny',
      '--synthetic=400',
      '--steps=5',
      '--train_steps=2',
      '--config.data.vocab.kind=word',
      '--config.data.max_length=40',
      '--config.data.batch_tokens=200',
      f'--json={path}',
  )
  result = json.loads(path.read_text())['this']
  assert result['corpus'] == 'synthetic' and 0 < result['train_pairs'] <= 400
  for key in (
      'load_sentences_per_sec',
      'pipeline_sentences_per_sec',
      'train_sentences_per_sec',
      'pipeline_over_training',
  ):
    assert result[key] > 0, key
  # Batches by tokens: at most 200 padded tokens, so fewer sentences than the longest bucket allows.
  assert result['sentences_per_batch'] <= 200 // 11


def test_synthetic_corpus_is_parallel_and_bounded(tmp_path):
  prefix = str(tmp_path / 'c')
  bench_data.write_synthetic_corpus(prefix, 300, max_words=30)
  for split, count in (('train', 300), ('dev', 300)):
    de = open(f'{prefix}.{split}.de').read().splitlines()
    en = open(f'{prefix}.{split}.en').read().splitlines()
    assert len(de) == len(en) == count
    assert all(1 <= len(s.split()) <= 30 for s in de + en)
    assert all(len(t.split()) >= len(s.split()) for s, t in zip(de, en))


def test_bench_data_leaves_a_real_workdir_untouched(tmp_path):
  prefix = str(tmp_path / 'c')
  bench_data.write_synthetic_corpus(prefix, 200, max_words=10)
  corpus = [
      '--config=configs/global_general.py:tiny',
      f'--config.data.name=text:{prefix}',
      '--config.data.vocab.kind=word',
      '--config.data.max_length=12',
  ]
  workdir = tmp_path / 'run'
  conftest.run_module(
      'nmt_jax.main', *corpus, f'--workdir={workdir}', '--mode=prepare'
  )
  config = default_config.get_config('tiny')
  config.data.name = f'text:{prefix}'
  config.data.vocab.kind = 'word'
  config.data.max_length = 12
  # writes the encoded cache, as training does
  data.load_task(validation.resolve(config).data, 0, str(workdir))
  before = sorted(os.listdir(workdir / 'data_cache'))
  assert before
  bench('data', *corpus, f'--data_workdir={workdir}', '--steps=2')
  assert sorted(os.listdir(workdir / 'data_cache')) == before


def test_a_chunked_loss_shrinks_the_memory_plan_of_a_step():
  config = default_config.get_config('tiny')
  config.train.batch_size = 32
  config.data.max_length = 20
  whole = bench_lib.bench_memory(config, vocab_size=4000)
  config.train.loss_chunk = 3
  chunked = bench_lib.bench_memory(config, vocab_size=4000)
  assert whole['logits_mb'] == pytest.approx(4 * 32 * 21 * 4000 / 2**20)
  assert whole['parameters'] == chunked['parameters']
  # At least one [B, T, V] array less (the logits and softmax of the whole).
  assert chunked['temp_mb'] < whole['temp_mb'] - whole['logits_mb']
