"""Plain parallel text corpora (`data.name = 'text:<prefix>'`) and their vocabularies.

Files: `<prefix>.<split>.<lang>` for split in train, dev (validation) and,
optionally, test, one sentence per line, UTF-8, line i of the source file
translating line i of the target file. Pairs with an empty side are skipped,
and so are pairs longer than data.max_length tokens on either side; both are
counted and logged. The vocabularies are built once from the training split
(`--mode=prepare`, or the first training run) into `<workdir>/vocab/`.
"""

import hashlib
import json
import os
import shutil
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
  chunk = 10_000    # lines encoded per call (SentencePiece encodes a list in one C++ call)
  for start in range(0, len(source_lines), chunk):
    sources = source_vocab.encode_lines(source_lines[start:start + chunk], start + 1)
    targets = target_vocab.encode_lines(target_lines[start:start + chunk], start + 1)
    for offset, (source_ids, target_ids) in enumerate(zip(sources, targets)):
      source, target = source_lines[start + offset], target_lines[start + offset]
      if not source.strip() or not target.strip():
        dropped['empty'] += 1
        continue
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
  prefix = data_config.name[len('text:'):]
  src, tgt = data_config.source_lang, data_config.target_lang
  if not prefix:
    raise DataError("data.name='text:' needs a path prefix, e.g. text:corpora/news "
                    'for corpora/news.train.de, corpora/news.dev.de, ...')
  _check_workdir(data_config, workdir)
  for split in ('train', 'eval'):
    if not has_split(prefix, split, src, tgt):
      paths = ' and '.join(split_paths(prefix, split, src, tgt))
      raise DataError(f'the {SPLIT_FILES[split]} split is missing: expected {paths}')
  splits = [s for s in SPLIT_FILES if has_split(prefix, s, src, tgt)]
  names = {split: ' / '.join(split_paths(prefix, split, src, tgt)) for split in splits}
  # The cache is current while every file keeps its size and modification time.
  identity = [(path, os.stat(path).st_size, os.stat(path).st_mtime_ns)
              for split in splits for path in split_paths(prefix, split, src, tgt)]
  return cached_task(data_config, workdir, build_missing, identity, names,
                     lambda: {split: read_split(prefix, split, src, tgt) for split in splits})


def _check_workdir(data_config, workdir):
  if workdir is None:
    raise DataError(f'data.name={data_config.name!r} keeps its vocabulary in the workdir; '
                    'give --workdir')


# ----------------------------------------------------------------- encoded-corpus cache

CACHE_DIR = 'data_cache'
CACHE_SPLITS = ('train', 'eval', 'test')


def cache_key(data_config, vocab_paths: Dict[str, str], identity) -> str:
  """Digest of everything the encoded splits depend on: data fields, vocabularies, sources."""
  digest = hashlib.sha256()
  fields = {k: data_config[k] for k in ('name', 'source_lang', 'target_lang', 'max_length')}
  fields['vocab'] = data_config.vocab.to_dict()
  digest.update(json.dumps([fields, identity], sort_keys=True, default=str).encode())
  for side in ('source', 'target'):
    with open(vocab_paths[side], 'rb') as f:
      digest.update(f.read())
  return digest.hexdigest()[:16]


def save_cache(task, directory: str):
  """Writes the task's encoded splits to `directory` (atomically: a temporary directory renamed)."""
  from nmt_jax import data  # pylint: disable=g-import-not-at-top
  tmp = f'{directory}.tmp-{os.getpid()}'
  os.makedirs(tmp, exist_ok=True)
  for name, split in (('train', task.train), ('eval', task.eval), ('test', task.test)):
    if split is None:
      continue
    data.Ragged.from_rows(split.source).save(os.path.join(tmp, f'{name}.source'))
    data.Ragged.from_rows(split.target).save(os.path.join(tmp, f'{name}.target'))
    if name != 'train':
      with open(os.path.join(tmp, f'{name}.text.json'), 'w', encoding='utf-8') as f:
        json.dump({'source': split.source_text, 'target': split.target_text}, f)
  try:
    os.rename(tmp, directory)
  except OSError:             # another process (host) wrote it first
    shutil.rmtree(tmp, ignore_errors=True)


