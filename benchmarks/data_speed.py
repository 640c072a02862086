"""Input-pipeline benchmark (the library of `benchmarks.bench data`).

Loading (read, encode, length-filter and write the encoded-corpus cache: the
first run; later runs map the cache) and the training iterator (Grain, the
batches of `steps` steps) in sentences/s, next to what training consumes
(`train_steps` timed steps of the same config) and their ratio. `synthetic`
writes a corpus shaped like WMT (Zipfian words, 1..max_length words per side)
for when the config's corpus is not available (no network).
"""

import os
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, Optional

import numpy as np

from benchmarks import train_speed
from nmt_jax import data
from nmt_jax.config import validation
from nmt_jax.data import batching
from nmt_jax.system import parallel
from nmt_jax.system import workdir_files


def write_synthetic_corpus(
    prefix: str,
    pairs: int,
    max_words: int,
    seed: int = 0,
    source_lang: str = 'de',
    target_lang: str = 'en',
):
  """<prefix>.{train,dev}.{src,tgt}: Zipfian pseudo-words, news-like lengths.

  Lengths: lognormal around 22 words, clipped to 1..max_words; the target is a
  noisy, slightly longer rewrite of the source (so BPE sees two languages).
  """
  rng = np.random.default_rng(seed)
  letters = np.array(list('abcdefghijklmnopqrstuvwxyz'))
  words = [
      ''.join(rng.choice(letters, size=rng.integers(2, 11)))
      for _ in range(50_000)
  ]
  zipf = 1.0 / np.arange(1, len(words) + 1) ** 1.05
  zipf /= zipf.sum()

  def sentences(lengths, shift):
    ids = rng.choice(len(words), size=int(lengths.sum()), p=zipf)
    pieces = np.split((ids + shift) % len(words), np.cumsum(lengths)[:-1])
    return [' '.join(words[i] for i in piece) for piece in pieces]

  for split, count in (('train', pairs), ('dev', min(3_000, pairs))):
    lengths = np.clip(
        rng.lognormal(3.0, 0.55, size=count).astype(int), 1, max_words
    )
    longer = np.clip(lengths + rng.integers(0, 3, size=count), 1, max_words)
    for lang, shift, side in (
        (source_lang, 0, lengths),
        (target_lang, 7, longer),
    ):
      with open(f'{prefix}.{split}.{lang}', 'w', encoding='utf-8') as f:
        f.write('\n'.join(sentences(side, shift)) + '\n')


def bench_data(
    config, synthetic: int, workdir: Optional[str], steps: int, train_steps: int
) -> Dict[str, Any]:
  """Input pipeline throughput (sentences/s) against training consumption."""
  config = validation.resolve(config)
  scratch = tempfile.mkdtemp(prefix='nmt_jax_bench_data_')
  try:
    if synthetic:
      start = time.perf_counter()
      write_synthetic_corpus(
          os.path.join(scratch, 'synthetic'),
          synthetic,
          config.data.max_length,
          config.seed,
          config.data.source_lang,
          config.data.target_lang,
      )
      config.data.name = f'text:{os.path.join(scratch, "synthetic")}'
      print(
          f'wrote a synthetic corpus of {synthetic:,} pairs in '
          f'{time.perf_counter() - start:.1f} s',
          file=sys.stderr,
      )
    # A scratch workdir, so that a real run's data cache is never touched;
    # a given workdir lends its vocabularies.
    own = os.path.join(scratch, 'workdir')
    if workdir and os.path.isdir(os.path.join(workdir, workdir_files.VOCAB)):
      shutil.copytree(
          os.path.join(workdir, workdir_files.VOCAB),
          os.path.join(own, workdir_files.VOCAB),
      )
    workdir = own
    vocab_s = cached_s = 0.0
    if config.data.name not in data.embedded.NAMES:
      start = time.perf_counter()
      # vocabularies
      data.load_task(config.data, config.seed, workdir, build_vocab=True)
      vocab_s = time.perf_counter() - start
      shutil.rmtree(
          os.path.join(workdir, workdir_files.DATA_CACHE), ignore_errors=True
      )
    start = time.perf_counter()
    # read, encode, filter, cache
    task = data.load_task(config.data, config.seed, workdir)
    load_s = time.perf_counter() - start
    if config.data.name not in data.embedded.NAMES:
      start = time.perf_counter()
      # the encoded cache, mapped
      task = data.load_task(config.data, config.seed, workdir)
      cached_s = time.perf_counter() - start
    pairs = (
        len(task.train) + len(task.eval) + (len(task.test) if task.test else 0)
    )
    mesh = parallel.make_mesh(config.parallel.mesh_shape)
    batches = batching.training_batches(task, config, mesh.devices.size)
    iterator = batching.train_iterator(batches, steps + 1)
    next(iterator)  # thread start-up and the first epoch's shuffle
    start = time.perf_counter()
    made = [next(iterator) for _ in range(steps)]
    iterate_s = time.perf_counter() - start
    sentences = sum(len(b['source']) for b in made)
    tokens = sum(int(np.sum(b['target_out'] != 0)) for b in made)
    padded = sum(b['target_out'].size for b in made)
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
        'bucket_lengths': list(batches.boundaries),
        # Target positions of the batches that are padding.
        'padding_fraction': 1 - tokens / padded,
        'peak_rss_mb': train_speed.peak_rss_mb(),
    }
    if train_steps:
      trained = train_speed.bench_train(config, train_steps, 1, workdir)
      consumed = result['sentences_per_batch'] / (trained['step_ms'] / 1000)
      result.update({
          'train_step_ms': trained['step_ms'],
          'train_sentences_per_sec': consumed,
          'train_tokens_per_sec': trained['tokens_per_sec'],
          'pipeline_over_training': (
              result['pipeline_sentences_per_sec'] / consumed
          ),
      })
    return result
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
