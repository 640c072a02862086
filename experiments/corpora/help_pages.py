"""A real English->German corpus of long segments from translated help pages.

  apt-get download libreoffice-help-en-us libreoffice-help-de \\
      gnome-user-docs gimp-help-en gimp-help-de        # into DEBS
  python -m experiments.corpora.help_pages --debs=DEBS --output=DIR
  python -m experiments.corpora.help_pages --root=/ --output=DIR  # installed

Documentation is translated paragraph by paragraph, so its segments are as
long as the sentences of news text (20-40 words), where gettext messages
average 13 pieces. Three sets of help pages are paired:

  libreoffice  usr/share/libreoffice/help/{en-US,de}/**/*.html: every <p> and
               heading carries the same id in both languages (par_id...);
               pairs are (file, id) matches. Code listings are left out.
  gnome        usr/share/help/{C,de}/*/*.page (Mallard XML, translated by
               itstool from the same source): the <p>, <title> and <desc>
               elements of a page, in document order, when both languages
               have as many.
  gimp         usr/share/gimp/2.0/help/{en,de}/**/*.html (DocBook HTML built
               per language from one source): the outermost <p>, headings,
               <dt> and table cells in document order, when the counts match.

Each text is one line (markup dropped, white space collapsed). A pair is kept
when the two sides differ, each has two letters, and the English side has at
least --min_words words (5: headings, menu paths and labels are not
sentences); duplicate pairs are dropped. Pairs are split by a hash of their
English side, as the gettext builder does (experiments/corpora/
gettext_catalogues.py), and written the same way:

  DIR/corpus.{train,dev,test}.{en,de}
  DIR/manifest.json   packages and versions, per source the files read and
                      paired and the pairs kept, counts, words per line
"""

import argparse
import collections
import glob
import html.parser
import os
import subprocess
import sys
import tempfile
from typing import Dict, Iterator, List, Optional, Sequence, Tuple
import xml.etree.ElementTree as ElementTree

from experiments.corpora import gettext_catalogues

# source: (packages, English folder, German folder, file pattern)
SOURCES = {
    'libreoffice': (
        ('libreoffice-help-en-us', 'libreoffice-help-de'),
        'usr/share/libreoffice/help/en-US',
        'usr/share/libreoffice/help/de',
        '**/*.html',
    ),
    'gnome': (
        ('gnome-user-docs',),
        'usr/share/help/C',
        'usr/share/help/de',
        '*/*.page',
    ),
    'gimp': (
        ('gimp-help-en', 'gimp-help-de'),
        'usr/share/gimp/2.0/help/en',
        'usr/share/gimp/2.0/help/de',
        '**/*.html',
    ),
}
_HEADINGS = ('h1', 'h2', 'h3', 'h4', 'h5', 'h6')
_MALLARD = '{http://projectmallard.org/1.0/}'


class _Blocks(html.parser.HTMLParser):
  """The text of the outermost block elements of an HTML page.

  blocks: [(id or None, class, text)] in document order; text nested in an
  inner block (a <p> in a table cell) belongs to the outer one.
  """

  def __init__(self, tags: Sequence[str]):
    super().__init__(convert_charrefs=True)
    self.tags = tuple(tags)
    self.open: List[list] = []  # [tag, id, class, parts]
    self.blocks: List[Tuple[Optional[str], str, str]] = []

  def handle_starttag(self, tag, attrs):
    if tag in self.tags:
      attrs = dict(attrs)
      self.open.append([tag, attrs.get('id'), attrs.get('class') or '', []])
    elif tag == 'br' and self.open:
      self.open[-1][3].append(' ')

  def handle_endtag(self, tag):
    if not self.open or self.open[-1][0] != tag:
      return
    _, block_id, klass, parts = self.open.pop()
    text = gettext_catalogues._one_line(''.join(parts))  # pylint: disable=protected-access
    if self.open:
      self.open[-1][3].append(' ' + text + ' ')
    else:
      self.blocks.append((block_id, klass, text))

  def handle_data(self, data):
    if self.open:
      self.open[-1][3].append(data)


def _html_blocks(path: str, tags: Sequence[str]):
  parser = _Blocks(tags)
  with open(path, encoding='utf-8') as f:
    parser.feed(f.read())
  parser.close()
  return parser.blocks


def libreoffice_pairs(english: str, german: str) -> Iterator[Tuple[str, str]]:
  """Paragraphs and headings of two pages matched by their ids."""
  tags = ('p',) + _HEADINGS
  translated = {
      block_id: text
      for block_id, _, text in _html_blocks(german, tags)
      if block_id
  }
  for block_id, klass, text in _html_blocks(english, tags):
    if block_id in translated and 'code' not in klass.split():
      yield text, translated[block_id]


def _in_order(english: List[str], german: List[str]):
  """Pairs in document order, or None where the structures differ."""
  return list(zip(english, german)) if len(english) == len(german) else None


def gnome_pairs(english: str, german: str):
  """<p>, <title> and <desc> of two Mallard pages, in document order."""

  def texts(path):
    tags = {_MALLARD + t for t in ('p', 'title', 'desc')}
    root = ElementTree.parse(path).getroot()
    return [
        gettext_catalogues._one_line(''.join(e.itertext()))  # pylint: disable=protected-access
        for e in root.iter()
        if e.tag in tags
    ]

  return _in_order(texts(english), texts(german))


def gimp_pairs(english: str, german: str):
  """Outermost paragraphs, headings, terms and cells, in document order."""
  tags = ('p', 'dt', 'td', 'th') + _HEADINGS

  def texts(path):
    return [text for _, _, text in _html_blocks(path, tags)]

  return _in_order(texts(english), texts(german))