def load_cache(directory: str):
  """{'train'|'eval'|'test': Split} memory-mapped from `directory`."""
  from nmt_jax import data  # pylint: disable=g-import-not-at-top
  splits = {}
  for name in CACHE_SPLITS:
    if not os.path.exists(os.path.join(directory, f'{name}.source.ids.npy')):
      continue
    texts = {'source': [], 'target': []}
    if name != 'train':
      with open(os.path.join(directory, f'{name}.text.json'), encoding='utf-8') as f:
        texts = json.load(f)
    splits[name] = data.Split(data.Ragged.load(os.path.join(directory, f'{name}.source')),
                              data.Ragged.load(os.path.join(directory, f'{name}.target')),
                              texts['source'], texts['target'])
  return splits


def cached_task(data_config, workdir: str, build_missing: bool, identity, names, read_lines):
  """The Task from <workdir>/data_cache/<key> when current, else read, encode and cache it.

  `read_lines()` -> {'train'|'eval'|'test': (source lines, target lines)}; it is only
  called on a cache miss (reading and encoding WMT takes minutes, mapping the cache
  seconds).
  """
  from nmt_jax import data  # pylint: disable=g-import-not-at-top
  paths = vocab_files(data_config, os.path.join(workdir, 'vocab'))
  if all(os.path.exists(p) for p in paths.values()):
    directory = os.path.join(workdir, CACHE_DIR, cache_key(data_config, paths, identity))
    if os.path.isdir(directory):
      splits = load_cache(directory)
      logging.info('encoded corpus from the cache %s: %s', directory, ', '.join(
          f'{name} {len(split):,} pairs' for name, split in splits.items()))
      return data.Task(vocab_lib.load_vocab(data_config.vocab.kind, paths['source']),
                       vocab_lib.load_vocab(data_config.vocab.kind, paths['target']),
                       splits['train'], splits['eval'], data_config.max_length + 1,
                       splits.get('test'))
  task = task_from_lines(data_config, workdir, build_missing, read_lines(), names)
  save_cache(task, os.path.join(workdir, CACHE_DIR, cache_key(data_config, paths, identity)))
  return task


def task_from_lines(data_config, workdir: str, build_missing: bool, lines, names):
  """lines: {'train'|'eval'|'test': (source lines, target lines)} -> Task (test optional)."""
  from nmt_jax import data  # pylint: disable=g-import-not-at-top
  directory = os.path.join(workdir, 'vocab')
  files = vocab_files(data_config, directory)
  if not all(os.path.exists(p) for p in files.values()):
    if not build_missing:
      missing = next(p for p in files.values() if not os.path.exists(p))
      raise DataError(f'vocabulary file {missing} is missing; build it with --mode=prepare '
                      '(same --config and --workdir)')
    build_vocabs(data_config, directory, *lines['train'])
  source_vocab = vocab_lib.load_vocab(data_config.vocab.kind, files['source'])
  target_vocab = vocab_lib.load_vocab(data_config.vocab.kind, files['target'])
  splits = {split: encode_split(*pair, source_vocab, target_vocab, data_config.max_length,
                                names[split])[0] for split, pair in lines.items()}
  return data.Task(source_vocab, target_vocab, splits['train'], splits['eval'],
                   data_config.max_length + 1, splits.get('test'))


# ----------------------------------------------------------------- TFDS

# Builder -> module whose import registers it (without TensorFlow, `import
# tensorflow_datasets` does not register the translate builders; API_NOTES §7).
TFDS_MODULES = {'wmt14_translate': 'wmt14', 'wmt15_translate': 'wmt15',
                'wmt17_translate': 'wmt17', 'ted_hrlr_translate': 'ted_hrlr'}
TFDS_SPLITS = {'train': 'train', 'eval': 'validation', 'test': 'test'}


