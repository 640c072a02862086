"""Decoding speed over the evaluation split, for `benchmarks.bench decode`.

ms per sentence, sentences/s and output tokens/s (the best hypotheses'
tokens, EOS not counted) for greedy, beam (decode.beam_size) and
teacher-forced decoding, the average attention window, and the operations
one step of the search loop runs (`loop_ops`, from the optimized HLO of the
longest batch's decoder: on a GPU, the kernels each step launches).

Without a workdir, decoding uses random weights whose EOS logit is suppressed
until each sentence's reference length (ratio 1, offset 0): every hypothesis
runs exactly as many steps as a perfect copy model's, which is what the cost
depends on. With a workdir, its best checkpoint decodes as configured.

Each search mode also reports a floor under its time
(benchmarks/product_floor.py): the matrix products of one step of the
search loop of a full batch, each timed alone, times the loop steps a
sentence needs (`product_floor_ms_per_sentence`, and
`fraction_of_product_floor`, the floor over the measured time).

Each search mode also records a digest of the texts it decoded
(`outputs_sha1`); with `--compare`, `same_outputs` says per mode whether the
two configs decoded the same texts: a speed lever that must not change the
search (compiler options, tables, unrolling) shows it there, where two
models with the same weights (same seed and shapes) are compared.

decode.batch_size counts hypotheses (beam search decodes batch_size //
beam_size sentences at a time); `sentences_per_batch` decodes that many
sentences per batch in every mode instead, as toolkits that batch sentences
whatever the beam do (OpenNMT-py's `-batch_size N -batch_type sents`).
"""

import functools
import hashlib
import statistics
from typing import Any, Dict, Optional

import jax
import numpy as np

from benchmarks import hlo
from benchmarks import product_floor
from benchmarks import train_speed
from nmt_jax import data
from nmt_jax.config import validation
from nmt_jax.data import batching
from nmt_jax.data.vocab import EOS
from nmt_jax.data.vocab import PAD
from nmt_jax.decoding import evaluation
from nmt_jax.decoding import loop
from nmt_jax.decoding import restore
from nmt_jax.decoding import search
from nmt_jax.model import seq2seq
from nmt_jax.system import errors
from nmt_jax.system import parallel
from nmt_jax.system import timing


