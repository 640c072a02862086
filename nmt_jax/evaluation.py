"""Validation and evaluation: decoding a split, loss, BLEU.

Also the eval and translate modes.
"""

import functools
import os
from typing import Any, Dict, Optional

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from nmt_jax import decode
from nmt_jax import metrics as metrics_lib
from nmt_jax import parallel
from nmt_jax import steps
from nmt_jax import timing
from nmt_jax import validation
from nmt_jax import workdirs
from nmt_jax import writers
from nmt_jax.data import batching
from nmt_jax.data import dataset
from nmt_jax.errors import ConfigError
from nmt_jax.vocab import EOS
from nmt_jax.vocab import PAD


def decode_split(
    decode_fn,
    params,
    split,
    batch_size: int,
    boundaries,
    limit=None,
    mesh=None,
    timing_repeats: int = 1,
):
  """Decodes a dataset.Split's sources in fixed-shape, length-sorted batches.

  `decode_fn` is a jitted fn(params, source); each batch shape is compiled
  and run once ahead of time (timing.compile_by_shape), so `decode_seconds`
  counts steady-state execution only (`compile_seconds` holds the compilation
  and that first run). With a `mesh`, batches are sharded along 'data' (each
  process feeds its rows) and every process receives all hypotheses. With
  `timing_repeats` > 1 the whole split is decoded that many times and
  `decode_seconds` is the fastest pass (the least disturbed by other work on
  the machine); `decode_seconds_all` lists every pass.
  Returns (hypotheses: id arrays in split order, without EOS; statistics:
  'windows' (decode.Windows of numpy [N] arrays in split order),
  'source_lengths' [N] (EOS included), decode_seconds, compile_seconds).
  """
  count = len(split) if limit is None else min(limit, len(split))
  batches = list(
      batching.eval_batches(split, batch_size, boundaries, limit=count)
  )
  if mesh is None:
    sources = [jnp.asarray(batch['source']) for _, batch in batches]
  else:
    sources = [
        parallel.shard_global_batch({'source': batch['source']}, mesh)['source']
        for _, batch in batches
    ]
  compiled, compile_seconds = timing.compile_by_shape(
      decode_fn, [(params, source) for source in sources]
  )

  def run_pass():
    outputs = [compiled(params, source) for source in sources]
    return (
        parallel.to_host(outputs)
        if mesh is not None
        else jax.device_get(outputs)
    )

  passes = []
  for _ in range(max(1, timing_repeats)):
    outputs, seconds = timing.timed(run_pass)
    passes.append(seconds)

  hypotheses = [None] * count
  windows = decode.Windows(*(np.zeros(count) for _ in decode.Windows._fields))
  source_lengths = np.zeros(count)
  for (rows, batch), out in zip(batches, outputs):
    lengths = np.sum(batch['source'] != PAD, axis=1)
    for row, index in enumerate(rows):
      if index < 0:
        continue
      tokens = out.tokens[row]
      end = np.flatnonzero(tokens == EOS)
      hypotheses[index] = (
          tokens[: end[0]] if len(end) else tokens[tokens != PAD]
      )
    real = rows >= 0  # rows of -1 pad the batch
    for total, sums in zip(windows, out.windows):
      total[rows[real]] = sums[real]
    source_lengths[rows[real]] = lengths[real]
  stats = {
      'windows': windows,
      'source_lengths': source_lengths,
      'decode_seconds': min(passes),
      'decode_seconds_all': passes,
      'compile_seconds': compile_seconds,
  }
  return hypotheses, stats


