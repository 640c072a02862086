"""`python -m benchmarks.bench` runs and writes its JSON (no timing asserted)."""

import json
import os

import pytest

from benchmarks import data_speed
from benchmarks import decode_speed
from benchmarks import performance
from benchmarks import startup
from benchmarks import train_speed as bench_lib
from nmt_jax import data
from nmt_jax import train
from nmt_jax.config import defaults
from nmt_jax.config import validation
from nmt_jax.decoding import evaluation
from nmt_jax.system import errors
from tests import conftest
from tests.commands import QUICK
from tests.commands import cli_config

pytestmark = pytest.mark.slow


def bench(*args):
  return conftest.run_module('benchmarks.bench', *args)


def write_peer_train(path, tok_per_s, cpu_util, threads=1):
  """A training run's JSON as OpenNMT-py's train_bench.py writes it."""
  summary = {
      'threads': threads,
      'tgt_tok_per_s': tok_per_s,
      'cpu_util_window': cpu_util,
      'padding_fraction': 0.001,
      'peak_rss_mib': 1700.0,
      'window_steps': 80,
  }
  path.write_text(json.dumps({'summary': summary, 'records': []}))


def write_peer_decode(path, beam, seconds, cpu_seconds, sentences=8):
  """A decoding run's JSON as OpenNMT-py's translate_bench.py writes it."""
  timing = {
      'translate_s': seconds,
      'translate_cpu_s': cpu_seconds,
      'n_sent': sentences,
      'hyp_tokens': 10 * sentences,
      'peak_rss_mib': 400.0,
      'threads': 1,
  }
  args = ['-model', 'm.pt', '-beam_size', str(beam), '-batch_size', '64']
  path.write_text(json.dumps({'timing': timing, 'args': args}))


def test_bench_train_json_compares_alternating_pairs_and_a_peer(tmp_path):
  path = tmp_path / 'train.json'
  # Two peer runs: their median is compared.
  write_peer_train(tmp_path / 'peer_r1.json', 1000.0, 1.0)
  write_peer_train(tmp_path / 'peer_r2.json', 3000.0, 0.5)
  out = bench(
      'train',
      '--config=configs/global_general.py:tiny',
      '--compare=configs/global_general.py:tiny',
      '--config.train.dropout_rng=philox2x32',
      # XLA's default, spelled out: the option compiles into one side only.
      '--config.compiler_options=--xla_cpu_enable_fast_math=false',
      '--steps=2',
      '--repeats=2',
      '--threads=1',
      f'--json={path}',
      f'--peer={tmp_path}/peer_r*.json',
  )
  result = json.loads(path.read_text())
  assert result['threads'] == 1
  assert result['platform'] == 'cpu' and result['device_count'] >= 1
  assert result['config']['dtype'] == 'float32'
  # The model switches a figure depends on (Britz's copy model sets two).
  assert (
      result['config']['bidirectional'],
      result['config']['bridge'],
      result['config']['input_feeding'],
  ) == ('bottom', 'dense', True)
  this, other = result['this'], result['other']
  for key in (
      'tokens_per_sec',
      'tokens_per_cpu_sec',
      'compile_s',
      'peak_rss_mb',
      'fraction_of_matmul_rate',
  ):
    assert this[key] > 0, key
  assert this['peak_device_memory_mb'] is None  # CPU: see RSS
  assert this['steps_per_repetition'] == 2
  assert this['repetitions'] == 2
  assert result['peer']['tokens_per_sec'] == 2000.0
  assert result['peer']['tokens_per_cpu_sec'] == 3500.0  # (1000 + 6000) / 2
  assert result['vs_peer'] == pytest.approx({
      'tokens_per_sec': this['tokens_per_sec'] / 2000.0,
      'tokens_per_cpu_sec': this['tokens_per_cpu_sec'] / 3500.0,
  })
  assert 'tokens_per_sec' in out.stdout
  # The two configs alternate, repetition by repetition: pairs.
  pairs = result['speedup']['tokens_per_sec_pairs']
  assert pairs == pytest.approx([
      a / b
      for a, b in zip(this['tokens_per_sec_runs'], other['tokens_per_sec_runs'])
  ])
  assert result['speedup']['tokens_per_sec'] == pytest.approx(
      sorted(pairs)[0] / 2 + sorted(pairs)[1] / 2
  )
  assert 0 <= this['kernel_cpu_fraction'] <= 1
  options = result['config'].pop('compiler_options')
  assert options == '--xla_cpu_enable_fast_math=false'
  assert result['compare_config'].pop('compiler_options') == ''
  assert result['compare_config'] == result['config']


