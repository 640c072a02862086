"""Validation and evaluation: decoding and scoring a split, loss, BLEU.

The eval, translate and score modes built on it are in inference.py.
"""

import dataclasses
from typing import Any, Dict, List, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from nmt_jax.config import compiler_options
from nmt_jax.data import batching
from nmt_jax.data import dataset
from nmt_jax.data import segmentation
from nmt_jax.data.vocab import EOS
from nmt_jax.data.vocab import PAD
from nmt_jax.decoding import loop
from nmt_jax.decoding import metrics as metrics_lib
from nmt_jax.decoding import outputs
from nmt_jax.decoding import scorers
from nmt_jax.decoding import search
from nmt_jax.system import parallel
from nmt_jax.system import progress_bars
from nmt_jax.system import timing
from nmt_jax.system.errors import ConfigError


class Hypothesis(NamedTuple):
  """One decoded hypothesis."""

  ids: np.ndarray  # [T] token ids, EOS removed
  # greedy, sampling: log-probability; beam: / GNMT length penalty
  score: float
  alignment: Optional[np.ndarray]  # [T] argmax source index (decode alignments)
  # [T + 1, S] attention over the source (EOS included on both sides), in the
  # order the model read it; the best hypothesis only, when decoded with
  # attention weights.
  attention: Optional[np.ndarray] = None


def _strip(tokens) -> np.ndarray:
  """Decoded [T] ids -> the hypothesis: up to its EOS, PAD dropped."""
  end = np.flatnonzero(tokens == EOS)
  return tokens[: end[0]] if len(end) else tokens[tokens != PAD]


def _nbest(out, row: int, length: int) -> List[Hypothesis]:
  """The n-best list of one decoded row, best first (greedy: one entry).

  `length`: the row's source tokens, EOS included.
  """
  diagnostics = out.diagnostics or {}
  aligned = lambda d, ids: (
      d['alignment'][: len(ids)] if d and 'alignment' in d else None
  )
  ids = _strip(out.tokens[row])  # the best hypothesis
  attention = None
  if 'attention' in diagnostics:
    # Its EOS step too (a beam's unfinished fallback has none).
    attention = diagnostics['attention'][row, : len(ids) + 1, :length]
  if out.nbest_tokens is None:
    row_diagnostics = jax.tree_util.tree_map(lambda x: x[row], out.diagnostics)
    return [
        Hypothesis(
            ids,
            float(out.scores[row]),
            aligned(row_diagnostics, ids),
            attention,
        )
    ]
  entries = []
  for k, score in enumerate(out.nbest_scores[row]):
    if not np.isfinite(score):  # an empty slot of the n-best list
      continue
    ids = _strip(out.nbest_tokens[row, k])
    hyp_diagnostics = jax.tree_util.tree_map(
        lambda x, k=k: x[row, k], out.nbest_diagnostics
    )
    entries.append(Hypothesis(ids, float(score), aligned(hyp_diagnostics, ids)))
  entries[0] = entries[0]._replace(attention=attention)
  return entries


