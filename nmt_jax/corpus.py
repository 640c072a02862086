"""Plain parallel text corpora (`data.name = 'text:<prefix>'`) and their vocabularies.

Files: `<prefix>.<split>.<lang>` for split in train, dev (validation) and,
optionally, test, one sentence per line, UTF-8, line i of the source file
translating line i of the target file. Pairs with an empty side are skipped,
and so are pairs longer than data.max_length tokens on either side; both are
counted and logged. The vocabularies are built once from the training split
(`--mode=prepare`, or the first training run) into `<workdir>/vocab/`.
"""

import os
from typing import Dict, List, Optional, Tuple

from absl import logging
import numpy as np

from nmt_jax import vocab as vocab_lib
from nmt_jax.errors import DataError

SPLIT_FILES = {'train': 'train', 'eval': 'dev', 'test': 'test'}


def split_paths(prefix: str, split: str, source_lang: str, target_lang: str) -> Tuple[str, str]:
  name = SPLIT_FILES[split]
  return f'{prefix}.{name}.{source_lang}', f'{prefix}.{name}.{target_lang}'


def read_lines(path: str) -> List[str]:
  """The lines of a UTF-8 file; errors name the file (and line)."""
  if not os.path.isfile(path):
    raise DataError(f'{path} does not exist; text corpora need <prefix>.train.<lang>, '
                    '<prefix>.dev.<lang> (and optionally <prefix>.test.<lang>) for both languages')
  with open(path, 'rb') as f:
    raw = f.read().split(b'\n')
  if raw and raw[-1] == b'':
    raw.pop()
  if not raw:
    raise DataError(f'{path} is empty; give it one sentence per line')
  lines = []
  for number, line in enumerate(raw, 1):
    try:
      lines.append(line.decode('utf-8').rstrip('\r'))
    except UnicodeDecodeError as e:
      raise DataError(f'{path}:{number}: invalid UTF-8 (byte {e.start}); convert the file to '
                      'UTF-8 (e.g. iconv -f latin1 -t utf-8)') from None
  return lines


def read_split(prefix: str, split: str, source_lang: str, target_lang: str):
  """(source lines, target lines) of a split, checked to be parallel."""
  source_path, target_path = split_paths(prefix, split, source_lang, target_lang)
  source, target = read_lines(source_path), read_lines(target_path)
  if len(source) != len(target):
    raise DataError(f'{source_path} has {len(source)} lines but {target_path} has '
                    f'{len(target)}; the files must be line-aligned translations')
  return source, target


def has_split(prefix: str, split: str, source_lang: str, target_lang: str) -> bool:
  return any(os.path.exists(p) for p in split_paths(prefix, split, source_lang, target_lang))


def encode_split(source_lines, target_lines, source_vocab, target_vocab, max_length: int,
                 where: str):
  """-> (data.Split, {'empty': n, 'too_long': n}); max_length counts tokens without EOS."""
  from nmt_jax import data  # pylint: disable=g-import-not-at-top
  split = data.Split([], [], [], [])
  dropped = {'empty': 0, 'too_long': 0}
  for number, (source, target) in enumerate(zip(source_lines, target_lines), 1):
    if not source.strip() or not target.strip():
      dropped['empty'] += 1
      continue
    source_ids = source_vocab.encode(source, line=number)
    target_ids = target_vocab.encode(target, line=number)
    if max(len(source_ids), len(target_ids)) - 1 > max_length:
      dropped['too_long'] += 1
      continue
    split.source.append(np.asarray(source_ids, np.int32))
    split.target.append(np.asarray(target_ids, np.int32))
    split.source_text.append(' '.join(source.split()))
    split.target_text.append(' '.join(target.split()))
  if dropped['empty'] or dropped['too_long']:
    logging.info('%s: kept %d pairs; skipped %d with an empty side and %d longer than '
                 'data.max_length=%d tokens', where, len(split), dropped['empty'],
                 dropped['too_long'], max_length)
  if not len(split):
    raise DataError(f'{where}: no pair left after skipping {dropped["empty"]} empty and '
                    f'{dropped["too_long"]} over-long ones; raise data.max_length')
  return split, dropped