def test_a_training_figure_is_the_repetition_of_median_rate():
  # (seconds, real target tokens, ...): repetitions run different batches,
  # so the repetition of median seconds (the second, 2.0 s) has the lowest
  # rate (500 tok/s); the median rate is the third's (800).
  results = [(1.0, 1000), (2.0, 1000), (2.5, 2000)]
  assert bench_lib.median_repetition(results) == (2.5, 2000)
  assert bench_lib.median_repetition([(1.0, 10)]) == (1.0, 10)


def test_bench_peer_that_matches_nothing_is_one_line(tmp_path):
  out = conftest.run_module(
      'benchmarks.bench',
      'train',
      '--config=configs/global_general.py:tiny',
      f'--peer={tmp_path}/none*.json',
      check=False,
  )
  assert out.returncode == 2
  assert out.stderr.strip().splitlines()[-1].startswith('error: --peer=')


BENCH_MISTAKES = [
    ('decode', '--modes=greedy,beam10', '--modes takes greedy, beam and'),
    ('decode', '--repeats=0', '--repeats=0: 0 is not a positive'),
    ('decode', '--num_sentences=0', '--num_sentences=0: 0 is not a'),
    ('train', '--steps=0', '--steps=0: 0 is not a positive'),
    ('ops', '--top=-3', '--top=-3: -3 is not a positive'),
    ('ops', '--compare=configs/memory_k64.py:tiny', 'takes no --compare'),
    ('startup', '--peer=x.json', 'bench startup takes no --peer'),
]


@pytest.fixture(scope='module')
def bench_mistakes():
  """What `bench COMMAND --config=... FLAG` wrote for each BENCH_MISTAKES."""
  results = conftest.run_module_lines(
      'benchmarks.bench',
      [
          [command, '--config=configs/global_general.py:tiny', flag]
          for command, flag, _ in BENCH_MISTAKES
      ],
  )
  return {
      (command, flag): result
      for (command, flag, _), result in zip(BENCH_MISTAKES, results)
  }


@pytest.mark.parametrize('command,flag,message', BENCH_MISTAKES)
def test_bench_flag_mistakes_stop_before_any_work(
    bench_mistakes, command, flag, message
):
  """They crashed after compiling (TypeError, StatisticsError, ...) or were
  dropped without a word."""
  out = bench_mistakes[(command, flag)]
  # 2: a flag's value, one line (as main); 1: absl's usage error.
  assert out.returncode in (1, 2) and message in out.stderr, out.stderr[-1000:]
  assert 'Traceback' not in out.stderr


def test_an_unwritable_json_path_stops_before_the_run(tmp_path):
  # It was a FileNotFoundError traceback after the whole run, results lost.
  out = conftest.run_module(
      'benchmarks.bench',
      'ops',
      '--config=configs/global_general.py:tiny',
      f'--json={tmp_path}/missing/ops.json',
      check=False,
  )
  assert out.returncode == 2, out.stderr[-1000:]
  assert out.stderr.strip().splitlines()[-1] == (
      f'error: --json={tmp_path}/missing/ops.json: folder'
      f' {tmp_path}/missing does not exist; create it first'
  )
  assert out.stdout == ''  # no table: nothing was run