def window_metrics(windows, source_lengths) -> Dict[str, float]:
  """Attention window statistics of decoded sentences.

  `windows`: decode.Windows of per-sentence sums [N]; `source_lengths` [N]
  (EOS included).
    avg_window             Shu & Nakayama's measure: the mean over sentences
                           of each sentence's mean window over its steps
                           (and live beam hypotheses). Unpruned attention
                           gives the mean source length.
    avg_window_steps       the window pooled over all (step, hypothesis)
                           pairs: long sentences weigh more (sum(T*S)/sum(T)
                           for global attention).
    avg_computed           as avg_window, of the positions actually scored:
                           local attention's 2D+1, flexible attention's
                           bucket width, global attention's padded length.
    *_fraction             the per-sentence means divided by that sentence's
                           source length, averaged over sentences.
    avg_source_length      mean source length.
  """
  if not len(source_lengths):  # nothing decoded
    windows, source_lengths = decode.Windows(*np.zeros((3, 1))), np.ones(1)
  steps = np.maximum(windows.steps, 1.0)
  window, computed = windows.window / steps, windows.computed / steps
  return {
      'avg_window': float(np.mean(window)),
      'avg_window_fraction': float(np.mean(window / source_lengths)),
      'avg_window_steps': float(np.sum(windows.window) / np.sum(steps)),
      'avg_computed': float(np.mean(computed)),
      'avg_computed_fraction': float(np.mean(computed / source_lengths)),
      'avg_source_length': float(np.mean(source_lengths)),
  }


def check_beam(beam_size: int, task: dataset.Task):
  """A beam cannot be wider than the target vocabulary."""
  vocab = len(task.target_vocab)
  if beam_size > vocab:
    raise ConfigError(
        f'config: a beam of {beam_size} hypotheses is wider than the'
        f' target vocabulary ({vocab} tokens); lower decode.beam_size'
        ' (or train.eval_beam_size)'
    )