# ----------------------------------------------------------------- vocabularies


def vocab_files(data_config, directory: str) -> Dict[str, str]:
  """{'source': path, 'target': path} (the same path twice for a shared vocabulary)."""
  kind = data_config.vocab.kind
  if data_config.vocab.shared:
    path = vocab_lib.vocab_path(directory, kind, 'shared')
    return {'source': path, 'target': path}
  return {side: vocab_lib.vocab_path(directory, kind, side) for side in ('source', 'target')}


def build_vocabs(data_config, directory: str, source_lines, target_lines) -> Dict[str, str]:
  """Trains the vocabularies on the training text and writes them to `directory`."""
  v = data_config.vocab
  os.makedirs(directory, exist_ok=True)
  files = vocab_files(data_config, directory)
  sizes = {'source': v.size, 'target': v.target_size or v.size}
  texts = {'source': [s for s in source_lines if s.strip()],
           'target': [t for t in target_lines if t.strip()]}
  if v.shared:
    vocabs = {'shared': vocab_lib.build_vocab(v.kind, texts['source'] + texts['target'],
                                              v.size, v.min_count, v.model_type)}
    vocabs['source'] = vocabs['target'] = vocabs['shared']
  else:
    vocabs = {side: vocab_lib.build_vocab(v.kind, texts[side], sizes[side], v.min_count,
                                          v.model_type) for side in ('source', 'target')}
  for side in ('source', 'target'):
    tmp = files[side] + '.tmp'
    vocabs[side].save(tmp)
    os.replace(tmp, files[side])   # a crash never leaves half a vocabulary
    logging.info('%s vocabulary: %s -> %s', side, vocabs[side].describe(), files[side])
  return files


def load_text_task(data_config, workdir: Optional[str], build_missing: bool):
  """The Task of a `text:<prefix>` corpus, with the workdir's vocabularies."""
  from nmt_jax import data  # pylint: disable=g-import-not-at-top
  prefix = data_config.name[len('text:'):]
  src, tgt = data_config.source_lang, data_config.target_lang
  if not prefix:
    raise DataError("data.name='text:' needs a path prefix, e.g. text:corpora/news "
                    'for corpora/news.train.de, corpora/news.dev.de, ...')
  if workdir is None:
    raise DataError(f'data.name={data_config.name!r} keeps its vocabulary in the workdir; '
                    'give --workdir')
  for split in ('train', 'eval'):
    if not has_split(prefix, split, src, tgt):
      paths = ' and '.join(split_paths(prefix, split, src, tgt))
      raise DataError(f'the {SPLIT_FILES[split]} split is missing: expected {paths}')
  train_lines = read_split(prefix, 'train', src, tgt)
  directory = os.path.join(workdir, 'vocab')
  files = vocab_files(data_config, directory)
  if not all(os.path.exists(p) for p in files.values()):
    if not build_missing:
      missing = next(p for p in files.values() if not os.path.exists(p))
      raise DataError(f'vocabulary file {missing} is missing; build it with --mode=prepare '
                      '(same --config and --workdir)')
    build_vocabs(data_config, directory, *train_lines)
  source_vocab = vocab_lib.load_vocab(data_config.vocab.kind, files['source'])
  target_vocab = vocab_lib.load_vocab(data_config.vocab.kind, files['target'])

  def encode(split, lines):
    paths = split_paths(prefix, split, src, tgt)
    return encode_split(*lines, source_vocab, target_vocab, data_config.max_length,
                        f'{paths[0]} / {paths[1]}')[0]

  train = encode('train', train_lines)
  dev = encode('eval', read_split(prefix, 'eval', src, tgt))
  test = encode('test', read_split(prefix, 'test', src, tgt)) \
      if has_split(prefix, 'test', src, tgt) else None
  return data.Task(source_vocab, target_vocab, train, dev, data_config.max_length + 1, test)