def test_bench_decode_json_with_compare(tmp_path):
  path = tmp_path / 'decode.json'
  write_peer_decode(tmp_path / 'peer_b1.json', 1, seconds=2.0, cpu_seconds=4.0)
  write_peer_decode(tmp_path / 'peer_b2.json', 2, seconds=4.0, cpu_seconds=8.0)
  bench(
      'decode',
      '--config=configs/memory_k64.py:tiny',
      '--compare=configs/global_concat.py:tiny',
      '--repeats=1',
      '--num_sentences=8',
      f'--json={path}',
      f'--peer={tmp_path}/peer_b1.json,{tmp_path}/peer_b2.json',
  )
  result = json.loads(path.read_text())
  assert result['vs_peer']['greedy']['sentences_per_sec'] == pytest.approx(
      result['this']['greedy']['sentences_per_sec'] / 4.0
  )
  assert result['vs_peer']['beam2']['sentences_per_cpu_sec'] == pytest.approx(
      result['this']['beam2']['sentences_per_cpu_sec'] / 1.0
  )
  # The floor: the search step's products alone, times the steps a sentence
  # needs; the output layer's product is one of them.
  config = validation.resolve(cli_config('--config=configs/memory_k64.py:tiny'))
  vocab = len(data.load_task(config.data, 0).target_vocab)
  for mode, peer_rate in (('greedy', 4.0), ('beam2', 2.0)):
    figures = result['this'][mode]
    floor = figures['product_floor']
    assert vocab in [p['rhs'][-1] for p in floor['products']]
    assert floor['sentences_per_batch'] == figures['sentences_per_batch']
    assert 0 < figures['product_floor_ms_per_sentence']
    assert figures['fraction_of_product_floor'] == pytest.approx(
        figures['product_floor_ms_per_sentence'] / figures['ms_per_sentence']
    )
    # The peer's runs: 10 output tokens a sentence.
    tokens = figures['output_tokens_per_sentence']
    assert result['vs_peer'][mode]['at_product_floor'] == pytest.approx(
        tokens
        * 1000
        / figures['product_floor_ms_per_sentence']
        / peer_rate
        / 10
    )
    assert result['vs_peer'][mode]['output_tokens_per_sec'] == pytest.approx(
        figures['sentences_per_sec'] * tokens / peer_rate / 10
    )
  for mode in ('greedy', 'beam2'):
    # Random weights with EOS held back: each output has its source's
    # tokens (global attention's window is the source, EOS included; the
    # output's EOS, its last step, is not counted).
    tokens = result['other'][mode]['output_tokens_per_sentence']
    assert tokens == pytest.approx(result['other'][mode]['avg_window'] - 1)
  for name in ('this', 'other'):
    for mode in ('greedy', 'beam2', 'forced'):
      figures = result[name][mode]
      assert figures['ms_per_sentence'] > 0 and figures['sentences_per_sec'] > 0
      assert figures['sentences_per_cpu_sec'] > 0
      assert figures['avg_window'] > 0 and figures['compile_s'] > 0
  # K memory slots (memory_k64)
  assert result['this']['greedy']['avg_window'] == 64
  # One search step's ops, from the compiled decoder: beam search's step also
  # selects the top hypotheses and reorders their states.
  for name in ('this', 'other'):
    search = {
        mode: max(loop['ops'] for loop in result[name][mode]['loop_ops'])
        for mode in ('greedy', 'beam2')
    }
    assert 0 < search['greedy'] < search['beam2']
  assert set(result['speedup']) == {'greedy', 'beam2', 'forced'}
  # Two models (different weights): the texts they decode differ.
  assert result['same_outputs'] == {'greedy': False, 'beam2': False}
  # decode.batch_size (16) counts hypotheses: beam search takes 16 // 2.
  batches = {
      mode: result['this'][mode]['sentences_per_batch']
      for mode in ('greedy', 'beam2', 'forced')
  }
  assert batches == {'greedy': 16, 'beam2': 8, 'forced': 16}


def test_bench_decode_compare_says_a_lever_decodes_the_same_texts(tmp_path):
  path = tmp_path / 'decode.json'
  bench(
      'decode',
      '--config=configs/global_general.py:tiny',
      '--compare=configs/global_general.py:tiny',
      # XLA's default, spelled out: compiled into one side's decoders only.
      '--config.decode.compiler_options=--xla_cpu_enable_fast_math=false',
      '--modes=greedy,beam',
      '--repeats=1',
      '--num_sentences=8',
      f'--json={path}',
  )
  result = json.loads(path.read_text())
  assert result['same_outputs'] == {'greedy': True, 'beam2': True}
  assert result['config']['decode_compiler_options'] == (
      '--xla_cpu_enable_fast_math=false'
  )
  # The other side keeps the default (search loops as CUDA graphs on a GPU).
  assert result['compare_config']['decode_compiler_options'] == (
      defaults.CUDA_GRAPHS
  )
  # The digest is of the texts: greedy and beam search decode others here.
  this = result['this']
  assert this['greedy']['outputs_sha1'] != this['beam2']['outputs_sha1']


