"""Speed and memory benchmarks (SPEC §8). Prints a table and writes JSON.

  python -m nmt_jax.bench train --config=configs/global_general.py:copy50 --threads=1 --json=t.json
  python -m nmt_jax.bench decode --config=configs/memory_k64.py:copy200 \
      --compare=configs/global_concat.py:copy200 --json=d.json

train:  steady-state target tokens/s (real, non-PAD tokens), compile time,
        peak RSS, and the step's dense GFLOP/s next to XLA's rate on a plain
        [128, 768] x [768, 1024] matmul at the same thread count.
decode: ms per sentence and sentences/s over the evaluation split (1,000
        sentences for the copy task) for greedy, beam (decode.beam_size) and
        teacher-forced decoding, and the average attention window.
data:   the input pipeline: loading (read, encode, length filter and write the
        encoded-corpus cache: the first run; later runs map the cache) and the
        training iterator (Grain, the batches of --steps steps) in
        sentences/s, next to what training consumes (--train_steps timed
        steps of the same config) and their ratio. --synthetic=N writes an
        N-pair corpus shaped like WMT (Zipfian words, 1..max_length words per
        side) when the config's corpus is not available (no network):

  python -m nmt_jax.bench data --config=configs/memory_k64_pe.py:wmt17_de_en \
      --synthetic=100000 --json=data.json
--compare runs a second config in the same process, alternating repetitions,
and adds `speedup` = other's time / this config's time for each figure.

Without --workdir, decoding uses random weights whose EOS logit is suppressed
until each sentence's reference length (ratio 1, offset 0): every hypothesis
runs exactly as many steps as a perfect copy model's, which is what the cost
depends on. With --workdir, the workdir's best checkpoint decodes as configured.
"""

import functools
import json
import os
import resource
import statistics
import sys
import time
from typing import Any, Dict, Optional

from absl import app
from absl import flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Config to benchmark.', lock_config=True)
_COMPARE = config_flags.DEFINE_config_file('compare', None, 'Config to compare against.',
                                           lock_config=True)
_JSON = flags.DEFINE_string('json', None, 'Write the results to this JSON file.')
_THREADS = flags.DEFINE_integer('threads', None, 'CPU threads (pins the process to that many '
                                'cores); default: all.')
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed repetitions (the median is reported).')
_STEPS = flags.DEFINE_integer('steps', 10, 'train: timed steps per repetition.')
_WORKDIR = flags.DEFINE_string('workdir', None, 'decode: use this workdir\'s best checkpoint.')
_MODES = flags.DEFINE_list('modes', 'greedy,beam,forced', 'decode: modes to time.')
_NUM_SENTENCES = flags.DEFINE_integer('num_sentences', None, 'decode: sentences (default: all).')
_SYNTHETIC = flags.DEFINE_integer('synthetic', 0, 'data: write and use a synthetic corpus of '
                                  'this many pairs (0: the config\'s corpus).')
_DATA_WORKDIR = flags.DEFINE_string('data_workdir', None, 'data: workdir holding the corpus\'s '
                                    'vocabularies (real corpora; default: a temporary one).')
_TRAIN_STEPS = flags.DEFINE_integer('train_steps', 10, 'data: timed training steps (0: skip).')


def pin_threads(threads: Optional[int]):
  """Restricts this process (and XLA's thread pool) to `threads` cores; call before JAX starts."""
  if not threads:
    return
  cores = sorted(os.sched_getaffinity(0))
  if threads > len(cores):
    raise app.UsageError(f'--threads={threads} but only {len(cores)} cores are available')
  # XLA:CPU sizes its thread pool from the affinity mask.
  os.sched_setaffinity(0, set(cores[:threads]))
  if threads == 1:
    os.environ['XLA_FLAGS'] = ' '.join([os.environ.get('XLA_FLAGS', ''),
                                        '--xla_cpu_multi_thread_eigen=false']).strip()


