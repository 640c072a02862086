"""The help-page corpus builder, on pages written here in each source's form."""

import json

from experiments.corpora import help_pages

LONG_EN = 'Choose the frame that you want to edit and open its properties.'
LONG_DE = 'Wählen Sie den Rahmen aus, den Sie bearbeiten möchten.'


def _write(root, relative, text):
  path = root / relative
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(text, encoding='utf-8')


def _libreoffice(root):
  en = 'usr/share/libreoffice/help/en-US/text/frame.html'
  de = 'usr/share/libreoffice/help/de/text/frame.html'
  _write(
      root,
      en,
      '<html><body><h1 id="hd_1">Frames</h1><p id="par_1"'
      f' class="paragraph">{LONG_EN.replace("edit", "<b>edit</b>")}</p><p'
      ' id="par_2" class="code">print(frame.width) for each frame here</p><p'
      ' id="par_3" class="listitem">Only in English, five words long.</p><p'
      ' id="par_4" class="paragraph">Ordered first here, matched by its'
      ' id.</p></body></html>',
  )
  _write(
      root,
      de,
      '<html><body><h1 id="hd_1">Rahmen</h1>'
      '<p id="par_4" class="paragraph">Hier zuerst, über die Kennung'
      ' zugeordnet.</p>'
      f'<p id="par_1" class="paragraph">{LONG_DE}</p>'
      '<p id="par_2" class="code">print(frame.width) für jeden Rahmen hier</p>'
      '</body></html>',
  )


def _gnome(root):
  page = (
      '<page xmlns="http://projectmallard.org/1.0/" id="a">'
      '<info><desc>{desc}</desc></info><title>{title}</title>'
      '<p>{p}</p>{extra}</page>'
  )
  en = {'desc': 'Keep the keyboard from repeating your key presses.'}
  de = {'desc': 'Verhindern, dass die Tastatur Tastendrücke wiederholt.'}
  _write(
      root,
      'usr/share/help/C/gnome-help/keys.page',
      page.format(
          **en,
          title='Keys',
          p='Press <key>Ctrl</key> and the key you want.',
          extra='',
      ),
  )
  _write(
      root,
      'usr/share/help/de/gnome-help/keys.page',
      page.format(
          **de,
          title='Tasten',
          p='Drücken Sie <key>Strg</key> und die Taste.',
          extra='',
      ),
  )
  # One more paragraph in the translation: the page's structure differs.
  _write(
      root,
      'usr/share/help/C/gnome-help/other.page',
      page.format(
          desc='A description of this other page here.',
          title='T',
          p='One paragraph of five words.',
          extra='',
      ),
  )
  _write(
      root,
      'usr/share/help/de/gnome-help/other.page',
      page.format(
          desc='Eine Beschreibung dieser anderen Seite hier.',
          title='T',
          p='Ein Absatz.',
          extra='<p>Noch einer, der fehlt.</p>',
      ),
  )


def _gimp(root):
  _write(
      root,
      'usr/share/gimp/2.0/help/en/filters.html',
      '<html><body><h2>8.1. Overview</h2><table><tr><td><p>This filter'
      ' blurs the layer by the given radius.</p></td></tr></table>'
      '</body></html>',
  )
  _write(
      root,
      'usr/share/gimp/2.0/help/de/filters.html',
      '<html><body><h2>8.1. Überblick</h2><table><tr><td><p>Dieser Filter'
      ' zeichnet die Ebene weich.</p></td></tr></table></body></html>',
  )


def test_pages_are_paired_by_id_or_by_document_order(tmp_path):
  _libreoffice(tmp_path)
  _gnome(tmp_path)
  _gimp(tmp_path)
  splits, manifest = help_pages.build(str(tmp_path), {}, min_words=5)
  pairs = sorted(p for split in splits.values() for p in split)
  assert pairs == sorted([
      # LibreOffice: by id, whatever the order; markup dropped; code
      # listings, one-sided ids and headings of one word left out.
      (LONG_EN, LONG_DE),
      (
          'Ordered first here, matched by its id.',
          'Hier zuerst, über die Kennung zugeordnet.',
      ),
      # GNOME: in document order (the page whose counts differ is skipped).
      (
          'Keep the keyboard from repeating your key presses.',
          'Verhindern, dass die Tastatur Tastendrücke wiederholt.',
      ),
      (
          'Press Ctrl and the key you want.',
          'Drücken Sie Strg und die Taste.',
      ),
      # GIMP: the cell's paragraph is the cell's text.
      (
          'This filter blurs the layer by the given radius.',
          'Dieser Filter zeichnet die Ebene weich.',
      ),
  ])
  by_source = {s['source']: s for s in manifest['sources']}
  assert by_source['gnome']['files_read'] == 2
  assert by_source['gnome']['files_paired'] == 1
  assert [by_source[s]['pairs'] for s in ('libreoffice', 'gnome', 'gimp')] == [
      2,
      2,
      1,
  ]
  for name, split in splits.items():
    assert all(
        help_pages.gettext_catalogues.split_of(e, 0.03, 0.03) == name
        for e, _ in split
    )


def test_written_twice_the_corpus_is_the_same(tmp_path):
  _libreoffice(tmp_path / 'root')
  for out in ('a', 'b'):
    assert (
        help_pages.main([
            f'--root={tmp_path / "root"}',
            f'--output={tmp_path / out}',
            '--dev=0.3',
            '--test=0.3',
        ])
        == 0
    )
  for name in ('train', 'dev', 'test'):
    for lang in ('en', 'de'):
      assert (tmp_path / 'a' / f'corpus.{name}.{lang}').read_text() == (
          tmp_path / 'b' / f'corpus.{name}.{lang}'
      ).read_text()
  manifest = json.loads((tmp_path / 'a' / 'manifest.json').read_text())
  assert sum(manifest['pairs'].values()) == 2


def test_no_pages_and_an_output_that_is_a_file_are_one_line(tmp_path, capsys):
  assert (
      help_pages.main([f'--root={tmp_path}', f'--output={tmp_path / "o"}']) == 2
  )
  (line,) = capsys.readouterr().err.strip().splitlines()
  assert line.startswith(f'error: no translated help pages under {tmp_path}')
  assert not (tmp_path / 'o').exists()
  (tmp_path / 'file').write_text('kept')
  try:
    help_pages.main([f'--root={tmp_path}', f'--output={tmp_path / "file"}'])
  except SystemExit as e:
    assert e.code == 2
  assert 'is a file; name a folder' in capsys.readouterr().err
  # A folder under a file: the same line, nothing made.
  try:
    help_pages.main(
        [f'--root={tmp_path}', f'--output={tmp_path / "file" / "sub"}']
    )
  except SystemExit as e:
    assert e.code == 2
  assert f'{tmp_path / "file"} is a file' in capsys.readouterr().err
  assert (tmp_path / 'file').read_text() == 'kept'