_PAIRS = {
    'libreoffice': libreoffice_pairs,
    'gnome': gnome_pairs,
    'gimp': gimp_pairs,
}


def source_pairs(root: str, source: str):
  """([(English, German)], files read, files paired) of one source."""
  _, english_dir, german_dir, pattern = SOURCES[source]
  english_dir = os.path.join(root, english_dir)
  german_dir = os.path.join(root, german_dir)
  pairs, read, paired = [], 0, 0
  for english in sorted(
      glob.glob(os.path.join(english_dir, pattern), recursive=True)
  ):
    german = os.path.join(german_dir, os.path.relpath(english, english_dir))
    if not os.path.isfile(german):
      continue
    read += 1
    try:
      found = _PAIRS[source](english, german)
      found = None if found is None else list(found)
    except (ElementTree.ParseError, UnicodeDecodeError) as e:
      print(f'skipped {english}: {e}', file=sys.stderr)
      continue
    if found is None:  # the two pages' structures differ
      continue
    paired += 1
    pairs.extend(found)
  return pairs, read, paired


def _keep(english: str, german: str, min_words: int) -> bool:
  return (
      english != german
      and len(english.split()) >= min_words
      and gettext_catalogues._has_words(english)  # pylint: disable=protected-access
      and gettext_catalogues._has_words(german)  # pylint: disable=protected-access
  )


def build(
    root: str,
    versions: Dict[str, Optional[str]],
    min_words: int = 5,
    dev: float = 0.03,
    test: float = 0.03,
):
  """({split: [(English, German)]}, manifest) of the help pages under root."""
  seen = set()
  splits = collections.defaultdict(list)
  sources = []
  for source, (packages, *_) in SOURCES.items():
    pairs, read, paired = source_pairs(root, source)
    kept = 0
    for pair in pairs:
      if pair in seen or not _keep(*pair, min_words):
        continue
      seen.add(pair)
      splits[gettext_catalogues.split_of(pair[0], dev, test)].append(pair)
      kept += 1
    sources.append({
        'source': source,
        'packages': {p: versions.get(p) for p in packages},
        'files_read': read,
        'files_paired': paired,
        'pairs_read': len(pairs),
        'pairs': kept,
    })
  if not seen:
    raise ValueError(
        f'no translated help pages under {root}; give --debs=DIR with the'
        ' downloaded packages (apt-get download '
        + ' '.join(p for packages, *_ in SOURCES.values() for p in packages)
        + ') or install them'
    )
  for pairs in splits.values():
    pairs.sort()
  manifest = {
      'source_lang': 'en',
      'target_lang': 'de',
      'min_words': min_words,
      'sources': sources,
      'pairs': {name: len(splits[name]) for name in ('train', 'dev', 'test')},
      'split': {'dev': dev, 'test': test, 'by': 'sha256 of the English side'},
      'statistics': {
          name: {
              side: gettext_catalogues.statistics(p[i] for p in splits[name])
              for i, side in enumerate(('en', 'de'))
          }
          for name in ('train', 'dev', 'test')
      },
  }
  return dict(splits), manifest


def _control(deb: str, field: str) -> str:
  return subprocess.run(
      ['dpkg-deb', '--field', deb, field],
      check=True,
      capture_output=True,
      text=True,
  ).stdout.strip()


def extract_debs(debs: str, root: str) -> Dict[str, str]:
  """Unpacks every .deb of the folder into root; {package: version}."""
  versions = {}
  for deb in sorted(glob.glob(os.path.join(debs, '*.deb'))):
    versions[_control(deb, 'Package')] = _control(deb, 'Version')
    subprocess.run(['dpkg-deb', '--extract', deb, root], check=True)
  return versions


def installed_versions() -> Dict[str, Optional[str]]:
  versions = {}
  for packages, *_ in SOURCES.values():
    for package in packages:
      result = subprocess.run(
          ['dpkg-query', '--show', '--showformat=${Version}', package],
          capture_output=True,
          text=True,
      )
      versions[package] = result.stdout.strip() or None
  return versions


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--output', required=True, help='folder to write')
  parser.add_argument(
      '--debs', help='folder of the downloaded .deb packages (else --root)'
  )
  parser.add_argument(
      '--root', default='/', help='where packages are installed'
  )
  parser.add_argument('--min_words', type=int, default=5)
  parser.add_argument('--dev', type=float, default=0.03)
  parser.add_argument('--test', type=float, default=0.03)
  args = parser.parse_args(argv)
  if not (0 <= args.dev and 0 <= args.test and args.dev + args.test < 1):
    parser.error('--dev and --test are fractions that sum to less than 1')
  problem = gettext_catalogues.output_problem(args.output)
  if problem:
    parser.error(problem)
  try:
    if args.debs:
      if not glob.glob(os.path.join(args.debs, '*.deb')):
        raise ValueError(f'no .deb files in --debs={args.debs}')
      with tempfile.TemporaryDirectory() as root:
        versions = extract_debs(args.debs, root)
        splits, manifest = build(
            root, versions, args.min_words, args.dev, args.test
        )
    else:
      splits, manifest = build(
          args.root, installed_versions(), args.min_words, args.dev, args.test
      )
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  gettext_catalogues.write(args.output, splits, manifest, 'de')
  counts = manifest['pairs']
  print(
      ', '.join(f'{s["source"]} {s["pairs"]:,}' for s in manifest['sources'])
      + f' pairs: train {counts["train"]:,}, dev {counts["dev"]:,},'
      f' test {counts["test"]:,} in {args.output}'
  )
  return 0


if __name__ == '__main__':
  sys.exit(main())
