"""TFDS translation corpora (`data.name = 'tfds:<builder>/<config>'`).

Prepared once as array_record (`--mode=prepare`, the one step that may need
the network), then read with `tfds.data_source`: training never imports
TensorFlow. tensorflow-datasets is the optional 'data' extra, imported only
here and only when a tfds: corpus is used.
"""

import errno
import importlib
from typing import Optional

from absl import logging

from nmt_jax.data import encoding
from nmt_jax.system.errors import DataError

# Builder -> module whose import registers it (without TensorFlow, `import
# tensorflow_datasets` does not register the translate builders).
TFDS_MODULES = {
    'wmt14_translate': 'wmt14',
    'wmt15_translate': 'wmt15',
    'wmt17_translate': 'wmt17',
    'ted_hrlr_translate': 'ted_hrlr',
}
TFDS_SPLITS = {'train': 'train', 'eval': 'validation', 'test': 'test'}


def tfds_builder(data_config):
  """The `tfds:<builder>/<config>` TFDS builder, checked against data.*_lang."""
  try:
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise DataError(
        f'data.name={data_config.name!r} needs TensorFlow Datasets; '
        "pip install -e '.[data]'"
    ) from None
  name = data_config.name[len('tfds:') :]
  builder_name, _, config_name = name.partition('/')
  if builder_name not in TFDS_MODULES or not config_name:
    raise DataError(
        f'data.name={data_config.name!r}: use tfds:<builder>/<config> with'
        f' builder one of {", ".join(TFDS_MODULES)}, e.g.'
        ' tfds:wmt17_translate/de-en'
    )
  importlib.import_module(
      f'tensorflow_datasets.translate.{TFDS_MODULES[builder_name]}'
  )
  configs = {c.name: c for c in tfds.builder_cls(builder_name).BUILDER_CONFIGS}
  if config_name not in configs:
    raise DataError(
        f'{builder_name} has no config {config_name!r}; use one of '
        f'{", ".join(sorted(configs))}'
    )
  pair = tuple(configs[config_name].language_pair)
  wanted = (data_config.source_lang, data_config.target_lang)
  if set(wanted) != set(pair):
    raise DataError(
        f'{builder_name}/{config_name} has the languages {pair[0]} and'
        f' {pair[1]}, not {wanted[0]}->{wanted[1]}; set'
        ' --config.data.source_lang and --config.data.target_lang to those two'
        ' (in either order)'
    )
  data_dir = data_config.tfds_data_dir or None
  return (
      tfds,
      tfds.builder(name, data_dir=data_dir, file_format='array_record'),
      name,
      data_dir,
  )


def prepare(data_config):
  """Downloads and prepares the dataset as array_record.

  This is the one step that may need the network.
  """
  tfds, builder, name, _ = tfds_builder(data_config)
  if builder.is_prepared():
    logging.info('%s is already prepared in %s', name, builder.data_dir)
    return
  logging.info(
      'preparing %s in %s (downloads the corpus)', name, builder.data_dir
  )
  try:
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(
            manual_dir=data_config.tfds_manual_dir or None
        )
    )
  except ImportError as e:  # a package tensorflow-datasets needs here
    raise DataError(
        f'could not prepare {name}: {e}; install it (pip install'
        f' {e.name or "the missing package"}) and run --mode=prepare again'
    ) from None
  # Broad on purpose (network, missing manual files, ...).
  except Exception as e:  # pylint: disable=broad-except
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
    local = (
        isinstance(e, (FileExistsError, PermissionError, NotADirectoryError))
        or getattr(e, 'errno', None) == errno.ENOSPC
    )
    fix = (
        f'check --config.data.tfds_data_dir ({builder.data_dir}): it must be'
        ' a writable folder with room for the corpus'
        if local
        else (
            'without network, download its files elsewhere and place them'
            ' in --config.data.tfds_manual_dir'
        )
    )
    raise DataError(f'could not prepare {name} ({first}); {fix}') from None


def _as_text(value) -> str:
  # Prepared records hold bytes; tfds.testing.mock_data gives str.
  return value.decode('utf-8') if isinstance(value, bytes) else value


def load_task(data_config, workdir: Optional[str], build_missing: bool):
  """The Task of a prepared `tfds:<builder>/<config>` corpus.

  The corpus is read with tfds.data_source.
  """
  tfds, builder, name, data_dir = tfds_builder(data_config)
  encoding.require_workdir(data_config, workdir)
  available = (
      set(builder.info.splits.keys()) if builder.is_prepared() else set()
  )
  sources, names = {}, {}
  for split, tfds_split in TFDS_SPLITS.items():
    if available and tfds_split not in available:
      if split == 'test':
        continue
      raise DataError(
          f'{name} has no {tfds_split!r} split (it has'
          f' {", ".join(sorted(available))})'
      )
    try:
      source = tfds.data_source(
          name, split=tfds_split, data_dir=data_dir, download=False
      )
    # Broad on purpose (not prepared, or not as array_record).
    except Exception:  # pylint: disable=broad-except
      raise DataError(
          f'{name} is not prepared (as array_record) in {builder.data_dir}; run'
          ' the same command with --mode=prepare first (it downloads the'
          ' corpus)'
      ) from None
    sources[split] = source
    names[split] = f'{name} {tfds_split}'
  src, tgt = data_config.source_lang, data_config.target_lang
  identity = [str(builder.data_dir), str(builder.version)] + [
      (split, len(source)) for split, source in sources.items()
  ]
  return encoding.cached_task(
      data_config,
      workdir,
      build_missing,
      identity,
      names,
      lambda: {
          split: read_pairs(source, src, tgt)
          for split, source in sources.items()
      },
  )


def read_pairs(source, source_lang: str, target_lang: str, chunk=10_000):
  """(source lines, target lines) of a TFDS data source, each record read once.

  In chunks through `__getitems__` where the source has it: an array_record
  source read record by record took 1.5 ms a record (50,000 pairs: 74 s, one
  core), in chunks 0.03 ms (1.4 s).
  """
  sources, targets = [], []
  for start in range(0, len(source), chunk):
    keys = list(range(start, min(start + chunk, len(source))))
    for record in _read_records(source, keys):
      sources.append(_as_text(record[source_lang]))
      targets.append(_as_text(record[target_lang]))
  return sources, targets


def _read_records(source, keys):
  try:
    return source.__getitems__(keys)
  # No batched reads, or tfds.testing.mock_data's (TFDS 4.9), which fails
  # with a TypeError; a real error comes again from the reads one by one.
  except (AttributeError, TypeError):
    return [source[k] for k in keys]