def decode_split(
    decode_fn,
    params,
    split,
    batch_size: int,
    boundaries,
    limit=None,
    mesh=None,
    timing_repeats: int = 1,
    profile_dir: Optional[str] = None,
):
  """Decodes a dataset.Split's sources in fixed-shape, length-sorted batches.

  `decode_fn` is a jitted fn(params, source); each batch shape is compiled
  and run once ahead of time (timing.compile_by_shape), so `decode_seconds`
  counts steady-state execution only (`compile_seconds` holds the compilation
  and that first run). With a `mesh`, batches are sharded along 'data' (each
  process feeds its rows) and every process receives all hypotheses. With
  `timing_repeats` > 1 the whole split is decoded that many times and
  `decode_seconds` is the fastest pass (the least disturbed by other work on
  the machine; `decode_cpu_seconds` is its process CPU time);
  `decode_seconds_all` lists every pass. With `profile_dir`
  one more, untimed pass is traced there (jax.profiler).
  Returns (n-best lists of Hypothesis in split order, best first; statistics:
  'windows' (decode.Windows of numpy [N] arrays in split order),
  'source_lengths' [N] (EOS included), decode_seconds, compile_seconds,
  'executables': the compiled decoders by argument shape).
  """
  count = len(split) if limit is None else min(limit, len(split))
  batches = list(
      batching.eval_batches(
          split,
          batch_size,
          boundaries,
          limit=count,
          row_multiple=1 if mesh is None else mesh.devices.size,
      )
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
    progress_bars.wait_each(outputs, 'decoding')
    return (
        parallel.to_host(outputs)
        if mesh is not None
        else jax.device_get(outputs)
    )

  if profile_dir:
    # A pass of its own, not timed: tracing slowed decoding x2-3 on a CPU,
    # and with one timing repeat it was the time reported.
    with jax.profiler.trace(profile_dir, create_perfetto_trace=True):
      run_pass()
  passes, cpu = [], []
  for _ in range(max(1, timing_repeats)):
    outputs, seconds, cpu_seconds = timing.timed_with_cpu(run_pass)
    passes.append(seconds)
    cpu.append(cpu_seconds)

  nbest = [None] * count
  windows = loop.Windows(*(np.zeros(count) for _ in loop.Windows._fields))
  source_lengths = np.zeros(count)
  for (rows, batch), out in zip(batches, outputs):
    lengths = np.sum(batch['source'] != PAD, axis=1)
    for row, index in enumerate(rows):
      if index >= 0:  # rows of -1 pad the batch
        nbest[index] = _nbest(out, row, int(lengths[row]))
    real = rows >= 0
    for total, sums in zip(windows, out.windows):
      total[rows[real]] = sums[real]
    source_lengths[rows[real]] = lengths[real]
  stats = {
      'windows': windows,
      'source_lengths': source_lengths,
      'decode_seconds': min(passes),
      'decode_seconds_all': passes,
      'decode_cpu_seconds': cpu[passes.index(min(passes))],
      'compile_seconds': compile_seconds,
      'executables': compiled.executables,
  }
  return nbest, stats


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
    window_reduction       Shu & Nakayama's reduction, a ratio of means:
                           1 - avg_window / avg_source_length (their 56% is
                           1 - 10.7 / 24.4).
    window_reduction_per_sentence
                           1 - avg_window_fraction: the mean over sentences
                           of each one's reduction; short sentences weigh as
                           much as long ones.
    avg_source_length      mean source length.
    avg_steps              (step, hypothesis) pairs per sentence: its
                           length (EOS included) in greedy search, the
                           live beams summed over its steps in beam search.
  """
  if not len(source_lengths):  # nothing decoded
    windows, source_lengths = loop.Windows(*np.zeros((3, 1))), np.ones(1)
  steps = np.maximum(windows.steps, 1.0)
  window, computed = windows.window / steps, windows.computed / steps
  fraction = float(np.mean(window / source_lengths))
  return {
      'avg_window': float(np.mean(window)),
      'avg_window_fraction': fraction,
      'window_reduction': float(1 - np.mean(window) / np.mean(source_lengths)),
      'window_reduction_per_sentence': 1 - fraction,
      'avg_window_steps': float(np.sum(windows.window) / np.sum(steps)),
      'avg_computed': float(np.mean(computed)),
      'avg_computed_fraction': float(np.mean(computed / source_lengths)),
      'avg_source_length': float(np.mean(source_lengths)),
      'avg_steps': float(np.mean(windows.steps)),
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


@dataclasses.dataclass
class Decoded:
  """A decoded split: texts and, per sentence, its n-best list."""

  texts: List[str]  # the best hypothesis of each sentence (or first sample)
  # Best first, at most the beam size (sampling: the samples in order).
  nbest: List[List[Hypothesis]]
  info: Dict[str, Any]  # window and timing metrics

  def positions(self, split, sentence: int, k: int = 0, reverse=False):
    """[T] source token aligned to each token of hypothesis k (-1: none)."""
    hypothesis = self.nbest[sentence][k]
    return outputs.source_positions(
        hypothesis.alignment, len(split.source[sentence]) - 1, reverse
    )

  def attention(self, sentence: int, reverse=False) -> np.ndarray:
    """[T + 1, S] the best hypothesis's attention over the source, float32.

    Rows: its tokens and EOS; columns: the source's tokens and EOS, in the
    text's order (`reverse`: data.reverse_source undone). Decoded with
    attention weights (Evaluator.decode).
    """
    hypothesis = self.nbest[sentence][0]
    return outputs.soft_alignment(
        hypothesis.attention, hypothesis.attention.shape[1], reverse
    )


class Evaluator:
  """Scoring and decoding of a split with one model or an ensemble.

  `model`: a seq2seq.Seq2Seq or a scorer (scorers.py). The jitted functions
  are cached; `executables[beam_size]` (sampling: `executables['sample']`)
  holds the decoders compiled by the last pass with that beam, by argument
  shape (`bench decode` reads their HLO).
  """

  def __init__(self, config, model, task: dataset.Task, mesh):
    self.config, self.task, self.mesh = config, task, mesh
    self.scorer = scorers.as_scorer(model)
    self.boundaries = batching.bucket_boundaries(
        task.max_length, batching.decoding_bucket_count(config.data)
    )
    self.compiler_options = compiler_options.get(config)
    self.decode_compiler_options = compiler_options.get_decode(config)
    self._target_log_probs = jax.jit(
        lambda params, batch: scorers.target_log_probs(
            self.scorer,
            params,
            batch['source'],
            batch['target_in'],
            batch['target_out'],
        ),
        compiler_options=self.compiler_options,
    )
    self._decoders = {}
    self.executables = {}

  def token_log_probs(self, params, split, batch_size: int):
    """Teacher-forced log-probability of each target token (EOS included).

    Returns one [len(target)] array per pair, in split order.
    """
    out = [None] * len(split)
    for rows, batch in progress_bars.bar(
        batching.eval_batches(
            split,
            batch_size,
            self.boundaries,
            row_multiple=self.mesh.devices.size,
        ),
        total=batching.eval_batch_count(split, batch_size, self.boundaries),
        desc='scoring',
        unit='batch',
    ):
      sharded = parallel.shard_global_batch(batch, self.mesh)
      values = parallel.to_host(self._target_log_probs(params, sharded))
      for row, index in enumerate(rows):
        if index >= 0:
          out[index] = values[row, : len(split.target[index])]
    return out

  def loss(self, params, split: dataset.Split) -> float:
    """Teacher-forced loss per target token."""
    values = self.token_log_probs(
        params, split, self.sentences_per_batch(self.config.train.batch_size)
    )
    tokens = sum(len(v) for v in values)
    return -float(sum(np.sum(v, dtype=np.float64) for v in values)) / max(
        tokens, 1
    )

  def sentences_per_batch(self, size: int) -> int:
    """`size` rounded to a multiple of the number of devices (at least 1)."""
    devices = self.mesh.devices.size
    return max(devices, size // devices * devices)

  def decode_batch_size(self, beam_size: int) -> int:
    """Sentences per decoding batch: decode.batch_size hypotheses
    (`beam_size` of them per sentence: the beam, or the samples)."""
    return self.sentences_per_batch(
        max(1, self.config.decode.batch_size // beam_size)
    )

  def decode(
      self,
      params,
      split: dataset.Split,
      beam_size: int,
      limit: Optional[int] = None,
      alignments: bool = False,
      profile_dir: Optional[str] = None,
      attention_weights: bool = False,
      batch_size: Optional[int] = None,
      method: str = 'search',
  ) -> Decoded:
    """Decodes the split's sources (the first `limit`).

    With `alignments` each hypothesis has its argmax source positions, with
    `attention_weights` the best one its attention (Decoded.attention); with
    `profile_dir` the decoding pass is traced there. `batch_size`: sentences
    per batch (default: decode.batch_size hypotheses' worth). `method`
    'sample' draws decode.num_samples samples of each sentence instead of
    searching (`beam_size` unused; its n-best lists are the samples in order).
    """
    sampling = method == 'sample'
    width = self.config.decode.num_samples if sampling else beam_size
    key = (method, width, alignments, attention_weights)
    if key not in self._decoders:
      if not sampling:
        check_beam(beam_size, self.task)
      self._decoders[key] = search.make_decode_fn(
          self.scorer,
          self.config.decode,
          beam_size,
          alignments=alignments,
          compiler_options=self.decode_compiler_options,
          attention_weights=attention_weights,
          method=method,
      )
    if batch_size is None:
      batch_size = self.decode_batch_size(width)
    nbest, stats = decode_split(
        self._decoders[key],
        params,
        split,
        self.sentences_per_batch(batch_size),
        self.boundaries,
        limit,
        mesh=self.mesh,
        timing_repeats=self.config.decode.timing_repeats,
        profile_dir=profile_dir,
    )
    self.executables[method if sampling else beam_size] = stats['executables']
    count = max(len(nbest), 1)
    info = window_metrics(stats['windows'], stats['source_lengths'])
    info['decode_ms_per_sentence'] = 1000 * stats['decode_seconds'] / count
    info['decode_cpu_ms_per_sentence'] = (
        1000 * stats['decode_cpu_seconds'] / count
    )
    info['decode_compile_seconds'] = stats['compile_seconds']
    if len(stats['decode_seconds_all']) > 1:
      info['decode_ms_per_sentence_all'] = [
          1000 * t / count for t in stats['decode_seconds_all']
      ]
    texts = [self.text(n[0].ids) for n in nbest]
    return Decoded(texts, nbest, info)

  def text(self, ids) -> str:
    """A hypothesis's target ids as text (data.segmentation undone)."""
    return self.as_text(self.task.target_vocab.decode(ids))

  def as_text(self, pieces: str) -> str:
    """Target-side `pieces` (a hypothesis, a reference) as text."""
    return segmentation.desegment(self.config.data.segmentation, pieces)

  def translate(
      self,
      params,
      split: dataset.Split,
      beam_size: int,
      limit: Optional[int] = None,
  ):
    """-> (hypothesis texts in split order, window and timing metrics)."""
    decoded = self.decode(params, split, beam_size, limit)
    return decoded.texts, decoded.info

  def references(self, split: dataset.Split, count: int) -> List[str]:
    """The first `count` target texts of `split`, as hypotheses are scored."""
    return [self.as_text(t) for t in split.target_text[:count]]

  def metrics(self, params, split, decoded: Decoded, beam_size: int):
    """BLEU (+ signature), chrF, RIBES and loss of decoded texts."""
    references = self.references(split, len(decoded.texts))
    language = self.config.data.target_lang
    result = metrics_lib.translation_metrics(
        decoded.texts, references, language
    )
    result['bleu_by_source_length'] = metrics_lib.bleu_by_source_length(
        decoded.texts,
        references,
        # Without EOS; the split may be Ragged (no slicing).
        [len(split.source[i]) - 1 for i in range(len(decoded.texts))],
        language,
    )
    result.update(decoded.info)
    result['loss'] = self.loss(params, split)
    result['beam_size'] = beam_size
    result['num_sentences'] = len(decoded.texts)
    return result

  def evaluate(
      self,
      params,
      split: dataset.Split,
      beam_size: int,
      limit: Optional[int] = None,
  ):
    """Loss, BLEU (+ signature), chrF, RIBES, window size and decoding time."""
    decoded = self.decode(params, split, beam_size, limit)
    return self.metrics(params, split, decoded, beam_size), decoded.texts


def scalars(result: Dict) -> Dict:
  """A result's numeric entries (what metrics.jsonl and TensorBoard take)."""
  return {k: v for k, v in result.items() if isinstance(v, (int, float))}
