"""Translations with their attention, for inspection (notebooks, plots.py).

from nmt_jax.analysis import attention_maps
sentences = attention_maps.sample_sentences('runs/memory_k64', 3)
for t in attention_maps.translate_with_attention('runs/memory_k64', sentences):
  print(t.hypothesis, t.weights.shape)       # [T, S]
"""

import dataclasses
from typing import Any, Dict, List, Optional, Sequence

import jax
import numpy as np

from nmt_jax import attention
from nmt_jax import data
from nmt_jax.config import validation
from nmt_jax.data import batching
from nmt_jax.data import dataset
from nmt_jax.data.vocab import EOS
from nmt_jax.decoding import outputs
from nmt_jax.decoding import restore
from nmt_jax.decoding import search
from nmt_jax.model import seq2seq
from nmt_jax.workdir import run_config


@dataclasses.dataclass
class Translation:
  """One decoded sentence with its attention, cut to real tokens (EOS included).

  weights: [T, S] attention over source positions at each target step (memory:
  the effective sum_k beta_tk alpha_sk). Memory also has alpha [S, K] (encoder
  scores) and beta [T, K] (decoder scores); flexible has strength g(t) [T] and
  the kept interval first/last [T] (whole sentence when tau = inf; with a
  reversed source, EOS may be kept apart from it: eos_kept [T]).
  """

  source: List[str]
  hypothesis: List[str]
  weights: Optional[np.ndarray]
  extras: Dict[str, np.ndarray]
  attention: str


def translate_with_attention(
    workdir: str,
    sentences: Sequence[str],
    beam_size: int = 1,
    overrides: Optional[Dict[str, Any]] = None,
) -> List[Translation]:
  """Decodes `sentences` with the workdir's best checkpoint.

  Keeps the attention per step. `overrides` changes config fields first, e.g.
  {'model.attention.tau': 1.2}.
  """
  config = run_config.load_config(workdir)
  for field, value in (overrides or {}).items():
    *parents, leaf = field.split('.')
    node = config
    for part in parents:
      node = node[part]
    node[leaf] = value
  config = validation.resolve(config)
  task, model, _, params, _ = restore.restore_for_inference(
      config, workdir, corpus=False
  )
  kind = attention.get(config.model.attention.kind)
  reverse = config.data.reverse_source
  split = dataset.sentences_split(
      list(sentences), task.source_vocab, reverse=reverse
  )
  longest = max(len(s) for s in split.source)
  source = batching.make_batch(split, range(len(split)), longest)['source']
  decode_fn = search.make_decode_fn(
      model, config.decode, beam_size, with_diagnostics=True
  )
  out = jax.device_get(decode_fn(params, source))
  diagnostics = out.diagnostics or {}
  cache, _ = jax.device_get(
      model.apply({'params': params}, source, method=seq2seq.Seq2Seq.encode)
  )
  translations = []
  for i, tokens in enumerate(np.asarray(out.tokens)):
    steps = int(np.sum(tokens != 0))
    length = len(split.source[i])
    # One label per token (a character, a piece), as the weights have.
    hypothesis = [task.target_vocab.tokens[t] for t in tokens[:steps]]
    extras = {
        k: np.asarray(v[i, :steps])
        for k, v in diagnostics.items()
        if k not in ('weights', 'window') and np.ndim(v) == 2
    }
    weights = diagnostics.get('weights')
    if weights is not None:
      # [T, W] over what the kind attends to -> [T, S] over the source.
      weights, kind_extras = kind.source_attention(
          np.asarray(weights[i, :steps]), cache, i, length
      )
      extras.update(kind_extras)
      if reverse:  # the model read the source backwards: back to text order
        weights = outputs.reading_order(weights, axis=1)
        if 'alpha' in extras:
          extras['alpha'] = outputs.reading_order(extras['alpha'], axis=0)
    if reverse:
      extras = _positions_in_reading_order(extras, length)
    translations.append(
        Translation(
            _source_tokens(task, split.source[i], reverse),
            hypothesis,
            weights,
            extras,
            config.model.attention.kind,
        )
    )
  return translations


def decoded_translations(
    task, decoded, split: dataset.Split, count: int, reverse: bool, kind: str
) -> List[Translation]:
  """The first `count` sentences of an evaluation.Decoded, with attention.

  `decoded` was decoded with attention weights (Evaluator.decode); the
  weights [T, S] are its soft alignments, in reading order.
  """
  translations = []
  for i in range(count):
    hypothesis = decoded.nbest[i][0]
    weights = decoded.attention(i, reverse)
    ids = list(hypothesis.ids) + [EOS]
    translations.append(
        Translation(
            _source_tokens(task, split.source[i], reverse),
            [task.target_vocab.tokens[t] for t in ids[: len(weights)]],
            weights,
            {},
            kind,
        )
    )
  return translations


def _source_tokens(task, ids, reverse: bool) -> List[str]:
  """One label per source id, EOS ('</s>') last, in reading order."""
  tokens = [task.source_vocab.tokens[t] for t in ids]
  return list(outputs.reading_order(np.array(tokens), 0)) if reverse else tokens


def _positions_in_reading_order(extras, length: int):
  """Source positions of a reversed source's extras, in reading order.

  Position p < length - 1 (the words) is read at length - 2 - p; EOS stays
  last. A window [first, last] of words turns into [length-2-last,
  length-2-first]. One that reaches EOS keeps words at the start of the text
  and EOS at its end, two pieces: first/last are then the words' piece (empty,
  last < first, when the window is EOS alone) and eos_kept [T] says which
  steps also keep EOS.
  """
  extras = dict(extras)
  flip = lambda p: np.where(p < length - 1, length - 2 - p, p)
  for key in ('center', 'previous_center'):
    if key in extras:
      extras[key] = flip(np.asarray(extras[key], np.float64))
  if 'first' in extras and 'last' in extras:
    first, last = np.asarray(extras['first']), np.asarray(extras['last'])
    words_last = np.minimum(last, length - 2)
    extras['first'] = length - 2 - words_last
    extras['last'] = np.where(first <= length - 2, length - 2 - first, -1)
    extras['eos_kept'] = last >= length - 1
  return extras


def sample_sentences(workdir: str, count: int = 3) -> List[str]:
  """The first `count` source sentences of the workdir's validation split."""
  config = run_config.load_config(workdir)
  task = data.load_task(config.data, config.seed, workdir)
  return list(task.eval.source_text[:count])
