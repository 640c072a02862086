"""Plain parallel text corpora (`data.name = 'text:<prefix>'`).

Files: `<prefix>.<split>.<lang>` for split in train, dev (validation) and,
optionally, test, one sentence per line, UTF-8, line i of the source file
translating line i of the target file. Reading errors name the file and line.
"""

import codecs
import os
from typing import List, Optional, Tuple

from nmt_jax.data import encoding
from nmt_jax.system.errors import DataError

SPLIT_FILES = {'train': 'train', 'eval': 'dev', 'test': 'test'}


def split_paths(
    prefix: str, split: str, source_lang: str, target_lang: str
) -> Tuple[str, str]:
  name = SPLIT_FILES[split]
  return f'{prefix}.{name}.{source_lang}', f'{prefix}.{name}.{target_lang}'


def read_lines(path: str) -> List[str]:
  """The lines of a UTF-8 file; errors name the file (and line)."""
  if not os.path.isfile(path):
    raise DataError(
        f'{path} does not exist; text corpora need <prefix>.train.<lang>,'
        ' <prefix>.dev.<lang> (and optionally <prefix>.test.<lang>) for both'
        ' languages'
    )
  with open(path, 'rb') as f:
    data = f.read()
  if data.startswith(codecs.BOM_UTF8):
    data = data[len(codecs.BOM_UTF8) :]
  # Lines end at '\n' (or '\r\n'), as `wc -l` counts them: a lone '\r'
  # inside a line of crawled text is whitespace, not a line end (splitting
  # there would pair every later line of the file with the wrong one). Only a
  # file without any '\n' (old Mac) ends its lines with '\r'.
  if b'\n' not in data:
    raw = data.split(b'\r')
  else:
    raw = [line.removesuffix(b'\r') for line in data.split(b'\n')]
  if raw and raw[-1] == b'':
    raw.pop()
  if not raw:
    raise DataError(f'{path} is empty; give it one sentence per line')
  lines = []
  for number, line in enumerate(raw, 1):
    try:
      lines.append(line.decode('utf-8'))
    except UnicodeDecodeError as e:
      raise DataError(
          f'{path}:{number}: invalid UTF-8 (byte {e.start}); convert the file'
          ' to UTF-8 (e.g. iconv -f latin1 -t utf-8)'
      ) from None
  return lines


def read_split(prefix: str, split: str, source_lang: str, target_lang: str):
  """(source lines, target lines) of a split, checked to be parallel."""
  source_path, target_path = split_paths(
      prefix, split, source_lang, target_lang
  )
  source, target = read_lines(source_path), read_lines(target_path)
  if len(source) != len(target):
    raise DataError(
        f'{source_path} has {len(source)} lines but {target_path} has '
        f'{len(target)}; the files must be line-aligned translations'
    )
  return source, target


def has_split(
    prefix: str, split: str, source_lang: str, target_lang: str
) -> bool:
  return any(
      os.path.exists(p)
      for p in split_paths(prefix, split, source_lang, target_lang)
  )


def load_task(data_config, workdir: Optional[str], build_missing: bool):
  """The Task of a `text:<prefix>` corpus, with the workdir's vocabularies."""
  prefix = data_config.name[len('text:') :]
  src, tgt = data_config.source_lang, data_config.target_lang
  if not prefix:
    raise DataError(
        "data.name='text:' needs a path prefix, e.g. text:corpora/news "
        'for corpora/news.train.de, corpora/news.dev.de, ...'
    )
  encoding.require_workdir(data_config, workdir)
  for split in ('train', 'eval'):
    if not has_split(prefix, split, src, tgt):
      paths = ' and '.join(split_paths(prefix, split, src, tgt))
      raise DataError(
          f'the {SPLIT_FILES[split]} split is missing: expected {paths}'
      )
  splits = [s for s in SPLIT_FILES if has_split(prefix, s, src, tgt)]
  for split in splits:
    for path in split_paths(prefix, split, src, tgt):
      if os.path.isdir(path):
        raise DataError(
            f'{path} is a directory; the {SPLIT_FILES[split]} split needs a'
            ' text file per language (one sentence per line)'
        )
      if not os.path.isfile(path):
        raise DataError(
            f'{path} is missing: the {SPLIT_FILES[split]} split needs a file'
            ' per language (or, for test, neither)'
        )
  names = {
      split: ' / '.join(split_paths(prefix, split, src, tgt))
      for split in splits
  }
  # The cache is current while every file keeps its size and modification time.
  identity = [
      (path, os.stat(path).st_size, os.stat(path).st_mtime_ns)
      for split in splits
      for path in split_paths(prefix, split, src, tgt)
  ]
  return encoding.cached_task(
      data_config,
      workdir,
      build_missing,
      identity,
      names,
      lambda: {split: read_split(prefix, split, src, tgt) for split in splits},
  )
