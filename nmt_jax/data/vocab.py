"""Token vocabularies: ids <-> text, with the four reserved ids below.

Three kinds share one interface (`tokens`, `len`, `encode`, `decode`,
`save`): word-level `Vocab` (whitespace tokens, UNK, frequency cutoff),
`CharVocab` (characters, the space as '▁') and `SentencePieceVocab` (BPE or
unigram). `build_vocab` trains one from text, `load_vocab` reads it back.
"""

import collections
import io
import os
import re
from typing import Iterable, List, Sequence

import numpy as np
import sentencepiece

from nmt_jax.system import progress_bars
from nmt_jax.system.errors import DataError

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ('<pad>', '<s>', '</s>', '<unk>')


class VocabError(DataError):
  """A token or vocabulary file the model cannot use."""


class Vocab:
  """A word-level vocabulary: the reserved tokens, then `tokens`.

  With `allow_unk=False` (the embedded tasks, whose symbol set is closed) an
  unknown token is an error rather than silently becoming <unk>.
  """

  def __init__(self, tokens: Sequence[str], allow_unk: bool = True):
    self.tokens = list(SPECIALS) + [t for t in tokens if t not in SPECIALS]
    self.index = {t: i for i, t in enumerate(self.tokens)}
    self.allow_unk = allow_unk

  def __len__(self):
    return len(self.tokens)

  def encode_lines(
      self, texts: Sequence[str], first_line: int = 1
  ) -> List[List[int]]:
    """encode() of each text; errors name the line (first_line + index)."""
    return [
        self.encode(text, line=first_line + i) for i, text in enumerate(texts)
    ]

  def encode(self, text: str, line: int = 0) -> List[int]:
    """'a b c' -> [ids..., EOS]."""
    ids = []
    for token in text.split():
      index = self.index.get(token)
      # '<s>', '</s>' and '<pad>' written in the text are words, not control
      # ids: read as '</s>', one would end a sentence in the middle.
      if index is not None and (index >= len(SPECIALS) or index == UNK):
        ids.append(index)
      elif self.allow_unk:
        ids.append(UNK)
      else:
        where = f' on line {line}' if line else ''
        raise VocabError(
            f'token {token!r}{where} is not in the vocabulary'
            f' ({self.describe()}); use only those tokens, separated by spaces'
        )
    return ids + [EOS]

  def decode(self, ids: Iterable[int]) -> str:
    """ids -> text, stopping at EOS and skipping PAD/BOS."""
    words = []
    for i in ids:
      i = int(i)
      if i == EOS:
        break
      if i in (PAD, BOS):
        continue
      words.append(self.tokens[i])
    return ' '.join(words)

  def save(self, path: str):
    """One token per line (the reserved ones first), UTF-8."""
    with open(path, 'w', encoding='utf-8') as f:
      f.write(''.join(t + '\n' for t in self.tokens))

  def describe(self) -> str:
    shown = self.tokens[len(SPECIALS) :]
    head = ' '.join(shown[:8]) + (' ...' if len(shown) > 8 else '')
    return f'{len(shown)} tokens: {head}'


def word_counts(texts: Iterable[str], split=str.split) -> collections.Counter:
  counts = collections.Counter()
  for text in progress_bars.bar(texts, desc='counting', unit='line'):
    counts.update(split(text))
  return counts


def most_frequent(
    counts: collections.Counter, min_count: int, max_size: int
) -> List[str]:
  """Tokens seen min_count times or more, most frequent first, at most max_size.

  Ties are ordered by token.
  """
  # A '<unk>' in a preprocessed corpus is the reserved token, not a word.
  kept = sorted(
      (t for t, c in counts.items() if c >= min_count and t not in SPECIALS),
      key=lambda t: (-counts[t], t),
  )
  return kept[:max_size] if max_size else kept


class CharVocab(Vocab):
  """Characters; a space is the token '▁', a '▁' in the text the token '<▁>'.

  Decoding thus restores the text exactly (whitespace runs become a space).
  """

  SPACE = '\u2581'
  LITERAL_SPACE_MARK = '<\u2581>'  # SentencePiece output is full of them

  def _split(self, text: str) -> List[str]:
    names = {' ': self.SPACE}
    # A vocabulary built before the mark existed reads '▁' as a space still.
    if self.LITERAL_SPACE_MARK in self.index or len(self) == len(SPECIALS):
      names[self.SPACE] = self.LITERAL_SPACE_MARK
    return [names.get(c, c) for c in ' '.join(text.split())]

  def encode(self, text: str, line: int = 0) -> List[int]:
    return super().encode(' '.join(self._split(text)), line)

  def decode(self, ids: Iterable[int]) -> str:
    chars = {self.SPACE: ' ', self.LITERAL_SPACE_MARK: self.SPACE}
    return ''.join(chars.get(t, t) for t in super().decode(ids).split())