def peak_rss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def matmul_gflops() -> float:
  """XLA's fp32 rate on the decoder gate matmul [128, 768] x [768, 1024] (input feeding)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  a = jax.random.normal(jax.random.key(0), (128, 768))
  b = jax.random.normal(jax.random.key(1), (768, 1024))
  count = 50

  @jax.jit
  def loop(a, b):
    # Each product depends on the last, so XLA cannot drop or merge iterations.
    body = lambda _, c: c + (a + c[0, 0] * 1e-9) @ b
    return jax.lax.fori_loop(0, count, body, jnp.zeros((128, 1024)))

  loop(a, b).block_until_ready()
  times = []
  for _ in range(3):
    start = time.perf_counter()
    loop(a, b).block_until_ready()
    times.append(time.perf_counter() - start)
  return 2 * 128 * 768 * 1024 * count / min(times) / 1e9


def dense_flops(model_config, batch: int, source_len: int, target_len: int, vocab: int) -> float:
  """Forward matmul FLOPs of one padded batch (elementwise work not counted)."""
  m = model_config
  h, e = m.hidden_size, m.embed_size
  flops, width = 0.0, e
  for layer in range(m.num_encoder_layers):
    bi = m.bidirectional == 'all' or (m.bidirectional == 'bottom' and layer == 0)
    units, directions = (h // 2, 2) if bi else (h, 1)
    flops += directions * 2 * (width + units) * 4 * units * source_len
    width = h
  per_step = 2 * e * 4 * h + 2 * h * vocab                         # input projection, softmax
  kind, score = m.attention.kind, m.attention.score
  attends = kind != 'none'
  extra = (h if attends and m.input_feeding else 0) + (h if attends and m.query == 'previous' else 0)
  per_step += 2 * (extra + h) * 4 * h + (m.num_decoder_layers - 1) * 2 * 2 * h * 4 * h
  if m.output_hidden_size:
    per_step += 2 * h * m.output_hidden_size + 2 * (m.output_hidden_size - h) * vocab
  if attends:
    per_step += 2 * 2 * h * h                                      # W_c [c; h]
    if kind == 'memory':
      k = m.attention.num_memory
      flops += 2 * h * k * source_len + 2 * k * source_len * h     # alpha, C
      per_step += 2 * h * k + 2 * k * h                            # beta, context
    else:
      per_step += 2 * 2 * source_len * h                           # scores + context (dense bound)
      if score in ('general', 'concat'):
        flops += 2 * h * h * source_len                            # keys, once per sentence
      if score == 'concat':
        per_step += 2 * h * h + 2 * source_len * h
      if score == 'location':
        per_step += 2 * h * m.attention.max_source_length
  return batch * (flops + per_step * target_len)


# ----------------------------------------------------------------- train


def bench_train(config, steps: int, repeats: int, workdir: Optional[str] = None) -> Dict[str, Any]:
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from nmt_jax import data, parallel, train  # pylint: disable=g-import-not-at-top
  config, task, boundaries, batches, model, optimizer, _, mesh, state = train.build(config, workdir)
  step_fn = jax.jit(functools.partial(train.train_step, model=model, optimizer=optimizer,
                                      config=config), donate_argnums=0)
  # Compile every bucket shape ahead of time.
  start = time.perf_counter()
  compiled = {}
  for length, rows in zip(boundaries, batches.sizes):
    sample = parallel.shard_batch(data.dummy_batch(rows, length), mesh)
    compiled[length] = step_fn.lower(state, sample).compile()
  compile_s = time.perf_counter() - start

  def run(first_step):
    nonlocal state
    host = [batches.batch(s) for s in range(first_step, first_step + steps)]
    device = [parallel.shard_batch(b, mesh) for b in host]
    start = time.perf_counter()
    for batch in device:
      state, metrics = compiled[batch['source'].shape[1]](state, batch)
    jax.block_until_ready(metrics)
    seconds = time.perf_counter() - start
    real = sum(int(np.sum(b['target_out'] != 0)) for b in host)
    padded = sum(b['target_out'].size for b in host)
    flops = 3 * sum(dense_flops(config.model, b['source'].shape[0], b['source'].shape[1],
                                b['target_out'].shape[1], len(task.target_vocab)) for b in host)
    return seconds, real, padded, flops

  run(0)   # warm-up: first execution of each shape
  results = [run((r + 1) * steps) for r in range(repeats)]
  seconds = [r[0] for r in results]
  best = results[int(np.argsort(seconds)[len(seconds) // 2])]   # median repetition
  rate = matmul_gflops()
  gflops = best[3] / best[0] / 1e9
  return {
      'tokens_per_sec': best[1] / best[0],
      'padded_tokens_per_sec': best[2] / best[0],
      'step_ms': 1000 * best[0] / steps,
      'compile_s': compile_s,
      'compile_buckets': len(boundaries),
      'peak_rss_mb': peak_rss_mb(),
      'dense_gflops_per_sec': gflops,
      'matmul_gflops_per_sec': rate,
      'fraction_of_matmul_rate': gflops / rate,
      'tokens_per_sec_runs': [r[1] / r[0] for r in results],
  }


# ----------------------------------------------------------------- data


def write_synthetic_corpus(prefix: str, pairs: int, max_words: int, seed: int = 0,
                           source_lang: str = 'de', target_lang: str = 'en'):
  """<prefix>.{train,dev}.{src,tgt}: Zipfian pseudo-words, lengths like news text.

  Lengths: lognormal around 22 words, clipped to 1..max_words; the target is a
  noisy, slightly longer rewrite of the source (so BPE sees two languages).
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  letters = np.array(list('abcdefghijklmnopqrstuvwxyz'))
  words = [''.join(rng.choice(letters, size=rng.integers(2, 11))) for _ in range(50_000)]
  zipf = 1.0 / np.arange(1, len(words) + 1) ** 1.05
  zipf /= zipf.sum()

  def sentences(lengths, shift):
    ids = rng.choice(len(words), size=int(lengths.sum()), p=zipf)
    pieces = np.split((ids + shift) % len(words), np.cumsum(lengths)[:-1])
    return [' '.join(words[i] for i in piece) for piece in pieces]

  for split, count in (('train', pairs), ('dev', min(3_000, pairs))):
    lengths = np.clip(rng.lognormal(3.0, 0.55, size=count).astype(int), 1, max_words)
    longer = np.clip(lengths + rng.integers(0, 3, size=count), 1, max_words)
    for lang, shift, side in ((source_lang, 0, lengths), (target_lang, 7, longer)):
      with open(f'{prefix}.{split}.{lang}', 'w', encoding='utf-8') as f:
        f.write('\n'.join(sentences(side, shift)) + '\n')