@pytest.mark.slow
def test_bench_decode_compare_with_a_workdir_and_another_beam(tmp_path):
  """Both sides decode the workdir's weights; with another beam size only the
  modes both run are compared."""
  workdir = str(tmp_path / 'run')
  tiny = '--config=configs/global_general.py:tiny'
  train.train_and_evaluate(cli_config(tiny, *QUICK), workdir)
  path = tmp_path / 'decode.json'
  bench(
      'decode',
      tiny,
      f'--workdir={workdir}',
      '--compare=configs/global_general.py:tiny',
      '--compare.decode.compiler_options=--xla_cpu_enable_fast_math=false',
      '--compare.decode.beam_size=3',  # beam2 against beam3
      '--modes=greedy,beam',
      '--repeats=1',
      '--num_sentences=4',
      f'--json={path}',
  )
  result = json.loads(path.read_text())
  weights = f'best checkpoint of {workdir}'
  assert result['this']['weights'] == result['other']['weights'] == weights
  assert set(result['this']) >= {'greedy', 'beam2'}
  assert set(result['other']) >= {'greedy', 'beam3'}
  assert set(result['speedup']) == {'greedy'}
  assert result['same_outputs'] == {'greedy': True}


def test_sentences_per_batch_is_the_batch_of_every_mode(monkeypatch):
  config = defaults.get_config('tiny')
  with pytest.raises(errors.ConfigError, match='sentences_per_batch=0'):
    decode_speed.DecodeBench(config, None, 12, sentences_per_batch=0)
  decoded_in = []
  decode_split = evaluation.decode_split

  def recorded(decode_fn, params, split, batch_size, *args, **kwargs):
    decoded_in.append(batch_size)
    return decode_split(decode_fn, params, split, batch_size, *args, **kwargs)

  monkeypatch.setattr(evaluation, 'decode_split', recorded)
  result = decode_speed.bench_decode(
      config, None, None, ['greedy', 'beam'], 1, 12, sentences_per_batch=4
  )
  # A warm-up pass and a timed one per mode, in batches of 4 sentences
  # (8 hypotheses in beam search).
  assert decoded_in == [4, 4, 4, 4]
  assert result['this']['greedy']['sentences_per_batch'] == 4
  assert result['this']['beam2']['sentences_per_batch'] == 4


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
  data_speed.write_synthetic_corpus(prefix, 300, max_words=30)
  for split, count in (('train', 300), ('dev', 300)):
    de = open(f'{prefix}.{split}.de').read().splitlines()
    en = open(f'{prefix}.{split}.en').read().splitlines()
    assert len(de) == len(en) == count
    assert all(1 <= len(s.split()) <= 30 for s in de + en)
    assert all(len(t.split()) >= len(s.split()) for s, t in zip(de, en))


def test_bench_data_leaves_a_real_workdir_untouched(tmp_path):
  prefix = str(tmp_path / 'c')
  data_speed.write_synthetic_corpus(prefix, 200, max_words=10)
  corpus = [
      '--config=configs/global_general.py:tiny',
      f'--config.data.name=text:{prefix}',
      '--config.data.vocab.kind=word',
      '--config.data.max_length=12',
  ]
  workdir = tmp_path / 'run'
  config = defaults.get_config('tiny')
  config.data.name = f'text:{prefix}'
  config.data.vocab.kind = 'word'
  config.data.max_length = 12
  train.prepare(config, str(workdir))  # --mode=prepare
  # writes the encoded cache, as training does
  data.load_task(validation.resolve(config).data, 0, str(workdir))
  before = sorted(os.listdir(workdir / 'data_cache'))
  assert before
  bench('data', *corpus, f'--data_workdir={workdir}', '--steps=2')
  assert sorted(os.listdir(workdir / 'data_cache')) == before


