"""Real corpora as ids: vocabularies, encoding and the encoded cache.

The vocabularies are built once from the training split (`--mode=prepare`, or
the first training run) into `<workdir>/vocab/`. The encoded, length-filtered
splits are cached in `<workdir>/data_cache/<key>` (flat int32 + offsets,
memory-mapped), the key covering the data fields, the vocabularies and the
source files, so a changed corpus or max_length is encoded again. Training
pairs with an empty side or more than data.max_length tokens on either side
are skipped and counted in the log; the validation and test splits are kept
whole (their scores, and eval_hypotheses.txt, cover every line of their
files; longer pairs are decoded after the others, in batches of their own).
"""

import hashlib
import json
import os
import shutil
from typing import Dict
import uuid

from absl import logging
import numpy as np

from nmt_jax.data import dataset
from nmt_jax.data import vocab as vocab_lib
from nmt_jax.system import progress_bars
from nmt_jax.system import workdir_files
from nmt_jax.system.errors import DataError

CACHE_SPLITS = ('train', 'eval', 'test')


def encode_split(
    source_lines,
    target_lines,
    source_vocab,
    target_vocab,
    max_length: int,
    where: str,
    keep_all: bool = False,
):
  """-> (data.Split, {'empty': n, 'too_long': n}).

  max_length counts tokens without EOS. With `keep_all` (validation and
  test) those pairs are counted but kept, so that line i of the split is line
  i of its files.
  """
  split = dataset.Split([], [], [], [])
  dropped = {'empty': 0, 'too_long': 0}
  # Lines encoded per call (SentencePiece encodes a list in one C++ call).
  chunk = 10_000
  starts = range(0, len(source_lines), chunk)
  for start in progress_bars.bar(
      starts, desc=f'encoding {where}', unit='chunk'
  ):
    sources = source_vocab.encode_lines(
        source_lines[start : start + chunk], start + 1
    )
    targets = target_vocab.encode_lines(
        target_lines[start : start + chunk], start + 1
    )
    for offset, (source_ids, target_ids) in enumerate(zip(sources, targets)):
      source, target = (
          source_lines[start + offset],
          target_lines[start + offset],
      )
      # EOS alone: SentencePiece also drops what str.strip() keeps (U+200B).
      if len(source_ids) <= 1 or len(target_ids) <= 1:
        dropped['empty'] += 1
        if not keep_all:
          continue
      elif max(len(source_ids), len(target_ids)) - 1 > max_length:
        dropped['too_long'] += 1
        if not keep_all:
          continue
      split.source.append(np.asarray(source_ids, np.int32))
      split.target.append(np.asarray(target_ids, np.int32))
      split.source_text.append(' '.join(source.split()))
      split.target_text.append(' '.join(target.split()))
  if keep_all and (dropped['empty'] or dropped['too_long']):
    logging.info(
        '%s: kept all %d pairs, %d of them with an empty side and %d longer'
        ' than data.max_length=%d tokens (decoded after the others, in'
        ' batches of their own)',
        where,
        len(split),
        dropped['empty'],
        dropped['too_long'],
        max_length,
    )
  elif dropped['empty'] or dropped['too_long']:
    logging.info(
        '%s: kept %d pairs; skipped %d with an empty side and %d longer than '
        'data.max_length=%d tokens',
        where,
        len(split),
        dropped['empty'],
        dropped['too_long'],
        max_length,
    )
  if not len(split) or (keep_all and dropped['empty'] == len(split)):
    fixes = []
    if dropped['empty']:
      fixes.append('give both sides of each line some text')
    if dropped['too_long']:
      fixes.append(f'raise data.max_length (now {max_length})')
    raise DataError(
        f'{where}: no pair left after skipping {dropped["empty"]} with an'
        f' empty side and {dropped["too_long"]} over-long ones; '
        + ', or '.join(fixes)
    )
  return split, dropped


