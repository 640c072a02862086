"""The data layer: tasks (splits of id sequences) and their batches.

  vocab.py        word, character and SentencePiece vocabularies; PAD, BOS, EOS, UNK
  dataset.py      Ragged, Split, Task: what a task is
  embedded.py     copy and chunk_reverse, generated from the seed
  text.py         text:<prefix> parallel text files
  tfds_corpus.py  tfds:<builder>/<config> TFDS translation corpora
  encoding.py     real corpora: vocabularies, encoding, the encoded-corpus cache
  batching.py     length buckets, training batches by step, eval batches

Modules import downward only (batching and the sources use dataset; text and
tfds_corpus use encoding); `load_task` below picks the source of data.name.
"""

import dataclasses
from typing import Optional

from nmt_jax.data import dataset
from nmt_jax.data import embedded
from nmt_jax.data import encoding
from nmt_jax.data import text
from nmt_jax.data import tfds_corpus
from nmt_jax.system.errors import DataError


def load_task(
    data_config,
    seed: int,
    workdir: Optional[str] = None,
    build_vocab: bool = False,
) -> dataset.Task:
  """The task named by data_config.name.

  Real corpora keep their vocabularies in `<workdir>/vocab`; `build_vocab`
  builds missing ones (training), otherwise a missing one is an error. With
  data.reverse_source every split's sources are reversed (EOS kept last).
  """
  task = _load_task(data_config, seed, workdir, build_vocab)
  if not data_config.reverse_source:
    return task
  reverse = lambda split: split and dataset.reverse_sources(split)
  return dataclasses.replace(
      task,
      train=reverse(task.train),
      eval=reverse(task.eval),
      test=reverse(task.test),
  )


def load_vocab_task(data_config, workdir: Optional[str]) -> dataset.Task:
  """The task's vocabularies and max_length, with empty splits.

  For translating and scoring: a real corpus's vocabularies come from
  `<workdir>/vocab`, without reading the corpus (it need not be here).
  """
  if _source(data_config.name) == 'embedded':
    vocab = embedded.vocabulary(data_config)
    empty = dataset.Split([], [], [], [])
    return dataset.Task(vocab, vocab, empty, empty, data_config.max_length + 1)
  encoding.require_workdir(data_config, workdir)
  return encoding.vocab_task(data_config, workdir)


def _source(name: str) -> str:
  """'text', 'tfds' or 'embedded': where data.name's task comes from."""
  for prefix in ('text', 'tfds'):
    if name.startswith(prefix + ':'):
      return prefix
  if name not in embedded.NAMES:
    raise DataError(
        f'unknown data.name {name!r}: use one of {", ".join(embedded.NAMES)}, '
        'text:<path prefix>, tfds:<builder>/<config>'
    )
  return 'embedded'


def _load_task(data_config, seed, workdir, build_vocab) -> dataset.Task:
  source = _source(data_config.name)
  if source == 'text':
    return text.load_task(data_config, workdir, build_vocab)
  if source == 'tfds':
    return tfds_corpus.load_task(data_config, workdir, build_vocab)
  return embedded.load_task(data_config, seed)


def prepare_corpus(data_config):
  """The one-time download a corpus needs before load_task (TFDS).

  The other sources need none.
  """
  if data_config.name.startswith('tfds:'):
    tfds_corpus.prepare(data_config)