def test_a_chunked_loss_shrinks_the_memory_plan_of_a_step():
  config = defaults.get_config('tiny')
  config.train.batch_size = 32
  config.data.max_length = 20
  whole = bench_lib.bench_memory(config, vocab_size=4000)
  config.train.loss_chunk = 3
  chunked = bench_lib.bench_memory(config, vocab_size=4000)
  assert whole['logits_mb'] == pytest.approx(4 * 32 * 21 * 4000 / 2**20)
  assert whole['parameters'] == chunked['parameters']
  # At least one [B, T, V] array less (the logits and softmax of the whole).
  assert chunked['temp_mb'] < whole['temp_mb'] - whole['logits_mb']
  # The state is donated, as in training: the new one is written over it.
  for plan in (whole, chunked):
    assert plan['donated'] and plan['alias_mb'] > 0.9 * plan['outputs_mb']
    assert plan['peak_mb'] == pytest.approx(
        plan['temp_mb']
        + plan['arguments_mb']
        + plan['outputs_mb']
        - plan['alias_mb']
    )


def test_the_performance_page_pairs_runs_and_reports_the_median_ratio(
    tmp_path,
):
  for r, (ours, theirs) in enumerate([(1500.0, 1000.0), (2400.0, 1200.0)], 1):
    result = {
        'jax': '0.0',
        'this': {
            'tokens_per_sec': ours,
            'tokens_per_cpu_sec': ours,
            'padding_fraction': 0.18,
            'compile_s': 30.0,
        },
    }
    (tmp_path / f'train_L50_t1_r{r}.json').write_text(json.dumps(result))
    write_peer_train(tmp_path / f'peer_train_L50_t1_r{r}.json', theirs, 1.0)
  text = performance.page([str(tmp_path)])
  row = next(
      line
      for line in text.splitlines()
      if line.startswith('| training, target tok/s | 50 |')
  )
  # Pairs: 1.5 and 2.0 -> median 1.75, range 1.50 - 2.00.
  assert '**1.75 [1.50 - 2.00]**' in row
  # The summary at the top: the same pairs against the 1.25x aim.
  row = next(
      line
      for line in text.splitlines()
      if line.startswith('| training, copy L = 50, the defaults')
  )
  assert '| **1.75** [1.50 - 2.00] (2 pairs, 2 at the aim) |' in row
  # The levers and decoding were not run: no rows, no lever section.
  assert 'decoding greedy' not in text and 'Levers, each alone' not in text
  assert 'greedy decoding, copy L = 100' not in text


def test_the_performance_page_pairs_processes_of_a_process_lever(tmp_path):
  on, off = 'lever_keep_memory_on_r{r}.json', 'lever_keep_memory_off_r{r}.json'
  for r, (faster, slower) in enumerate([(1200.0, 1000.0), (900.0, 1000.0)], 1):
    for name, rate, kernel in ((on, faster, 0.0), (off, slower, 0.2)):
      this = {
          'tokens_per_sec': rate,
          'tokens_per_cpu_sec': 2 * rate,
          'kernel_cpu_fraction': kernel,
          'peak_rss_mb': 900.0,
      }
      path = tmp_path / name.format(r=r)
      path.write_text(json.dumps({'jax': '0.0', 'this': this}))
  text = performance.page([str(tmp_path)])
  row = next(line for line in text.splitlines() if 'malloc' in line)
  # on / off per pair: 1.2 and 0.9.
  assert 'x1.05 [0.90 - 1.20] target tok/s' in row, row
  assert 'x1.05 [0.90 - 1.20] per CPU s (2 pairs of processes)' in row, row
  assert 'kernel 0.0% vs 20.0%' in row, row
  row = next(
      line
      for line in text.splitlines()
      if line.startswith('| lever: glibc keeping freed memory')
  )
  assert '| x1.05 | `lever_keep_memory_{on,off}_r*.json` |' in row