def vocab_files(data_config, directory: str) -> Dict[str, str]:
  """{'source': path, 'target': path} of the vocabulary files.

  The same path twice for a shared vocabulary.
  """
  kind = data_config.vocab.kind
  if data_config.vocab.shared:
    path = vocab_lib.vocab_path(directory, kind, 'shared')
    return {'source': path, 'target': path}
  return {
      side: vocab_lib.vocab_path(directory, kind, side)
      for side in ('source', 'target')
  }


def vocab_settings(data_config) -> Dict[str, Dict[str, object]]:
  """{'source'|'target': the data.vocab fields its vocabulary is built by}."""
  v = data_config.vocab
  if v.kind == 'sentencepiece' and v.sentencepiece_model:
    given = {'sentencepiece_model': os.path.abspath(v.sentencepiece_model)}
    return {'source': given, 'target': given}
  sizes = {
      'source': v.size,
      'target': v.size if v.shared else (v.target_size or v.size),
  }
  # The fields each kind reads (build_vocab).
  built_by = {'sentencepiece': ('model_type',), 'word': ('min_count',)}
  built_by['char'] = built_by['word']
  return {
      side: {
          'size': sizes[side],
          **{name: v[name] for name in built_by.get(v.kind, ())},
      }
      for side in ('source', 'target')
  }


def check_vocab_settings(data_config, files: Dict[str, str]):
  """DataError when a vocabulary file was built with other data.vocab fields.

  Its settings are recorded beside it (<file>.settings.json); a vocabulary
  built before they were has none and is taken as it is.
  """
  for side, wanted in vocab_settings(data_config).items():
    try:
      with open(files[side] + '.settings.json', encoding='utf-8') as f:
        built = json.load(f)
    except FileNotFoundError:
      continue
    changed = [
        f'{name} {wanted[name]!r} here, {built.get(name)!r} there'
        for name in wanted
        if built.get(name) != wanted[name]
    ]
    if changed:
      raise DataError(
          f'the {side} vocabulary {files[side]} was built with other data.vocab'
          f' settings: {", ".join(changed)}; keep its settings, or delete'
          f' {os.path.dirname(files[side])} to build it again (a workdir that'
          ' has trained needs a new --workdir)'
      )


def build_vocabs(
    data_config, directory: str, source_lines, target_lines
) -> Dict[str, str]:
  """Trains vocabularies on the training text and writes them to `directory`."""
  v = data_config.vocab
  os.makedirs(directory, exist_ok=True)
  files = vocab_files(data_config, directory)
  settings = vocab_settings(data_config)
  texts = {
      'source': [s for s in source_lines if s.strip()],
      'target': [t for t in target_lines if t.strip()],
  }
  if v.kind == 'sentencepiece' and v.sentencepiece_model:
    shared = vocab_lib.read_sentencepiece_model(v.sentencepiece_model)
    vocabs = {'source': shared, 'target': shared}
  elif v.shared:
    vocabs = {
        'shared': vocab_lib.build_vocab(
            v.kind,
            texts['source'] + texts['target'],
            v.size,
            v.min_count,
            v.model_type,
        )
    }
    vocabs['source'] = vocabs['target'] = vocabs['shared']
  else:
    vocabs = {
        side: vocab_lib.build_vocab(
            v.kind,
            texts[side],
            settings[side]['size'],
            v.min_count,
            v.model_type,
        )
        for side in ('source', 'target')
    }
  for side in ('source', 'target'):
    tmp = f'{files[side]}.tmp-{os.getpid()}'
    vocabs[side].save(tmp)
    with open(tmp + '.settings', 'w', encoding='utf-8') as f:
      json.dump(settings[side], f)
    # A crash never leaves half a vocabulary.
    os.replace(tmp + '.settings', files[side] + '.settings.json')
    os.replace(tmp, files[side])
    logging.info(
        '%s vocabulary: %s -> %s', side, vocabs[side].describe(), files[side]
    )
  return files


def require_workdir(data_config, workdir):
  if workdir is None:
    raise DataError(
        f'data.name={data_config.name!r} keeps its vocabulary in the workdir; '
        'give --workdir'
    )