def bench_data(config, synthetic: int, workdir: Optional[str], steps: int,
               train_steps: int) -> Dict[str, Any]:
  """Input pipeline throughput (sentences/s) against training consumption."""
  import shutil  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from nmt_jax import data, default_config, parallel  # pylint: disable=g-import-not-at-top
  config = default_config.validate(config)
  scratch = tempfile.mkdtemp(prefix='nmt_jax_bench_data_')
  try:
    config.unlock()
    if synthetic:
      start = time.perf_counter()
      write_synthetic_corpus(os.path.join(scratch, 'synthetic'), synthetic,
                             config.data.max_length, config.seed,
                             config.data.source_lang, config.data.target_lang)
      config.data.name = f'text:{os.path.join(scratch, "synthetic")}'
      print(f'wrote a synthetic corpus of {synthetic:,} pairs in '
            f'{time.perf_counter() - start:.1f} s', file=sys.stderr)
    config.lock()
    workdir = workdir or os.path.join(scratch, 'workdir')
    from nmt_jax import corpus  # pylint: disable=g-import-not-at-top
    vocab_s = cached_s = 0.0
    if config.data.name not in data.EMBEDDED_TASKS:
      start = time.perf_counter()
      data.load_task(config.data, config.seed, workdir, build_vocab=True)   # vocabularies
      vocab_s = time.perf_counter() - start
      shutil.rmtree(os.path.join(workdir, corpus.CACHE_DIR), ignore_errors=True)
    start = time.perf_counter()
    task = data.load_task(config.data, config.seed, workdir)    # read, encode, filter, cache
    load_s = time.perf_counter() - start
    if config.data.name not in data.EMBEDDED_TASKS:
      start = time.perf_counter()
      task = data.load_task(config.data, config.seed, workdir)  # the encoded cache, mapped
      cached_s = time.perf_counter() - start
    pairs = len(task.train) + len(task.eval) + (len(task.test) if task.test else 0)
    boundaries = data.bucket_boundaries(task.max_length, config.data.num_buckets)
    mesh = parallel.make_mesh(config.parallel.mesh_shape)
    sizes = data.batch_sizes(boundaries, config.train.batch_size, config.data.batch_tokens,
                             mesh.devices.size)
    batches = data.TrainBatches(task.train, sizes, boundaries, config.seed)
    iterator = data.train_iterator(batches, steps + 1)
    next(iterator)                              # thread start-up and the first epoch's shuffle
    start = time.perf_counter()
    made = [next(iterator) for _ in range(steps)]
    iterate_s = time.perf_counter() - start
    sentences = sum(len(b['source']) for b in made)
    tokens = sum(int(np.sum(b['target_out'] != 0)) for b in made)
    result = {
        'corpus': 'synthetic' if synthetic else config.data.name,
        'train_pairs': len(task.train),
        'vocab_build_s': vocab_s,
        'load_s': load_s,
        'load_sentences_per_sec': pairs / load_s,
        'cached_load_s': cached_s,
        'pipeline_steps': steps,
        'pipeline_sentences_per_sec': sentences / iterate_s,
        'pipeline_tokens_per_sec': tokens / iterate_s,
        'pipeline_ms_per_batch': 1000 * iterate_s / steps,
        'sentences_per_batch': sentences / steps,
        'peak_rss_mb': peak_rss_mb(),
    }
    if train_steps:
      trained = bench_train(config, train_steps, 1, workdir)
      consumed = result['sentences_per_batch'] / (trained['step_ms'] / 1000)
      result.update({'train_step_ms': trained['step_ms'],
                     'train_sentences_per_sec': consumed,
                     'train_tokens_per_sec': trained['tokens_per_sec'],
                     'pipeline_over_training': result['pipeline_sentences_per_sec'] / consumed})
    return result
  finally:
    shutil.rmtree(scratch, ignore_errors=True)