def test_train_bench_warms_up_every_bucket_before_timing():
  """The warm-up ran the first --steps batches, which missed buckets (16
  fitted buckets in 10 steps): their slow first runs were timed."""
  config = defaults.get_config('tiny')
  config.data.max_length = 30
  config.data.bucketing, config.data.num_buckets = 'fitted', 4
  one = bench_lib.TrainBench(config, num_steps=1)
  stream = {one.batches.examples(s)[1] for s in range(200)}
  assert len(stream) > 2 and one.warm_lengths == sorted(stream)


def test_the_performance_page_compares_attention_kinds_per_pair(tmp_path):
  runs = lambda times: {
      'ms_per_sentence': sorted(times)[1],
      'ms_per_sentence_runs': times,
  }
  result = {
      'jax': '0.0',
      'config': {'attention': 'flexible'},
      'compare_config': {'attention': 'global'},
      # Repetition i of each kind alternate: a pair.
      'this': {'beam10': runs([10.0, 20.0, 10.0])},
      'other': {'beam10': runs([12.0, 18.0, 11.0])},
      'speedup': {'beam10': 12.0 / 10.0},
  }
  (tmp_path / 'kinds_flexible_L150.json').write_text(json.dumps(result))
  text = performance.page([str(tmp_path)])
  rows = [line for line in text.splitlines() if line.startswith('| (')]
  # global / flexible per pair: 1.2, 0.9, 1.1; no greedy run, no op counts.
  assert rows == [
      '| (d) flexible / global general, copy L = 150 | – | – | 10.0 / 12.0'
      ' | x1.10 [0.90 - 1.20] | – |'
  ]
  # The batches are stated: a file without sentences_per_batch predates it;
  # the footnotes of comparisons not measured are left out.
  notes = [line for line in text.splitlines() if line.startswith('- (')]
  assert len(notes) == 1 and notes[0].startswith(
      '- (d) beam search in batches of `decode.batch_size` hypotheses'
      ' (undated). 256 copy-task sentences'
  )
  result['date'] = '2026-11-26'
  for side in ('this', 'other'):
    result[side]['beam10']['sentences_per_batch'] = 64
  (tmp_path / 'kinds_flexible_L150.json').write_text(json.dumps(result))
  text = performance.page([str(tmp_path)])
  assert '- (d) 64 sentences per batch in every mode (2026-11-26).' in text
  result['other']['beam10']['sentences_per_batch'] = 6
  (tmp_path / 'kinds_flexible_L150.json').write_text(json.dumps(result))
  text = performance.page([str(tmp_path)])
  assert '- (d) 64 vs 6 sentences per batch (2026-11-26).' in text
  # The search loop is the largest loop of the decoder (the encoder's are
  # listed too).
  loops = lambda ops: [{'trip_count': 0, 'ops': n, 'dots': 1} for n in ops]
  result['this']['beam10']['loop_ops'] = loops([11, 11, 70])
  result['other']['beam10']['loop_ops'] = loops([11, 52, 12])
  (tmp_path / 'kinds_flexible_L150.json').write_text(json.dumps(result))
  text = performance.page([str(tmp_path)])
  assert '| x1.10 [0.90 - 1.20] | –; 70 / 52 |' in text


