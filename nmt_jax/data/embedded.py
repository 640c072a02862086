"""The embedded tasks, generated from the seed (no download).

copy           Britz et al. 4.1: random symbols, the target is the source.
chunk_reverse  the source is a sequence of chunks, the target the same chunks
               in reverse order with each chunk's inner order kept: monotone
               alignment inside a chunk, jumps between chunks (the pattern
               flexible attention exploits).
"""

from typing import List, Tuple

import numpy as np

from nmt_jax.data import dataset
from nmt_jax.data import vocab as vocab_lib
from nmt_jax.data.vocab import EOS

NAMES = ('copy', 'chunk_reverse')


def symbol_names(num_symbols: int) -> List[str]:
  if num_symbols <= 26:
    return [chr(ord('a') + i) for i in range(num_symbols)]
  return [f'w{i}' for i in range(num_symbols)]


def copy_examples(
    num: int, min_length: int, max_length: int, num_symbols: int, rng
) -> List[Tuple[np.ndarray, np.ndarray]]:
  """Britz et al. 4.1: random symbols, target = source.

  Lengths are uniform in min_length..max_length.
  """
  lengths = rng.integers(min_length, max_length + 1, size=num)
  flat = rng.integers(0, num_symbols, size=int(lengths.sum()))
  pieces = np.split(flat, np.cumsum(lengths)[:-1])
  return [(p, p) for p in pieces]


def chunk_reverse_examples(
    num: int,
    min_length: int,
    max_length: int,
    num_symbols: int,
    chunk_size: int,
    rng,
) -> List[Tuple[np.ndarray, np.ndarray]]:
  """Chunks reversed, each chunk's order kept: 'a b X c Y' -> 'c Y a b X'.

  The last `max(1, num_symbols // 5)` symbols end a chunk and appear nowhere
  else, so the chunk boundaries are visible in the source, as phrase
  boundaries are in language. The alignment is monotone inside a chunk and
  jumps between chunks.
  """
  num_end = max(1, num_symbols // 5)
  num_inner = num_symbols - num_end
  examples = []
  for length in rng.integers(min_length, max_length + 1, size=num):
    chunks, left = [], int(length)
    while left:
      size = min(int(rng.integers(1, chunk_size + 1)), left)
      inner = (
          rng.integers(0, num_inner, size=size - 1)
          if num_inner
          else np.zeros(0, int)
      )
      chunks.append(
          np.concatenate([inner, [num_inner + rng.integers(0, num_end)]])
      )
      left -= size
    examples.append((np.concatenate(chunks), np.concatenate(chunks[::-1])))
  return examples


def vocabulary(data_config) -> vocab_lib.Vocab:
  """The shared vocabulary of the embedded tasks: num_symbols symbols."""
  return vocab_lib.Vocab(symbol_names(data_config.num_symbols), allow_unk=False)


def load_task(data_config, seed: int) -> dataset.Task:
  """The embedded task named by data_config.name, generated from `seed`."""
  name = data_config.name
  vocab = vocabulary(data_config)
  offset = len(vocab_lib.SPECIALS)

  def make(num, split_id):
    rng = np.random.default_rng([seed, split_id])
    if name == 'copy':
      pairs = copy_examples(
          num,
          data_config.min_length,
          data_config.max_length,
          data_config.num_symbols,
          rng,
      )
    else:
      pairs = chunk_reverse_examples(
          num,
          data_config.min_length,
          data_config.max_length,
          data_config.num_symbols,
          data_config.chunk_size,
          rng,
      )
    source = [np.append(s + offset, EOS).astype(np.int32) for s, _ in pairs]
    target = [np.append(t + offset, EOS).astype(np.int32) for _, t in pairs]
    return dataset.Split(
        source,
        target,
        [vocab.decode(s) for s in source],
        [vocab.decode(t) for t in target],
    )

  return dataset.Task(
      vocab,
      vocab,
      make(data_config.num_train, 0),
      make(data_config.num_eval, 1),
      data_config.max_length + 1,
  )