class DecodeBench:
  """One config's decoders over the evaluation split.

  `time(mode)` makes one pass over the split.
  """

  def __init__(
      self,
      config,
      workdir: Optional[str],
      num_sentences: Optional[int],
      sentences_per_batch: Optional[int] = None,
      data_workdir: Optional[str] = None,
  ):
    if sentences_per_batch is not None and sentences_per_batch < 1:
      raise errors.ConfigError(
          f'--sentences_per_batch={sentences_per_batch}: give at least 1'
      )
    config = validation.resolve(config)
    if workdir:
      task, model, mesh, params, _ = restore.restore_for_inference(
          config, workdir
      )
      self.weights = f'best checkpoint of {workdir}'
    else:
      config.decode.max_length_ratio, config.decode.max_length_offset = 1.0, 0
      task = data.load_task(config.data, config.seed, data_workdir)
      model = seq2seq.create_model(config, task)
      mesh = parallel.make_mesh()
      sample = batching.dummy_batch(1, 1)
      params = model.init(
          jax.random.key(config.seed), sample['source'], sample['target_in']
      )['params']
      bias = params['decoder']['output']['bias']
      params['decoder']['output']['bias'] = bias.at[EOS].set(-1e4)
      self.weights = 'random; EOS suppressed until the reference length'
    self.config, self.task, self.model = config, task, model
    self.mesh, self.params = mesh, params
    self.evaluator = evaluation.Evaluator(config, model, task, mesh)
    self.limit = num_sentences
    self.sentences_per_batch = sentences_per_batch
    self._evaluators = {}
    self._loop_ops = {}
    self._floors = {}  # mode -> (step floor, sentences per batch)
    self._product_seconds = {}  # product_floor.Product -> seconds alone
    # (compiled, calls, real rows, source lengths, compile seconds)
    self._forced = None

  def evaluator_for(self, beam_size: int) -> evaluation.Evaluator:
    """The evaluator decoding with `beam_size`: the config's, or with
    `sentences_per_batch` one whose decode.batch_size is that many
    sentences' hypotheses."""
    if self.sentences_per_batch is None:
      return self.evaluator
    if beam_size not in self._evaluators:
      config = self.config.copy_and_resolve_references()
      config.decode.batch_size = self.sentences_per_batch * beam_size
      self._evaluators[beam_size] = evaluation.Evaluator(
          config, self.model, self.task, self.mesh
      )
    return self._evaluators[beam_size]

  def beam_size(self, mode):
    return {'greedy': 1, 'beam': self.config.decode.beam_size}.get(mode)

  def time(self, mode: str) -> Dict[str, float]:
    """One pass over the split.

    Returns ms_per_sentence, sentences_per_sec, avg_window, compile_s,
    sentences_per_batch and (greedy and beam) loop_ops.
    """
    if mode == 'forced':
      return self._time_forced()
    beam_size = self.beam_size(mode)
    evaluator = self.evaluator_for(beam_size)
    decoded = evaluator.decode(
        self.params, self.task.eval, beam_size, self.limit
    )
    texts, info = decoded.texts, decoded.info
    # Tokens of the best hypotheses (EOS not counted): the work done, where
    # another toolkit's runs are longer or shorter.
    tokens = sum(len(n[0].ids) for n in decoded.nbest) / max(len(texts), 1)
    if mode not in self._loop_ops:  # HLO text is slow to print: once per mode
      executables = evaluator.executables[beam_size]
      # The longest batch: its source, the last argument, is the longest.
      longest = max(executables, key=lambda key: key[-1][0][-1])
      self._loop_ops[mode] = hlo.loop_ops(executables[longest].as_text())
      # The floor's step: the longest of the batches with the most rows
      # (sentences over the last bucket come in batches of their own).
      shape, dtype = max(executables, key=lambda key: key[-1][0])[-1]
      source = jax.ShapeDtypeStruct(shape, dtype)
      self._floors[mode] = self._step_floor(beam_size, source), shape[0]
    floor, rows = self._floors[mode]
    # An iteration of the loop runs decode.unroll steps; a sentence needs
    # avg_steps / beam_size of them (a step runs all its beam's rows).
    step_ms = floor['step_ms'] / self.config.decode.unroll
    floor_ms = step_ms / rows * info['avg_steps'] / beam_size
    return {
        'ms_per_sentence': info['decode_ms_per_sentence'],
        'sentences_per_sec': 1000 / info['decode_ms_per_sentence'],
        'sentences_per_cpu_sec': 1000 / info['decode_cpu_ms_per_sentence'],
        'output_tokens_per_sentence': tokens,
        'output_tokens_per_sec': tokens * 1000 / info['decode_ms_per_sentence'],
        'output_tokens_per_cpu_sec': (
            tokens * 1000 / info['decode_cpu_ms_per_sentence']
        ),
        'avg_window': info['avg_window'],
        'avg_window_fraction': info['avg_window_fraction'],
        'avg_computed': info['avg_computed'],
        'compile_s': info['decode_compile_seconds'],
        'sentences_per_batch': evaluator.decode_batch_size(beam_size),
        'loop_ops': self._loop_ops[mode],
        'outputs_sha1': hashlib.sha1('\n'.join(texts).encode()).hexdigest(),
        'product_floor_ms_per_sentence': floor_ms,
        'product_floor_output_tokens_per_sec': tokens * 1000 / floor_ms,
        'fraction_of_product_floor': floor_ms / info['decode_ms_per_sentence'],
        'product_floor': dict(
            floor,
            sentences_per_batch=rows,
            steps_per_iteration=self.config.decode.unroll,
        ),
    }

  def _step_floor(self, beam_size: int, source: jax.ShapeDtypeStruct):
    """product_floor.step_floor of one search step on a [rows, length]
    source batch (the products read from the decoder's jaxpr)."""
    decode = search.make_decode_fn(
        self.evaluator.scorer, self.config.decode, beam_size
    )
    products = product_floor.loop_products(decode, self.params, source)
    return product_floor.step_floor(products, self._product_seconds)

  def _time_forced(self):
    size = self.evaluator_for(1).decode_batch_size(1)
    if self._forced is None:
      split, boundaries = self.task.eval, self.evaluator.boundaries
      eval_batches = list(
          batching.eval_batches(
              split,
              size,
              boundaries,
              self.limit,
              row_multiple=self.mesh.devices.size,
          )
      )
      device = [parallel.shard_batch(b, self.mesh) for _, b in eval_batches]
      real = [rows >= 0 for rows, _ in eval_batches]
      lengths = np.concatenate([
          np.sum(b['source'] != PAD, 1)[r]
          for r, (_, b) in zip(real, eval_batches)
      ])
      forced = jax.jit(
          functools.partial(search.forced_decode, self.model),
          compiler_options=self.evaluator.compiler_options,
      )
      calls = [(self.params, b['source'], b['target_in']) for b in device]
      compiled, compile_s = timing.compile_by_shape(forced, calls, warm=False)
      self._forced = (compiled, calls, real, lengths, compile_s)
    compiled, calls, real, lengths, compile_s = self._forced
    outs, seconds, cpu_seconds = timing.timed_with_cpu(
        lambda: jax.device_get([compiled(*args) for args in calls])
    )
    windows = loop.Windows(*(
        np.concatenate([x[r] for x, r in zip(field, real)])
        for field in zip(*(o.windows for o in outs))
    ))
    window = evaluation.window_metrics(windows, lengths)
    return {
        'ms_per_sentence': 1000 * seconds / len(lengths),
        'sentences_per_sec': len(lengths) / seconds,
        'sentences_per_cpu_sec': len(lengths) / cpu_seconds,
        'avg_window': window['avg_window'],
        'avg_computed': window['avg_computed'],
        'compile_s': compile_s,
        'sentences_per_batch': size,
    }