# ----------------------------------------------------------------- decode


class DecodeBench:
  """One config's decoders over the evaluation split; `time(mode)` runs it once."""

  def __init__(self, config, workdir: Optional[str], num_sentences: Optional[int]):
    import jax  # pylint: disable=g-import-not-at-top
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    from nmt_jax import data, default_config, parallel, train  # pylint: disable=g-import-not-at-top
    from nmt_jax.vocab import EOS  # pylint: disable=g-import-not-at-top
    config = default_config.validate(config)
    if workdir:
      config, task, model, mesh, params, _ = train.restore_for_inference(config, workdir)
      self.weights = f'best checkpoint of {workdir}'
    else:
      config.unlock()
      config.decode.max_length_ratio, config.decode.max_length_offset = 1.0, 0
      config.lock()
      task = data.load_task(config.data, config.seed)
      model = train.create_model(config, task)
      mesh = parallel.make_mesh()
      sample = data.dummy_batch(1, 1)
      params = model.init(jax.random.key(config.seed), sample['source'], sample['target_in'])['params']
      bias = params['decoder']['output']['bias']
      params['decoder']['output']['bias'] = bias.at[EOS].set(-1e4)
      self.weights = 'random; EOS suppressed until the reference length'
    self.config, self.task, self.model, self.mesh, self.params = config, task, model, mesh, params
    self.evaluator = train.Evaluator(config, model, task, mesh)
    self.limit = num_sentences
    self._forced = jax.jit(lambda p, s, t: self._forced_fn(p, s, t))
    self._forced_batches = None
    self._jnp = jnp

  def _forced_fn(self, params, source, target_in):
    from nmt_jax import decode  # pylint: disable=g-import-not-at-top
    return decode.forced_decode(self.model, params, source, target_in)

  def beam_size(self, mode):
    return {'greedy': 1, 'beam': self.config.decode.beam_size}.get(mode)

  def time(self, mode: str) -> Dict[str, float]:
    """One pass over the split -> ms_per_sentence, sentences_per_sec, avg_window, compile_s."""
    if mode == 'forced':
      return self._time_forced()
    _, info = self.evaluator.translate(self.params, self.task.eval, self.beam_size(mode), self.limit)
    count = min(self.limit or len(self.task.eval), len(self.task.eval))
    seconds = info['decode_ms_per_sentence'] * count / 1000
    return {'ms_per_sentence': info['decode_ms_per_sentence'], 'sentences_per_sec': count / seconds,
            'avg_window': info['avg_window'], 'avg_window_fraction': info['avg_window_fraction'],
            'compile_s': info['decode_compile_seconds']}

  def _time_forced(self):
    import jax  # pylint: disable=g-import-not-at-top
    import numpy as np  # pylint: disable=g-import-not-at-top
    from nmt_jax import data, parallel  # pylint: disable=g-import-not-at-top
    if self._forced_batches is None:
      size = self.evaluator.decode_batch_size(1)
      batches = list(data.eval_batches(self.task.eval, size, self.evaluator.boundaries, self.limit))
      self._forced_batches = [parallel.shard_batch(b, self.mesh) for _, b in batches]
      self._forced_rows = sum(int(np.sum(rows >= 0)) for rows, _ in batches)
      start = time.perf_counter()
      self._forced_exe = {}
      for b in self._forced_batches:
        key = b['source'].shape
        if key not in self._forced_exe:
          self._forced_exe[key] = self._forced.lower(self.params, b['source'], b['target_in']).compile()
      self._forced_compile = time.perf_counter() - start
    start = time.perf_counter()
    outs = [self._forced_exe[b['source'].shape](self.params, b['source'], b['target_in'])
            for b in self._forced_batches]
    outs = jax.device_get(outs)
    seconds = time.perf_counter() - start
    window = sum(float(o.window_sum.sum()) for o in outs)
    count = sum(float(o.window_count.sum()) for o in outs)
    return {'ms_per_sentence': 1000 * seconds / self._forced_rows,
            'sentences_per_sec': self._forced_rows / seconds,
            'avg_window': window / max(count, 1.0), 'compile_s': self._forced_compile}