def cache_key(data_config, vocab_paths: Dict[str, str], identity) -> str:
  """Digest of everything the encoded splits depend on.

  That is the data fields, the vocabularies and the sources.
  """
  digest = hashlib.sha256()
  fields = {
      k: data_config[k]
      for k in ('name', 'source_lang', 'target_lang', 'max_length')
  }
  fields['vocab'] = data_config.vocab.to_dict()
  # 2: the test split kept whole (before, filtered like the others); 3: a
  # side is empty when it encodes to EOS alone (before, when blank); 4: the
  # validation split kept whole too.
  fields['encoding'] = 4
  digest.update(
      json.dumps([fields, identity], sort_keys=True, default=str).encode()
  )
  for side in ('source', 'target'):
    with open(vocab_paths[side], 'rb') as f:
      digest.update(f.read())
  return digest.hexdigest()[:16]


def save_cache(task, directory: str):
  """Writes the task's encoded splits to `directory`, atomically.

  They go to a temporary directory that is then renamed. A workdir that
  cannot take it (read-only, full) is only slower next time: a warning.
  """
  # Unique across hosts sharing the workdir (containers repeat pids).
  tmp = f'{directory}.tmp-{uuid.uuid4().hex}'
  try:
    os.makedirs(tmp)
    for name, split in (
        ('train', task.train),
        ('eval', task.eval),
        ('test', task.test),
    ):
      if split is None:
        continue
      for side, rows in (('source', split.source), ('target', split.target)):
        dataset.Ragged.from_rows(rows).save(os.path.join(tmp, f'{name}.{side}'))
      if name != 'train':
        with open(
            os.path.join(tmp, f'{name}.text.json'), 'w', encoding='utf-8'
        ) as f:
          json.dump(
              {'source': split.source_text, 'target': split.target_text}, f
          )
  except OSError as e:
    logging.warning(
        'could not cache the encoded corpus in %s (%s); the next run encodes'
        ' it again',
        directory,
        e.strerror or e,
    )
    shutil.rmtree(tmp, ignore_errors=True)
    return
  try:
    os.rename(tmp, directory)
  except OSError:  # another process (host) wrote it first
    shutil.rmtree(tmp, ignore_errors=True)


def load_cache(directory: str, vocab_sizes: Dict[str, int]):
  """{'train'|'eval'|'test': Split} memory-mapped from `directory`.

  Raises OSError or ValueError for a damaged cache (a truncated or missing
  file, e.g. from a copy of the workdir that was cut short, or an id outside
  the vocabulary of its side: {'source': size, 'target': size}).
  """
  splits = {}
  for name in CACHE_SPLITS:
    if not os.path.exists(os.path.join(directory, f'{name}.source.ids.npy')):
      continue
    texts = {'source': [], 'target': []}
    if name != 'train':
      with open(
          os.path.join(directory, f'{name}.text.json'), encoding='utf-8'
      ) as f:
        texts = json.load(f)
    split = dataset.Split(
        dataset.Ragged.load(os.path.join(directory, f'{name}.source')),
        dataset.Ragged.load(os.path.join(directory, f'{name}.target')),
        texts['source'],
        texts['target'],
    )
    for side_name, side in (('source', split.source), ('target', split.target)):
      if side.offsets[-1] != len(side.flat) or len(side) != len(split.source):
        raise ValueError(f'{name}: ids and offsets disagree')
      size = vocab_sizes[side_name]
      if len(side.flat) and not 0 <= side.flat.min() <= side.flat.max() < size:
        raise ValueError(
            f'{name}.{side_name}: ids outside the vocabulary of {size}'
        )
    if name != 'train' and len(split.source_text) != len(split.source):
      raise ValueError(f'{name}: texts and ids disagree')
    splits[name] = split
  if 'train' not in splits or 'eval' not in splits:
    raise ValueError('a split is missing')
  return splits