def time_alternating(
    benches: Dict[str, DecodeBench], modes, repeats: int
) -> Dict[str, Dict[str, Any]]:
  """Times each bench in each mode, `repeats` rounds alternating the benches.

  Returns {name: {'weights', label: median repetition + ms_per_sentence_runs
  and compile_s}}, label 'greedy', 'beamK' or 'forced'; repetition i of
  every bench ran in the same round, so runs pair up by index.
  """
  runs = {name: {mode: [] for mode in modes} for name in benches}
  compile_s = {}
  for name, one in benches.items():  # warm-up: compile every shape, run once
    for mode in modes:
      compile_s[name, mode] = one.time(mode)['compile_s']
  for _ in range(repeats):  # alternate configs: both see the same machine state
    for mode in modes:
      for name, one in benches.items():
        runs[name][mode].append(one.time(mode))
  result = {}
  for name, one in benches.items():
    result[name] = {'weights': one.weights}
    for mode in modes:
      label = f'beam{one.beam_size(mode)}' if mode == 'beam' else mode
      ms = [r['ms_per_sentence'] for r in runs[name][mode]]
      median = runs[name][mode][ms.index(statistics.median_low(ms))]
      result[name][label] = dict(
          median,
          ms_per_sentence_runs=ms,
          cpu_ms_per_sentence_runs=[
              1000 / r['sentences_per_cpu_sec'] for r in runs[name][mode]
          ],
          compile_s=compile_s[name, mode],
      )
  return result


def bench_decode(
    config,
    compare,
    workdir,
    modes,
    repeats,
    num_sentences,
    sentences_per_batch=None,
    data_workdir=None,
) -> Dict[str, Any]:
  """Decoding speed of `config` (and of `compare`, alternating repetitions)."""
  batching_args = (num_sentences, sentences_per_batch, data_workdir)
  benches = {'this': DecodeBench(config, workdir, *batching_args)}
  if compare is not None:
    # The same weights on both sides: with a workdir, --compare may change
    # how it decodes, not the model (restoring checks that).
    benches['other'] = DecodeBench(compare, workdir, *batching_args)
  result = time_alternating(benches, modes, repeats)
  if compare is not None:
    result['speedup'], result['same_outputs'] = {}, {}
    for label, this in result['this'].items():
      other = result['other'].get(label)
      if isinstance(this, dict) and isinstance(other, dict):
        speedup = other['ms_per_sentence'] / this['ms_per_sentence']
        result['speedup'][label] = speedup
        if 'outputs_sha1' in this:  # not in teacher-forced timing
          same = this['outputs_sha1'] == other['outputs_sha1']
          result['same_outputs'][label] = same
  result['peak_rss_mb'] = train_speed.peak_rss_mb()
  result['peak_device_memory_mb'] = train_speed.peak_device_memory_mb()
  return result