def bench_decode(config, compare, workdir, modes, repeats, num_sentences) -> Dict[str, Any]:
  benches = {'this': DecodeBench(config, workdir, num_sentences)}
  if compare is not None:
    benches['other'] = DecodeBench(compare, None, num_sentences)
  runs = {name: {mode: [] for mode in modes} for name in benches}
  compile_s = {}
  for name, bench in benches.items():      # warm-up: compile every shape, first execution
    for mode in modes:
      compile_s[name, mode] = bench.time(mode)['compile_s']
  for _ in range(repeats):                 # alternate configs so both see the same machine state
    for mode in modes:
      for name, bench in benches.items():
        runs[name][mode].append(bench.time(mode))
  result = {}
  for name, bench in benches.items():
    result[name] = {'weights': bench.weights}
    for mode in modes:
      label = f'beam{bench.beam_size(mode)}' if mode == 'beam' else mode
      ms = [r['ms_per_sentence'] for r in runs[name][mode]]
      median = runs[name][mode][ms.index(statistics.median_low(ms))]
      result[name][label] = dict(median, ms_per_sentence_runs=ms, compile_s=compile_s[name, mode])
  if compare is not None:
    result['speedup'] = {}
    for label, this in result['this'].items():
      other = result['other'].get(label)
      if isinstance(this, dict) and isinstance(other, dict):
        result['speedup'][label] = other['ms_per_sentence'] / this['ms_per_sentence']
  result['peak_rss_mb'] = peak_rss_mb()
  return result