class Evaluator:
  """Validation loss and decoding of a split with one model.

  The jitted functions are cached.
  """

  def __init__(self, config, model, task: dataset.Task, mesh):
    self.config, self.model, self.task, self.mesh = config, model, task, mesh
    self.boundaries = batching.bucket_boundaries(
        task.max_length, config.data.num_buckets
    )
    self._eval_step = jax.jit(functools.partial(steps.eval_step, model=model))
    self._decoders = {}

  def loss(self, params, split: dataset.Split) -> float:
    """Teacher-forced loss per target token."""
    sums = {'loss_sum': 0.0, 'tokens': 0.0}
    batch_size = self.config.train.batch_size
    for _, batch in batching.eval_batches(split, batch_size, self.boundaries):
      sharded = parallel.shard_global_batch(batch, self.mesh)
      out = jax.device_get(self._eval_step(params, sharded))
      sums = {k: sums[k] + float(out[k]) for k in sums}
    return sums['loss_sum'] / max(sums['tokens'], 1.0)

  def decode_batch_size(self, beam_size: int) -> int:
    """Sentences per decoding batch: decode.batch_size hypotheses.

    A multiple of the number of devices.
    """
    devices = self.mesh.devices.size
    size = max(1, self.config.decode.batch_size // beam_size)
    return max(devices, size // devices * devices)

  def translate(
      self,
      params,
      split: dataset.Split,
      beam_size: int,
      limit: Optional[int] = None,
  ):
    """-> (hypothesis texts in split order, window and timing metrics)."""
    if beam_size not in self._decoders:
      check_beam(beam_size, self.task)
      self._decoders[beam_size] = decode.make_decode_fn(
          self.model, self.config.decode, beam_size
      )
    hyps, stats = decode_split(
        self._decoders[beam_size],
        params,
        split,
        self.decode_batch_size(beam_size),
        self.boundaries,
        limit,
        mesh=self.mesh,
        timing_repeats=self.config.decode.timing_repeats,
    )
    count = max(len(hyps), 1)
    info = window_metrics(stats['windows'], stats['source_lengths'])
    info['decode_ms_per_sentence'] = 1000 * stats['decode_seconds'] / count
    info['decode_compile_seconds'] = stats['compile_seconds']
    if len(stats['decode_seconds_all']) > 1:
      info['decode_ms_per_sentence_all'] = [
          1000 * t / count for t in stats['decode_seconds_all']
      ]
    return [self.task.target_vocab.decode(h) for h in hyps], info

  def evaluate(
      self,
      params,
      split: dataset.Split,
      beam_size: int,
      limit: Optional[int] = None,
  ):
    """Loss, BLEU (+ signature), chrF, RIBES, window size and decoding time."""
    hypotheses, info = self.translate(params, split, beam_size, limit)
    references = split.target_text[: len(hypotheses)]
    result = metrics_lib.translation_metrics(
        hypotheses, references, self.config.data.target_lang
    )
    result.update(info)
    result['loss'] = self.loss(params, split)
    result['beam_size'] = beam_size
    result['num_sentences'] = len(hypotheses)
    return result, hypotheses


def scalars(result: Dict) -> Dict:
  """A result's numeric entries (what metrics.jsonl and TensorBoard take)."""
  return {k: v for k, v in result.items() if isinstance(v, (int, float))}


def evaluate(config, workdir: str) -> Dict[str, Any]:
  """Decodes the test split (else validation) with the best checkpoint.

  The beam size is decode.beam_size. Writes eval_results.json,
  eval_hypotheses.txt and an 'eval' record in metrics.jsonl.
  """
  config = validation.resolve(config)
  task, model, mesh, params, step = workdirs.restore_for_inference(
      config, workdir
  )
  workdirs.prepare(workdir)  # writable: fail now, not after decoding
  with workdirs.locked(workdir):
    return _evaluate(config, workdir, task, model, mesh, params, step)


def _evaluate(config, workdir, task, model, mesh, params, step):
  evaluator = Evaluator(config, model, task, mesh)
  result, hypotheses = evaluator.evaluate(
      params, task.test_or_eval, config.decode.beam_size
  )
  result['eval_split'] = 'test' if task.test is not None else 'validation'
  result['checkpoint_step'] = step
  if jax.process_index() == 0:
    writers.write_json(os.path.join(workdir, 'eval_results.json'), result)
    writers.write_text(
        os.path.join(workdir, 'eval_hypotheses.txt'),
        ''.join(h + '\n' for h in hypotheses),
    )
    writer = writers.MetricWriter(workdir)
    writer.write(step, 'eval', scalars(result))
    writer.close()
  logging.info(
      'evaluation of step %d (beam %d): BLEU %.2f | chrF %.2f | RIBES %.4f | '
      'avg window %.1f | %.2f ms/sentence',
      step,
      config.decode.beam_size,
      result['bleu'],
      result['chrf'],
      result['ribes'],
      result['avg_window'],
      result['decode_ms_per_sentence'],
  )
  logging.info('sacreBLEU signature: %s', result['bleu_signature'])
  return result


def translate(config, workdir: str, lines):
  """Translates source `lines` with the best checkpoint.

  Returns one target text per line (a blank line gives a blank line).
  """
  config = validation.resolve(config)
  numbered = [(i + 1, line.strip()) for i, line in enumerate(lines)]
  numbered = [(number, line) for number, line in numbered if line]
  if not numbered:
    raise ConfigError(
        'translate got no input sentences; pass --input=FILE or pipe text '
        'on stdin'
    )
  task, model, mesh, params, _ = workdirs.restore_for_inference(config, workdir)
  split = dataset.sentences_split(
      [line for _, line in numbered],
      task.source_vocab,
      line_numbers=[number for number, _ in numbered],
  )
  for (number, _), source in zip(numbered, split.source):
    if len(source) > task.max_length:
      raise ConfigError(
          f'input line {number} has {len(source) - 1} tokens, more than the'
          f" model's data.max_length={task.max_length - 1}; split the sentence"
      )
  evaluator = Evaluator(config, model, task, mesh)
  hypotheses, _ = evaluator.translate(params, split, config.decode.beam_size)
  out = [''] * len(lines)
  for (number, _), hypothesis in zip(numbered, hypotheses):
    out[number - 1] = hypothesis
  return out