def test_the_performance_page_shows_a_gpu_run_by_wall_clock(tmp_path):
  cpu, gpu = tmp_path / 'cpu', tmp_path / 'gpu'
  for out, platform, device in ((cpu, 'cpu', 'cpu'), (gpu, 'gpu', 'H100')):
    out.mkdir()
    result = {
        'jax': '0.0',
        'platform': platform,
        'device': device,
        'this': {
            'tokens_per_sec': 3000.0,
            'tokens_per_cpu_sec': 1000.0,
            'padding_fraction': 0.18,
            'compile_s': 30.0,
        },
    }
    (out / 'train_L50_t1_r1.json').write_text(json.dumps(result))
    # The peer: 1,500 tok/s (wall) at 100% of a CPU.
    write_peer_train(out / 'peer_train_L50_t1_r1.json', 1500.0, 1.0)
    # CUDA graphs for the search loops, x2 (both directories hold the file).
    runs = lambda ms: {'ms_per_sentence': ms, 'ms_per_sentence_runs': [ms]}
    lever = dict(
        result,
        this={'greedy': runs(1.0)},
        other={'greedy': runs(2.0)},
        speedup={'greedy': 2.0},
    )
    (out / 'lever_cuda_graphs_decode.json').write_text(json.dumps(lever))
  text = performance.page([str(cpu), str(gpu)])
  sections = text.split('\n## ')
  cpu_section = next(s for s in sections if s.startswith('CPU: '))
  gpu_section = next(s for s in sections if s.startswith('GPU: H100'))
  row = lambda section: next(
      line for line in section.splitlines() if line.startswith('| training')
  )
  # CPU: per CPU second first (1000 / 1500); GPU: wall first (3000 / 1500).
  assert '**0.67**' in row(cpu_section)
  assert '**2.00**' in row(gpu_section) and '| 0.67 |' in row(gpu_section)
  assert 'ratio wall | ratio per host CPU s' in gpu_section
  assert f'Records: `{gpu}/`.' in gpu_section
  # The levers only a GPU can show are left out of a CPU's table.
  assert 'Levers, each alone' not in cpu_section
  assert '| search loops as CUDA graphs' in gpu_section
  # The summary: a column per directory, each by its own rate and aim.
  summary = next(s for s in sections if s.startswith('Summary'))
  assert ', per CPU s (`' in summary and 'GPU: H100, wall (`' in summary
  assert (
      '| **0.67** (1 pair, below the aim) | **2.00** (1 pair, at the aim) |'
      in summary
  )
  assert '| greedy x2.00 | greedy x2.00 |' in summary
  # Both directories name JAX 0.0, outside setup.cfg's pin.
  assert 'and GPU: H100 (JAX 0.0) were measured with a JAX outside' in text
  assert 'no accelerator was available' not in text
  assert 'no accelerator was available' in performance.page([str(cpu)])


def test_the_performance_page_template_leaves_out_what_is_not_there():
  template = (
      'Top {{a}}.\n\n{{empty}}\n\n## One\n\n| x | y |\n|---|---|\n'
      '| a | {{a}} |\n| b | {{none}} |\n| c | {{empty}} |\n\n'
      '- kept {{a}}\n- gone {{none}}\n- also gone {{empty}}\n\n'
      'Of {{empty}}.\n\n### Sub {{none}}\n\nGone.\n\n'
      '### Nothing measured\n\nGone.\n\n| x |\n|---|\n| {{none}} |\n\n'
      '## Two {{none}}\n\nGone.\n\n## Three\n\nKept {{a}}.\n'
  )
  values = {'a': '1', 'empty': '', 'none': None}
  # None: its table row or list item, or its section; '': its table row,
  # list item or paragraph; a table with no row left: its section.
  assert performance.fill(template, values.__getitem__) == (
      'Top 1.\n\n## One\n\n| x | y |\n|---|---|\n| a | 1 |\n\n'
      '- kept 1\n\n## Three\n\nKept 1.'
  )


def test_bench_startup_warm_runs_compile_nothing_new(tmp_path):
  out = tmp_path / 'startup.json'
  keep = tmp_path / 'runs'
  env = conftest.subprocess_env()
  # Store every program: one that compiles in about the threshold's time
  # could be left out cold and stored warm.
  env['JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS'] = '0'
  conftest.run_module(
      'benchmarks.bench',
      'startup',
      '--config=configs/global_general.py:tiny',
      # Greedy validation and evaluation share one compiled search.
      '--config.decode.beam_size=1',
      # One length bucket: one training step to compile.
      '--config.data.num_buckets=1',
      '--steps=2',
      '--repeats=1',
      f'--startup_dir={keep}',
      f'--json={out}',
      env=env,
  )
  result = json.loads(out.read_text())
  assert result['benchmark'] == 'startup' and result['date'] and result['cpu']
  cold, warm = result['this']['cold'], result['this']['warm']
  for phase in (cold, warm):
    assert 0 < phase['train_first_step_s'] <= phase['train_last_step_s']
    assert phase['train_last_step_s'] < phase['train_total_s']
    assert 0 < phase['translate_first_line_s'] <= phase['translate_total_s']
    assert phase['train_cpu_s'] > 0 and phase['translate_cpu_s'] > 0
  # The cold runs stored their programs; the warm ones found them all.
  assert cold['train_cache_files_added'] > 0
  assert cold['translate_cache_files_added'] > 0
  assert warm['train_cache_files_added'] == 0
  assert warm['translate_cache_files_added'] == 0
  # Each run trained in its own workdir, and translate printed a line.
  assert (keep / 'r1' / 'run_cold' / 'checkpoints').is_dir()
  assert (keep / 'r1' / 'run_warm' / 'checkpoints').is_dir()
  (line,) = (keep / 'r1' / 'translate_warm.log').read_text().splitlines()[-1:]
  assert 'error' not in line