# ----------------------------------------------------------------- CLI


def describe(config) -> Dict[str, Any]:
  m = config.model
  return {'attention': m.attention.kind, 'score': m.attention.score,
          'num_memory': m.attention.num_memory, 'hidden_size': m.hidden_size,
          'embed_size': m.embed_size, 'layers': [m.num_encoder_layers, m.num_decoder_layers],
          'max_length': config.data.max_length, 'batch_size': config.train.batch_size,
          'beam_size': config.decode.beam_size}


def print_table(result: Dict[str, Any]):
  for section, values in result.items():
    if isinstance(values, dict):
      print(f'[{section}]')
      for key, value in values.items():
        if isinstance(value, dict):
          shown = ', '.join(f'{k} {v:,.2f}' for k, v in value.items() if isinstance(v, float))
          print(f'  {key:<10} {shown}')
        elif isinstance(value, float):
          print(f'  {key:<28} {value:,.3f}')
        else:
          print(f'  {key:<28} {value}')
    else:
      print(f'{section:<30} {values}')


def main(argv):
  if len(argv) != 2 or argv[1] not in ('train', 'decode', 'data'):
    raise app.UsageError('usage: python -m nmt_jax.bench train|decode|data --config=... '
                         '[--json=PATH]')
  pin_threads(_THREADS.value)
  import logging as std_logging  # pylint: disable=g-import-not-at-top
  from nmt_jax import writers  # pylint: disable=g-import-not-at-top
  std_logging.getLogger('absl').addFilter(writers.QuietLibraries())
  import jax  # pylint: disable=g-import-not-at-top  (after pinning threads)
  from nmt_jax import errors  # pylint: disable=g-import-not-at-top
  try:
    config = _CONFIG.value
    compare = _COMPARE.value if _COMPARE.present else None
    result = {'benchmark': argv[1], 'threads': _THREADS.value or len(os.sched_getaffinity(0)),
              'device': str(jax.devices()[0].device_kind), 'jax': jax.__version__,
              'config': describe(config)}
    if argv[1] == 'train':
      result['this'] = bench_train(config, _STEPS.value, _REPEATS.value)
      if compare is not None:
        result['other'] = bench_train(compare, _STEPS.value, _REPEATS.value)
        result['compare_config'] = describe(compare)
        result['speedup'] = {'tokens_per_sec': result['this']['tokens_per_sec'] /
                                               result['other']['tokens_per_sec']}
    elif argv[1] == 'data':
      result['this'] = bench_data(config, _SYNTHETIC.value, _DATA_WORKDIR.value, _STEPS.value,
                                  _TRAIN_STEPS.value)
    else:
      result.update(bench_decode(config, compare, _WORKDIR.value, _MODES.value, _REPEATS.value,
                                 _NUM_SENTENCES.value))
      if compare is not None:
        result['compare_config'] = describe(compare)
  except errors.UserError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
  print_table(result)
  if _JSON.value:
    with open(_JSON.value, 'w') as f:
      json.dump(result, f, indent=2)
      f.write('\n')


if __name__ == '__main__':
  flags.mark_flags_as_required(['config'])
  app.run(main)