def tfds_builder(data_config):
  """The TFDS builder of `tfds:<builder>/<config>`, checked against data.*_lang."""
  try:
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise DataError(f'data.name={data_config.name!r} needs TensorFlow Datasets; '
                    "pip install -e '.[data]'") from None
  import importlib  # pylint: disable=g-import-not-at-top
  name = data_config.name[len('tfds:'):]
  builder_name, _, config_name = name.partition('/')
  if builder_name not in TFDS_MODULES or not config_name:
    raise DataError(f'data.name={data_config.name!r}: use tfds:<builder>/<config> with builder one '
                    f'of {", ".join(TFDS_MODULES)}, e.g. tfds:wmt17_translate/de-en')
  importlib.import_module(f'tensorflow_datasets.translate.{TFDS_MODULES[builder_name]}')
  configs = {c.name: c for c in tfds.builder_cls(builder_name).BUILDER_CONFIGS}
  if config_name not in configs:
    raise DataError(f'{builder_name} has no config {config_name!r}; use one of '
                    f'{", ".join(sorted(configs))}')
  pair = tuple(configs[config_name].language_pair)
  wanted = (data_config.source_lang, data_config.target_lang)
  if set(wanted) != set(pair):
    raise DataError(f'{builder_name}/{config_name} has the languages {pair[0]} and {pair[1]}, not '
                    f'{wanted[0]}->{wanted[1]}; set --config.data.source_lang and '
                    '--config.data.target_lang to those two (in either order)')
  data_dir = data_config.tfds_data_dir or None
  return tfds, tfds.builder(name, data_dir=data_dir, file_format='array_record'), name, data_dir


def prepare_tfds(data_config):
  """Downloads and prepares the dataset as array_record (the one step that may need the network)."""
  tfds, builder, name, _ = tfds_builder(data_config)
  if builder.is_prepared():
    logging.info('%s is already prepared in %s', name, builder.data_dir)
    return
  logging.info('preparing %s in %s (downloads the corpus)', name, builder.data_dir)
  try:
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=data_config.tfds_manual_dir or None))
  except Exception as e:  # pylint: disable=broad-except  (network, missing manual files, ...)
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
    raise DataError(f'could not prepare {name} ({first}); without network, download its files '
                    'elsewhere and place them in --config.data.tfds_manual_dir') from None


def _as_text(value) -> str:
  # Prepared records hold bytes; tfds.testing.mock_data gives str.
  return value.decode('utf-8') if isinstance(value, bytes) else value


def load_tfds_task(data_config, workdir: Optional[str], build_missing: bool):
  """The Task of a prepared `tfds:<builder>/<config>` corpus (read with tfds.data_source)."""
  tfds, builder, name, data_dir = tfds_builder(data_config)
  _check_workdir(data_config, workdir)
  available = set(builder.info.splits.keys()) if builder.is_prepared() else set()
  sources, names = {}, {}
  for split, tfds_split in TFDS_SPLITS.items():
    if available and tfds_split not in available:
      if split == 'test':
        continue
      raise DataError(f'{name} has no {tfds_split!r} split (it has {", ".join(sorted(available))})')
    try:
      source = tfds.data_source(name, split=tfds_split, data_dir=data_dir, download=False)
    except Exception:  # pylint: disable=broad-except  (not prepared, or not as array_record)
      raise DataError(f'{name} is not prepared (as array_record) in {builder.data_dir}; run the '
                      'same command with --mode=prepare first (it downloads the corpus)') from None
    sources[split] = source
    names[split] = f'{name} {tfds_split}'
  src, tgt = data_config.source_lang, data_config.target_lang
  identity = [str(builder.data_dir), str(builder.version)] + [
      (split, len(source)) for split, source in sources.items()]
  return cached_task(data_config, workdir, build_missing, identity, names, lambda: {
      split: ([_as_text(r[src]) for r in source], [_as_text(r[tgt]) for r in source])
      for split, source in sources.items()})