def cached_task(
    data_config, workdir: str, build_missing: bool, identity, names, read_lines
):
  """The Task from <workdir>/data_cache/<key> when current.

  Otherwise reads, encodes and caches it. `read_lines()` returns
  {'train'|'eval'|'test': (source lines, target lines)} and is only called on
  a cache miss (reading and encoding WMT takes minutes, mapping the cache
  seconds).
  """
  paths = vocab_files(data_config, os.path.join(workdir, workdir_files.VOCAB))
  if all(os.path.exists(p) for p in paths.values()):
    directory = os.path.join(
        workdir,
        workdir_files.DATA_CACHE,
        cache_key(data_config, paths, identity),
    )
    vocabs = {
        side: vocab_lib.load_vocab(data_config.vocab.kind, path)
        for side, path in paths.items()
    }
    sizes = {side: len(vocab) for side, vocab in vocabs.items()}
    try:
      splits = (
          load_cache(directory, sizes) if os.path.isdir(directory) else None
      )
    except (OSError, ValueError, KeyError) as e:
      # Derived data: encoded again from the corpus.
      logging.warning(
          'encoded-corpus cache %s is damaged (%s); encoding the corpus again',
          directory,
          e,
      )
      shutil.rmtree(directory, ignore_errors=True)
      splits = None
    if splits is not None:
      logging.info(
          'encoded corpus from the cache %s: %s',
          directory,
          ', '.join(
              f'{name} {len(split):,} pairs' for name, split in splits.items()
          ),
      )
      return dataset.Task(
          vocabs['source'],
          vocabs['target'],
          splits['train'],
          splits['eval'],
          data_config.max_length + 1,
          splits.get('test'),
      )
  task = task_from_lines(
      data_config, workdir, build_missing, read_lines(), names
  )
  save_cache(
      task,
      os.path.join(
          workdir,
          workdir_files.DATA_CACHE,
          cache_key(data_config, paths, identity),
      ),
  )
  return task


def vocab_task(data_config, workdir: str) -> dataset.Task:
  """The workdir's vocabularies as a Task with empty splits.

  What translating and scoring need: neither the corpus nor its encoded
  cache is read or written, so a workdir translates where its corpus is not.
  """
  files = vocab_files(data_config, os.path.join(workdir, workdir_files.VOCAB))
  missing = [p for p in files.values() if not os.path.exists(p)]
  if missing:
    raise DataError(
        f'vocabulary file {missing[0]} is missing; translate and score use the'
        ' vocabularies that training built into the workdir (is --workdir the'
        ' trained one?)'
    )
  check_vocab_settings(data_config, files)
  empty = dataset.Split([], [], [], [])
  return dataset.Task(
      vocab_lib.load_vocab(data_config.vocab.kind, files['source']),
      vocab_lib.load_vocab(data_config.vocab.kind, files['target']),
      empty,
      empty,
      data_config.max_length + 1,
  )


def task_from_lines(
    data_config, workdir: str, build_missing: bool, lines, names
):
  """lines: {'train'|'eval'|'test': (source lines, target lines)} -> Task.

  The 'test' entry is optional.
  """
  directory = os.path.join(workdir, workdir_files.VOCAB)
  files = vocab_files(data_config, directory)
  if not all(os.path.exists(p) for p in files.values()):
    if not build_missing:
      missing = next(p for p in files.values() if not os.path.exists(p))
      raise DataError(
          f'vocabulary file {missing} is missing; build it with --mode=prepare '
          '(same --config and --workdir)'
      )
    build_vocabs(data_config, directory, *lines['train'])
  else:  # other settings change the cache key: a hit was built with these
    check_vocab_settings(data_config, files)
  source_vocab = vocab_lib.load_vocab(data_config.vocab.kind, files['source'])
  target_vocab = vocab_lib.load_vocab(data_config.vocab.kind, files['target'])
  splits = {
      split: encode_split(
          *pair,
          source_vocab,
          target_vocab,
          data_config.max_length,
          names[split],
          keep_all=split != 'train',
      )[0]
      for split, pair in lines.items()
  }
  return dataset.Task(
      source_vocab,
      target_vocab,
      splits['train'],
      splits['eval'],
      data_config.max_length + 1,
      splits.get('test'),
  )
