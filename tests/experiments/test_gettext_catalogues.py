"""The gettext-catalogue corpus builder, on catalogues written here."""

import json
import struct

import pytest

from experiments.corpora import gettext_catalogues as gettext_corpus

HEADER = (
    'Content-Type: text/plain; charset=UTF-8\n'
    'Plural-Forms: nplurals=2; plural=(n != 1);\n'
)


def _write_mo(path, messages):
  """A GNU .mo file of {msgid: msgstr} (the format gettext reads)."""
  messages = {'': HEADER, **messages}
  keys = sorted(messages)
  ids = [k.encode('utf-8') for k in keys]
  strs = [messages[k].encode('utf-8') for k in keys]
  start = 7 * 4 + 16 * len(keys)
  table_ids, table_strs, data = [], [], b''
  for blob, table in [(b, table_ids) for b in ids] + [
      (b, table_strs) for b in strs
  ]:
    table.append((len(blob), start + len(data)))
    data += blob + b'\0'
  header = struct.pack(
      '<7I', 0x950412DE, 0, len(keys), 28, 28 + 8 * len(keys), 0, 0
  )
  tables = b''.join(struct.pack('<2I', *e) for e in table_ids + table_strs)
  path.write_bytes(header + tables + data)


def test_pairs_are_one_line_deduplicated_and_split_by_the_english(tmp_path):
  folder = tmp_path / 'de' / 'LC_MESSAGES'
  folder.mkdir(parents=True)
  _write_mo(
      folder / 'a.mo',
      {
          'Open %s': 'Öffne %s',
          'Line one\nline two': 'Zeile eins\nZeile zwei',
          '%d file\x00%d files': '%d Datei\x00%d Dateien',
          'menu\x04Quit': 'Beenden',
          '%s': '%s',  # no words
          'OK': 'OK',  # untranslated
      },
  )
  _write_mo(
      folder / 'b.mo',
      {'Open %s': 'Öffne %s', 'Close {name}': 'Schließe {name}'},
  )
  splits, manifest = gettext_corpus.build(str(tmp_path), 'de', 0.3, 0.3)
  pairs = sorted(p for split in splits.values() for p in split)
  assert pairs == [
      ('%d file', '%d Datei'),  # a plural entry: singular, first form
      ('Close {name}', 'Schließe {name}'),
      ('Line one line two', 'Zeile eins Zeile zwei'),
      ('Open %s', 'Öffne %s'),  # once, though in both catalogues
      ('Quit', 'Beenden'),
  ]
  for name, split in splits.items():
    assert all(gettext_corpus.split_of(e, 0.3, 0.3) == name for e, _ in split)
  assert [c['pairs'] for c in manifest['catalogues']] == [4, 1]
  assert sum(manifest['pairs'].values()) == 5
  # Written as a text corpus, the same again from the same catalogues.
  out = tmp_path / 'corpus'
  gettext_corpus.write(str(out), splits, manifest, 'de')
  again = tmp_path / 'again'
  gettext_corpus.main([
      f'--output={again}',
      f'--locale_dir={tmp_path}',
      '--dev=0.3',
      '--test=0.3',
  ])
  for name in ('train', 'dev', 'test'):
    for lang in ('en', 'de'):
      text = (out / f'corpus.{name}.{lang}').read_text()
      assert text == (again / f'corpus.{name}.{lang}').read_text()
  en = (out / 'corpus.train.en').read_text().splitlines()
  de = (out / 'corpus.train.de').read_text().splitlines()
  assert len(en) == len(de) == manifest['pairs']['train']
  assert json.loads((out / 'manifest.json').read_text())['target_lang'] == 'de'
  assert gettext_corpus.statistics(['a b c', 'a', 'b c d e f', 'x y']) == {
      'words': 11,
      'mean_words': 2.75,
      'median_words': 3,
      'p95_words': 3,  # of 4 lines, the 3rd shortest (int(0.95 * 3) = 2)
      'max_words': 5,
      'distinct_words': 8,
  }


def test_a_language_without_catalogues_is_one_line(tmp_path, capsys):
  assert gettext_corpus.main(['--output=x', f'--locale_dir={tmp_path}']) == 2
  (line,) = capsys.readouterr().err.strip().splitlines()
  assert line.startswith(f'error: no catalogues in {tmp_path}/de/LC_MESSAGES')


def test_an_output_under_a_file_is_one_line(tmp_path, capsys):
  (tmp_path / 'file').write_text('kept')
  for output in (tmp_path / 'file', tmp_path / 'file' / 'sub'):
    with pytest.raises(SystemExit) as e:
      gettext_corpus.main([f'--output={output}', f'--locale_dir={tmp_path}'])
    assert e.value.code == 2
    assert f'{tmp_path / "file"} is a file' in capsys.readouterr().err
  assert (tmp_path / 'file').read_text() == 'kept'
