"""A real English->X parallel corpus from the gettext catalogues of a machine.

  python -m experiments.corpora.gettext_catalogues --output=DIR [--lang=de]
      [--locale_dir=/usr/share/locale] [--dev=0.02] [--test=0.02]

Every Debian/Ubuntu machine holds translated user-interface messages of its
installed packages: /usr/share/locale/<lang>/LC_MESSAGES/*.mo (more come with
`apt-get install` of packages, e.g. the `*-locales` ones). This reads them
with Python's gettext, one line a message (line breaks and tabs become
spaces; format placeholders such as `%s` or `{name}` stay as they are; a
plural entry gives its singular and first form), drops duplicate pairs,
untranslated ones and those without two letters a side, and splits them by a
hash of the English side (the same English line always lands in the same
split, so the same image gives the same corpus). It writes

  DIR/corpus.train.en DIR/corpus.train.<lang> DIR/corpus.dev.* DIR/corpus.test.*
  DIR/manifest.json   catalogues, their packages and versions, the counts
                      and each split's length statistics (whitespace words)

Train on it with `--config.data.name=text:DIR/corpus` (data.source_lang=en,
data.target_lang=<lang>); docs/data.md describes text corpora.
"""

import argparse
import collections
import gettext
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
from typing import Dict, Iterator, List, Optional, Tuple

_SPACE = re.compile(r'\s+')


def _one_line(text: str) -> str:
  return _SPACE.sub(' ', text).strip()


def _has_words(text: str) -> bool:
  """At least two letters: not a lone placeholder, number or symbol."""
  return sum(c.isalpha() for c in text) >= 2


def catalogue_pairs(path: str) -> Iterator[Tuple[str, str]]:
  """(English, translation) pairs of one .mo catalogue, one line each."""
  with open(path, 'rb') as f:
    catalogue = gettext.GNUTranslations(f)._catalog  # pylint: disable=protected-access
  for key, translation in catalogue.items():
    if isinstance(key, tuple):  # (singular msgid, plural form n)
      # gettext keeps no English plural: the singular with the first form.
      key, n = key
      if n != 0:
        continue
    if not key:  # the header
      continue
    # msgctxt arrives as 'context\x04msgid'.
    english = key.split('\x04', 1)[-1]
    yield _one_line(english), _one_line(translation)