class SentencePieceVocab:
  """A SentencePiece model; ids PAD, BOS, EOS, UNK = 0..3.

  A model nmt_jax built reserves those ids itself. Another one (trained by
  a user, with its own <unk>, <s> and </s> ids) is read through a table:
  the four reserved tokens, then the model's pieces except its control and
  unknown ones, in the model's order; its unknown piece becomes UNK.
  """

  def __init__(self, model_proto: bytes):
    self.model_proto = model_proto
    self.processor = sentencepiece.SentencePieceProcessor(
        model_proto=model_proto
    )
    size = self.processor.get_piece_size()
    pieces = [self.processor.id_to_piece(i) for i in range(size)]
    self._from_model = self._to_model = None
    if tuple(pieces[: len(SPECIALS)]) == SPECIALS:
      self.tokens = pieces
      return
    kept = [
        i
        for i in range(size)
        if not (self.processor.is_control(i) or self.processor.is_unknown(i))
    ]
    clash = [pieces[i] for i in kept if pieces[i] in SPECIALS]
    if clash:
      raise VocabError(
          f'this SentencePiece model has a normal piece {clash[0]!r}, a name'
          ' nmt_jax reserves; train it with that piece as a control symbol'
      )
    self.tokens = list(SPECIALS) + [pieces[i] for i in kept]
    self._from_model = np.full(size, UNK, np.int32)  # control pieces: UNK
    self._from_model[kept] = np.arange(len(SPECIALS), len(self.tokens))
    self._to_model = np.asarray([-1] * len(SPECIALS) + kept, np.int64)

  def __len__(self):
    return len(self.tokens)

  def _ids(self, model_ids: List[int]) -> List[int]:
    if self._from_model is None:
      return model_ids
    return self._from_model[model_ids].tolist() if model_ids else []

  def encode(self, text: str, line: int = 0) -> List[int]:
    del line  # every text encodes (unknown characters become <unk>)
    return self._ids(self.processor.encode(text)) + [EOS]

  def encode_lines(
      self, texts: Sequence[str], first_line: int = 1
  ) -> List[List[int]]:
    """encode() of each text, in one call.

    Uses SentencePiece's batch encoder (~1.7x faster).
    """
    del first_line
    return [
        self._ids(ids) + [EOS] for ids in self.processor.encode(list(texts))
    ]

  def decode(self, ids: Iterable[int]) -> str:
    kept = []
    for i in ids:
      i = int(i)
      if i == EOS:
        break
      if i not in (PAD, BOS):
        kept.append(i)
    if self._to_model is not None:
      # UNK: the model's own unknown piece (decoded as ' ⁇ ').
      kept = [
          self.processor.unk_id() if i == UNK else int(self._to_model[i])
          for i in kept
      ]
    return self.processor.decode(kept)

  def save(self, path: str):
    with open(path, 'wb') as f:
      f.write(self.model_proto)

  def describe(self) -> str:
    return f'SentencePiece, {len(self)} pieces'


FILE_NAMES = {
    'sentencepiece': 'spm_{}.model',
    'word': 'words_{}.txt',
    'char': 'chars_{}.txt',
}


def vocab_path(directory: str, kind: str, side: str) -> str:
  """side: 'shared', 'source' or 'target'."""
  return os.path.join(directory, FILE_NAMES[kind].format(side))


# SentencePiece trains on this many sentences at most: a sample of more.
SENTENCEPIECE_SENTENCES = 2_000_000