def test_bench_startup_needs_a_sentence_for_a_real_corpus():
  config = defaults.get_config()
  config.data.name = 'text:/nowhere/corpus'
  with pytest.raises(errors.ConfigError, match='give --sentence='):
    startup.first_source(config)
  config.data.name = 'copy'
  sentence = startup.first_source(config)
  assert sentence and set(sentence.split()) <= set('abcdefghijklmnopqrst')


def test_the_performance_page_shows_cold_and_warm_startup(tmp_path):
  run = lambda first, files: {
      'imports_s': 1.0,
      'train_first_step_s': first,
      'train_last_step_s': 2 * first,
      'train_total_s': 3 * first,
      'train_cpu_s': first,
      'train_cache_files_added': files,
      'translate_first_line_s': first / 2,
      'translate_cpu_s': first / 2,
      'translate_cache_files_added': files,
  }
  result = {
      'jax': '0.0',
      'cpu': 'Some CPU, 2 cores',
      'date': '2026-01-02',
      'this': {
          'steps': 20,
          'cold_runs': [run(10.0, 12), run(12.0, 12)],
          'warm_runs': [run(4.0, 0), run(3.0, 0)],
      },
  }
  (tmp_path / 'startup_L50.json').write_text(json.dumps(result))
  for r, seconds in ((1, 13.0), (2, 15.0)):
    path = tmp_path / f'peer_train_L50_t1_r{r}.json'
    write_peer_train(path, 1000.0, 1.0)
    peer_run = json.loads(path.read_text())
    peer_run['summary']['first_step_start_after_s'] = seconds
    path.write_text(json.dumps(peer_run))
  text = performance.page([str(tmp_path)])
  assert 'Measured 2026-01-02 on Some CPU, 2 cores' in text
  # A part measured again on a later day: the page gives both days.
  (tmp_path / 'another_bench.json').write_text(
      json.dumps({'jax': '0.0', 'date': '2026-01-05'})
  )
  assert 'Measured 2026-01-02 to 2026-01-05 on' in performance.page(
      [str(tmp_path)]
  )
  assert 'OpenNMT-py, for scale: 14.0 [13.0 - 15.0] s from after' in text
  row = next(
      line for line in text.splitlines() if 'seconds to the first step' in line
  )
  # warm / cold per repetition: 0.4 and 0.25.
  assert row.endswith(
      '| 11.0 [10.0 - 12.0] | 3.5 [3.0 - 4.0] | 0.33 [0.25 - 0.40] |'
  ), row
  files = next(line for line in text.splitlines() if 'training: files' in line)
  assert files.endswith('| 12 | 0 | |'), files
  assert '| 1.0 [1.0 - 1.0] | 1.0 [1.0 - 1.0] | 1.00 [1.00 - 1.00] |' in text


def test_the_performance_page_is_what_its_kept_runs_say():
  runs = os.path.join(conftest.ROOT, 'benchmarks', 'runs')
  with open(os.path.join(conftest.ROOT, 'docs', 'performance.md')) as f:
    kept = f.read()
  # Rewrite it with:
  #   python -m benchmarks.performance benchmarks/runs/cpu \
  #     benchmarks/runs/gpu benchmarks/runs/gpu_h200
  outs = [os.path.join(runs, name) for name in ('cpu', 'gpu', 'gpu_h200')]
  assert performance.page(outs) == kept