def _package(path: str) -> Dict[str, Optional[str]]:
  """{'package': name, 'version': version} that installed `path` (dpkg)."""
  try:
    owner = subprocess.run(
        ['dpkg', '-S', path], capture_output=True, text=True, check=True
    ).stdout.split(':')[0]
    version = subprocess.run(
        ['dpkg-query', '-W', '-f=${Version}', owner],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
  except (OSError, subprocess.CalledProcessError):
    return {'package': None, 'version': None}
  return {'package': owner, 'version': version}


def split_of(english: str, dev: float, test: float) -> str:
  """'train', 'dev' or 'test', from a hash of the English side."""
  digest = hashlib.sha256(english.encode('utf-8')).digest()
  fraction = int.from_bytes(digest[:8], 'big') / 2**64
  if fraction < test:
    return 'test'
  if fraction < test + dev:
    return 'dev'
  return 'train'


def build(
    locale_dir: str, lang: str, dev: float = 0.02, test: float = 0.02
) -> Tuple[Dict[str, List[Tuple[str, str]]], Dict]:
  """({split: [(English, translation)]}, manifest) of the catalogues."""
  paths = sorted(
      glob.glob(os.path.join(locale_dir, lang, 'LC_MESSAGES', '*.mo'))
  )
  if not paths:
    raise ValueError(
        f'no catalogues in {locale_dir}/{lang}/LC_MESSAGES; pick a --lang that'
        f' {locale_dir} has (ls {locale_dir}), or install packages with'
        ' translations'
    )
  seen, catalogues = set(), []
  splits = collections.defaultdict(list)
  read = 0
  for path in paths:
    try:
      pairs = list(catalogue_pairs(path))
    except (OSError, ValueError, UnicodeDecodeError) as e:
      print(f'skipped {path}: {e}', file=sys.stderr)
      continue
    kept = 0
    for english, translation in pairs:
      read += 1
      pair = (english, translation)
      if english == translation or not (
          _has_words(english) and _has_words(translation)
      ):
        continue
      if pair in seen:
        continue
      seen.add(pair)
      splits[split_of(english, dev, test)].append(pair)
      kept += 1
    catalogues.append(
        {'file': os.path.basename(path), 'pairs': kept, **_package(path)}
    )
  for pairs in splits.values():
    pairs.sort()
  manifest = {
      'source_lang': 'en',
      'target_lang': lang,
      'locale_dir': locale_dir,
      'pairs_read': read,
      'pairs': {name: len(splits[name]) for name in ('train', 'dev', 'test')},
      'split': {'dev': dev, 'test': test, 'by': 'sha256 of the English side'},
      'catalogues': catalogues,
      'statistics': {
          name: {
              side: statistics(pair[i] for pair in splits[name])
              for i, side in enumerate(('en', lang))
          }
          for name in ('train', 'dev', 'test')
      },
  }
  return dict(splits), manifest


def statistics(lines) -> Dict[str, float]:
  """Words per line (whitespace tokens): mean, median, p95, max; types."""
  lengths, types = [], set()
  for line in lines:
    words = line.split()
    lengths.append(len(words))
    types.update(words)
  if not lengths:
    return {}
  lengths.sort()
  return {
      'words': sum(lengths),
      'mean_words': round(sum(lengths) / len(lengths), 2),
      'median_words': lengths[len(lengths) // 2],
      'p95_words': lengths[int(0.95 * (len(lengths) - 1))],
      'max_words': lengths[-1],
      'distinct_words': len(types),
  }


def write(output: str, splits, manifest, lang: str):
  os.makedirs(output, exist_ok=True)
  for name in ('train', 'dev', 'test'):
    pairs = splits.get(name, [])
    for side, suffix in ((0, 'en'), (1, lang)):
      with open(
          os.path.join(output, f'corpus.{name}.{suffix}'), 'w', encoding='utf-8'
      ) as f:
        f.writelines(pair[side] + '\n' for pair in pairs)
  with open(os.path.join(output, 'manifest.json'), 'w') as f:
    json.dump(manifest, f, indent=2)
    f.write('\n')


def output_problem(output: str) -> Optional[str]:
  """Why the folder --output names cannot be made or written, else None."""
  folder = os.path.abspath(output)
  while not os.path.exists(folder):
    folder = os.path.dirname(folder)
  if not os.path.isdir(folder):
    return (
        f'--output={output}: {folder} is a file; name a folder (it is made'
        ' if it does not exist)'
    )
  if not os.access(folder, os.W_OK):
    return f'--output={output}: {folder} cannot be written; name another folder'
  return None


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--output', required=True, help='folder to write')
  parser.add_argument('--lang', default='de', help='target language code')
  parser.add_argument('--locale_dir', default='/usr/share/locale')
  parser.add_argument('--dev', type=float, default=0.02)
  parser.add_argument('--test', type=float, default=0.02)
  args = parser.parse_args(argv)
  if not (0 <= args.dev and 0 <= args.test and args.dev + args.test < 1):
    parser.error('--dev and --test are fractions that sum to less than 1')
  problem = output_problem(args.output)
  if problem:
    parser.error(problem)
  try:
    splits, manifest = build(args.locale_dir, args.lang, args.dev, args.test)
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  write(args.output, splits, manifest, args.lang)
  counts = manifest['pairs']
  print(
      f'{len(manifest["catalogues"])} catalogues, {manifest["pairs_read"]:,}'
      f' entries read: train {counts["train"]:,}, dev {counts["dev"]:,},'
      f' test {counts["test"]:,} pairs in {args.output}'
  )
  return 0


if __name__ == '__main__':
  sys.exit(main())