def build_vocab(
    kind: str,
    texts: Sequence[str],
    size: int,
    min_count: int = 1,
    model_type: str = 'bpe',
):
  """A vocabulary of `kind` from training texts.

  `size` caps word/char vocabularies (0 = no cap) and is the SentencePiece
  vocabulary size (reserved ids included). SentencePiece trains on at most
  SENTENCEPIECE_SENTENCES texts, a fixed sample of them (the same corpus gives
  the same vocabulary every time), of any length.
  """
  if not texts:
    raise VocabError('no training text to build the vocabulary from')
  if kind == 'word':
    return Vocab(most_frequent(word_counts(texts), min_count, size))
  if kind == 'char':
    chars = word_counts(texts, split=CharVocab(())._split)
    return CharVocab(most_frequent(chars, min_count, size))
  if len(texts) > SENTENCEPIECE_SENTENCES:
    # SentencePiece's own sample of a larger input is unseeded.
    chosen = np.random.default_rng(0).choice(
        len(texts), SENTENCEPIECE_SENTENCES, replace=False
    )
    texts = [texts[i] for i in np.sort(chosen)]
  model = io.BytesIO()
  try:
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(
            progress_bars.bar(texts, desc='SentencePiece reading', unit='line')
        ),
        model_writer=model,
        vocab_size=size,
        model_type=model_type,
        character_coverage=1.0,
        minloglevel=2,
        # It skips longer lines without a word (default 4192 bytes).
        max_sentence_length=max(4192, 4 * max(map(len, texts))),
        pad_id=PAD,
        bos_id=BOS,
        eos_id=EOS,
        unk_id=UNK,
        pad_piece=SPECIALS[PAD],
        bos_piece=SPECIALS[BOS],
        eos_piece=SPECIALS[EOS],
        unk_piece=SPECIALS[UNK],
    )
  except RuntimeError as e:
    detail = str(e).strip().splitlines()[-1]
    # Every character of the text is a piece (character_coverage=1.0).
    needed = re.search(r'smaller than required_chars\. \d+ vs (\d+)', detail)
    fix = (
        f'raise data.vocab.size to at least {needed.group(1)}'
        if needed
        else 'lower data.vocab.size'
    )
    raise VocabError(
        f'SentencePiece could not build a {size}-piece vocabulary ({detail});'
        f' {fix}'
    ) from None
  return SentencePieceVocab(model.getvalue())


def read_sentencepiece_model(path: str) -> SentencePieceVocab:
  """data.vocab.sentencepiece_model: a user's SentencePiece model file."""
  fix = 'give the .model file SentencePiece trained'
  try:
    with open(path, 'rb') as f:
      proto = f.read()
  except OSError as e:
    raise VocabError(
        f'data.vocab.sentencepiece_model={path} cannot be read'
        f' ({e.strerror}); {fix}'
    ) from None
  if not proto:  # SentencePiece would load it as a model of no pieces
    raise VocabError(
        f'data.vocab.sentencepiece_model={path} is an empty file; {fix}'
    )
  try:
    return SentencePieceVocab(proto)
  except RuntimeError:
    raise VocabError(
        f'data.vocab.sentencepiece_model={path} is not a SentencePiece model;'
        f' {fix}'
    ) from None


def load_vocab(kind: str, path: str):
  if not os.path.exists(path):
    raise VocabError(
        f'vocabulary file {path} is missing; build it with --mode=prepare '
        '(same --config and --workdir)'
    )
  if os.path.isdir(path):
    raise VocabError(
        f'vocabulary file {path} is a directory; give the path of a vocabulary'
        ' file, or move the directory away and run --mode=prepare to build one'
    )
  # --mode=prepare builds only a missing file.
  rebuild = (
      'delete it and run --mode=prepare to build it again (a workdir that has'
      ' trained needs the vocabulary it trained with)'
  )
  if kind == 'sentencepiece':
    with open(path, 'rb') as f:
      proto = f.read()
    try:
      return SentencePieceVocab(proto)
    except RuntimeError:
      raise VocabError(
          f'vocabulary file {path} is not a SentencePiece model; {rebuild}'
      ) from None
  try:
    with open(path, encoding='utf-8') as f:
      tokens = [line.rstrip('\n') for line in f]
  except UnicodeDecodeError:
    tokens = []
  if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
    raise VocabError(
        f'vocabulary file {path} does not start with {" ".join(SPECIALS)};'
        f' {rebuild}'
    )
  return (CharVocab if kind == 'char' else Vocab)(tokens[len(SPECIALS) :])


def pad_batch(sequences: Sequence[np.ndarray], length: int) -> np.ndarray:
  """Right-pads int sequences with PAD to [len(sequences), length]."""
  out = np.full((len(sequences), length), PAD, np.int32)
  for row, seq in enumerate(sequences):
    out[row, : len(seq)] = seq
  return out
