"""Vocabularies (word, char, SentencePiece) and plain-text corpora (`text:<prefix>`)."""

import glob
import json
import logging
import os
import shutil

import numpy as np
import pytest

from nmt_jax import data
from nmt_jax.config import defaults
from nmt_jax.config import validation
from nmt_jax.data import batching
from nmt_jax.data import dataset
from nmt_jax.data import encoding
from nmt_jax.data import text as text_corpus
from nmt_jax.data import vocab as vocab_lib
from nmt_jax.data.vocab import EOS
from nmt_jax.data.vocab import UNK
from nmt_jax.system import workdir_files
from nmt_jax.system.errors import DataError
from nmt_jax.system.errors import UserError
from tests import conftest

ROOT = conftest.ROOT
NUMBERS = os.path.join(ROOT, 'tests', 'corpora', 'numbers')
TEXTS = [
    'Der Hund bellt.',
    'Die Katze schläft, der Hund nicht.',
    'Zwölf Boxkämpfer jagen Viktor.',
    'Ein Hund, eine Katze.',
] * 20


# ----------------------------------------------------------------- vocabularies


def test_word_vocab_counts_cutoff_and_unk(tmp_path):
  vocab = vocab_lib.build_vocab(
      'word', ['a b c a', 'b a d'], size=0, min_count=2
  )
  assert vocab.tokens[4:] == ['a', 'b']  # by frequency; c and d seen once
  assert vocab.encode('a d b') == [vocab.index['a'], UNK, vocab.index['b'], EOS]
  assert vocab.decode(vocab.encode('b a')) == 'b a'
  capped = vocab_lib.build_vocab('word', ['a b c a', 'b a d'], size=1)
  assert capped.tokens[4:] == ['a']
  path = str(tmp_path / 'words.txt')
  vocab.save(path)
  assert vocab_lib.load_vocab('word', path).tokens == vocab.tokens


def test_reserved_tokens_written_in_text_are_unknown_words():
  vocab = vocab_lib.build_vocab('word', ['a </s> b <pad> <s>'], size=0)
  a, b = vocab.index['a'], vocab.index['b']
  # Not EOS in the middle of a sentence, not PAD inside a source.
  assert vocab.encode('a </s> b <pad> <s> <unk>') == [
      a,
      UNK,
      b,
      UNK,
      UNK,
      UNK,
      EOS,
  ]
  assert vocab.decode(vocab.encode('a </s> b')) == 'a <unk> b'
  closed = vocab_lib.Vocab(['a'], allow_unk=False)
  with pytest.raises(vocab_lib.VocabError, match="token '</s>'"):
    closed.encode('a </s>')


def test_lines_end_at_newlines_only(tmp_path):
  # A stray '\r' on different lines of the two sides: split there, the line
  # counts would still agree and every pair between the two would be shifted.
  prefix = write_corpus(
      tmp_path,
      train=(b'eins\nzwei\rdrei\r\nvier\n', b'one\ntwo three\nfour\rfour\n'),
  )
  source, target = text_corpus.read_split(prefix, 'train', 'de', 'en')
  assert source == ['eins', 'zwei\rdrei', 'vier']
  assert target == ['one', 'two three', 'four\rfour']
  (tmp_path / 'mac.de').write_bytes(b'eins\rzwei\r')  # CR-only line ends
  assert text_corpus.read_lines(str(tmp_path / 'mac.de')) == ['eins', 'zwei']


def test_a_literal_unk_in_the_corpus_takes_no_place_in_the_vocabulary():
  texts = ['<unk> <unk> <unk> a a b', 'c <unk>']
  vocab = vocab_lib.build_vocab('word', texts, size=3)
  assert vocab.tokens[len(vocab_lib.SPECIALS) :] == ['a', 'b', 'c']


def test_char_vocab_round_trips_text(tmp_path):
  vocab = vocab_lib.build_vocab('char', TEXTS, size=0)
  for text in TEXTS:
    assert vocab.decode(vocab.encode(text)) == text
  # whitespace normalised
  assert vocab.decode(vocab.encode('Hund  bellt')) == 'Hund bellt'
  assert UNK in vocab.encode('Q')
  # '▁' is the space token: one in the text (SentencePiece output) is not.
  pieces = ['\u2581Der \u2581Hund', 'a\u2581b c']
  spm_vocab = vocab_lib.build_vocab('char', pieces, size=0)
  for text in pieces:
    assert spm_vocab.decode(spm_vocab.encode(text)) == text
  # A vocabulary built before '<▁>' existed reads '▁' as a space, as then.
  old = vocab_lib.CharVocab(['\u2581', 'D', 'e', 'r'])
  assert UNK not in old.encode('\u2581Der')
  assert old.decode(old.encode('\u2581Der')) == ' Der'
  path = str(tmp_path / 'chars.txt')
  vocab.save(path)
  loaded = vocab_lib.load_vocab('char', path)
  assert loaded.encode(TEXTS[1]) == vocab.encode(TEXTS[1])


@pytest.mark.parametrize('model_type', ['bpe', 'unigram'])
def test_sentencepiece_round_trips_text(tmp_path, model_type):
  vocab = vocab_lib.build_vocab(
      'sentencepiece', TEXTS, size=40, model_type=model_type
  )
  assert len(vocab) == 40 and vocab.tokens[:4] == list(vocab_lib.SPECIALS)
  for text in TEXTS[:4]:
    ids = vocab.encode(text)
    assert ids[-1] == EOS and EOS not in ids[:-1]
    assert vocab.decode(ids) == text
  path = str(tmp_path / 'spm.model')
  vocab.save(path)
  assert vocab_lib.load_vocab('sentencepiece', path).encode(
      TEXTS[2]
  ) == vocab.encode(TEXTS[2])


def test_sentencepiece_trains_on_a_fixed_sample_of_a_large_corpus(
    monkeypatch,
):
  # SentencePiece's own sample of a corpus over its input_sentence_size is
  # unseeded: every build would differ. The sample is chosen before it.
  monkeypatch.setattr(vocab_lib, 'SENTENCEPIECE_SENTENCES', 100)
  rng = np.random.default_rng(1)
  words = ['haus', 'hund', 'katze', 'baum', 'wald', 'see', 'berg', 'tal']
  texts = [' '.join(rng.choice(words, 5)) + f' {i}' for i in range(400)]
  train = vocab_lib.sentencepiece.SentencePieceTrainer.train
  seen = []

  def spy(sentence_iterator, **kwargs):
    sentences = list(sentence_iterator)
    seen.append(sentences)
    assert kwargs.get('input_sentence_size', 0) == 0  # all it is given
    return train(sentence_iterator=iter(sentences), **kwargs)

  monkeypatch.setattr(
      vocab_lib.sentencepiece.SentencePieceTrainer, 'train', spy
  )
  first = vocab_lib.build_vocab('sentencepiece', texts, size=60)
  second = vocab_lib.build_vocab('sentencepiece', texts, size=60)
  assert len(seen[0]) == 100 and set(seen[0]) <= set(texts)
  assert seen[0] == seen[1] and first.tokens == second.tokens


def test_sentencepiece_learns_from_lines_over_4192_bytes():
  # SentencePiece skips such lines unless told otherwise: a corpus of long
  # lines (a paragraph per line) had no text left.
  texts = [' '.join(['ein langer satz'] * 400)] * 20
  assert len(texts[0].encode()) > 4192
  vocab = vocab_lib.build_vocab('sentencepiece', texts, size=30)
  assert vocab.decode(vocab.encode(texts[0])) == texts[0]


def test_sides_that_encode_to_nothing_are_skipped_as_empty():
  # SentencePiece drops characters Python's strip() keeps (zero-width space,
  # a BOM inside a file, DEL): such a side is EOS alone, i.e. empty.
  vocab = vocab_lib.build_vocab('sentencepiece', TEXTS, size=40)
  sources = [TEXTS[0], '\u200b', TEXTS[1], '\ufeff', '\x7f']
  targets = [TEXTS[2], TEXTS[3], ' \u200b ', TEXTS[0], TEXTS[1]]
  split, dropped = encoding.encode_split(
      sources, targets, vocab, vocab, 100, 'train'
  )
  assert dropped == {'empty': 4, 'too_long': 0}
  assert split.source_text == [TEXTS[0]]


def test_sentencepiece_too_large_is_a_clear_error():
  with pytest.raises(vocab_lib.VocabError, match='lower data.vocab.size'):
    vocab_lib.build_vocab('sentencepiece', ['a b'], size=5000)


def test_sentencepiece_smaller_than_the_characters_says_raise_it():
  # Every character is a piece: 30 distinct ones need more than 20.
  texts = [''.join(chr(0x4E00 + i) for i in range(30))] * 3
  with pytest.raises(
      vocab_lib.VocabError, match=r'raise data.vocab.size to at least 3\d$'
  ):
    vocab_lib.build_vocab('sentencepiece', texts, size=20)


def test_vocab_file_errors(tmp_path):
  with pytest.raises(
      vocab_lib.VocabError, match='is missing; build it with --mode=prepare'
  ):
    vocab_lib.load_vocab('word', str(tmp_path / 'nope.txt'))
  bad = tmp_path / 'words.txt'
  bad.write_text('a\nb\n')
  with pytest.raises(vocab_lib.VocabError, match='does not start with'):
    vocab_lib.load_vocab('word', str(bad))
  bad.write_bytes(b'\xff\xfe\x00garbage')
  with pytest.raises(vocab_lib.VocabError, match='delete it and run --mode=p'):
    vocab_lib.load_vocab('word', str(bad))
  with pytest.raises(vocab_lib.VocabError, match='not a SentencePiece model'):
    vocab_lib.load_vocab('sentencepiece', str(bad))


# ----------------------------------------------------------------- text corpora


def text_config(prefix=NUMBERS, kind='word', max_length=20, **vocab):
  config = defaults.get_config('tiny')
  config.data.name = f'text:{prefix}'
  config.data.max_length = max_length
  config.data.vocab.kind = kind
  config.data.vocab.size = 40 if kind == 'sentencepiece' else 0
  for key, value in vocab.items():
    config.data.vocab[key] = value
  return validation.resolve(config)


@pytest.mark.parametrize(
    'kind, shared', [('word', True), ('char', False), ('sentencepiece', True)]
)
def test_text_task_builds_then_reuses_its_vocabularies(tmp_path, kind, shared):
  config = text_config(kind=kind, shared=shared, max_length=60)
  task = data.load_task(config.data, 0, str(tmp_path), build_vocab=True)
  assert (len(task.train), len(task.eval), len(task.test)) == (400, 24, 24)
  files = sorted(os.listdir(tmp_path / 'vocab'))
  # Each vocabulary with the data.vocab settings it was built with.
  assert len(files) == (2 if shared else 4)
  assert (
      sum(name.endswith('.settings.json') for name in files) == len(files) // 2
  )
  with open(f'{NUMBERS}.dev.en', encoding='utf-8') as f:
    first = f.readline().strip()
  assert task.target_vocab.decode(task.eval.target[0]) == first
  assert task.eval.target_text[0] == first
  before = {name: (tmp_path / 'vocab' / name).read_bytes() for name in files}
  # reads, does not rebuild
  again = data.load_task(config.data, 0, str(tmp_path))
  assert again.source_vocab.tokens == task.source_vocab.tokens
  assert {
      name: (tmp_path / 'vocab' / name).read_bytes() for name in files
  } == before
  # Other settings do not silently reuse it.
  other = {'size': 44} if kind == 'sentencepiece' else {'min_count': 2}
  changed = text_config(kind=kind, shared=shared, max_length=60, **other)
  with pytest.raises(DataError, match='built with other data.vocab'):
    data.load_task(changed.data, 0, str(tmp_path), build_vocab=True)


def write_corpus(directory, **splits):
  """splits: name -> (source lines, target lines) written as corpus.<name>.{de,en}."""
  for name, (source, target) in splits.items():
    for lang, lines in (('de', source), ('en', target)):
      with open(os.path.join(directory, f'corpus.{name}.{lang}'), 'wb') as f:
        f.write(
            lines
            if isinstance(lines, bytes)
            else ''.join(line + '\n' for line in lines).encode()
        )
  return os.path.join(directory, 'corpus')


def test_empty_and_overlong_pairs_are_skipped_and_counted(tmp_path):
  source = ['a b', '', 'a b c d e f', 'c', 'b a']
  target = ['x y', 'x', 'x y', '  ', 'y x']
  prefix = write_corpus(tmp_path, train=(source, target), dev=(source, target))
  config = text_config(prefix, max_length=4)
  vocab = vocab_lib.build_vocab('word', source + target, size=0)
  split, dropped = encoding.encode_split(
      source, target, vocab, vocab, 4, 'train'
  )
  assert dropped == {'empty': 2, 'too_long': 1}
  assert split.source_text == ['a b', 'b a']
  task = data.load_task(
      config.data, 0, str(tmp_path / 'work'), build_vocab=True
  )
  assert (
      len(task.train) == 2
      and task.test is None
      and task.test_or_eval is task.eval
  )


@pytest.mark.parametrize(
    'splits, message',
    [
        (
            {'train': (['a', 'b'], ['x']), 'dev': (['a'], ['x'])},
            'corpus.train.de has 2 lines but {p}.train.en has 1',
        ),
        (
            {'train': (b'', b''), 'dev': (['a'], ['x'])},
            'corpus.train.de is empty',
        ),
        (
            {'train': (['a'], ['x']), 'dev': (b'a\n\xff\xfe b\n', b'x\ny\n')},
            'corpus.dev.de:2: invalid UTF-8',
        ),
        ({'train': (['a'], ['x'])}, 'the dev split is missing: expected'),
    ],
)
def test_corpus_errors_name_the_file_and_line(tmp_path, splits, message):
  prefix = write_corpus(tmp_path, **splits)
  config = text_config(prefix)
  with pytest.raises(DataError, match=None) as error:
    data.load_task(config.data, 0, str(tmp_path / 'work'), build_vocab=True)
  assert message.format(p=prefix) in str(error.value)
  assert '\n' not in str(error.value)


def test_missing_vocabulary_outside_training_is_an_error(tmp_path):
  config = text_config()
  with pytest.raises(
      DataError,
      match=r'words_shared.txt is missing; build it with --mode=prepare',
  ):
    data.load_task(config.data, 0, str(tmp_path))


def test_text_corpus_needs_a_prefix_and_a_workdir():
  config = text_config()
  with pytest.raises(DataError, match='give --workdir'):
    data.load_task(config.data, 0, None)
  config.data.name = 'text:'
  with pytest.raises(DataError, match='needs a path prefix'):
    data.load_task(config.data, 0, '/tmp')


# ----------------------------------------------------------------- end to end


class _Messages(logging.Handler):
  """The messages nmt_jax logs (absl) while it is attached."""

  def __init__(self):
    super().__init__(logging.INFO)
    self.messages = []
    self._logger = logging.getLogger('absl')
    self._level = self._logger.level

  def emit(self, record):
    self.messages.append(record.getMessage())

  def __enter__(self):
    self._logger.addHandler(self)
    self._logger.setLevel(logging.INFO)
    return self

  def __exit__(self, *exc):
    self._logger.removeHandler(self)
    self._logger.setLevel(self._level)


@pytest.fixture(scope='module')
def text_run(tmp_path_factory):
  """The numbers corpus with SentencePiece, prepared and trained 6 steps.

  Its test split has two more pairs: one over data.max_length, one with an
  empty side; its validation split the over-long one. In this process, as `--mode=prepare`, then training, run it:
  (command line args, workdir, corpus folder, the messages logged).
  """
  from nmt_jax import train  # pylint: disable=g-import-not-at-top
  from tests.commands import QUICK  # pylint: disable=g-import-not-at-top
  from tests.commands import cli_config  # pylint: disable=g-import-not-at-top

  tmp_path = tmp_path_factory.mktemp('text')
  workdir = str(tmp_path / 'run')
  corpus = tmp_path / 'corpus'
  corpus.mkdir()
  for name in ('train', 'dev', 'test'):
    for lang in ('de', 'en'):
      lines = open(f'{NUMBERS}.{name}.{lang}', encoding='utf-8').read()
      if name != 'train':  # one over-long pair
        extra = 'eins zwei ' * 40 if lang == 'de' else 'one two ' * 40
        lines += extra.strip() + '\n'
      if name == 'test':  # one with an empty side
        lines += 'Drei.\n' if lang == 'de' else '\n'
      (corpus / f'numbers.{name}.{lang}').write_text(lines, encoding='utf-8')
  args = [
      '--config=configs/global_general.py:tiny',
      f'--workdir={workdir}',
      *QUICK,
      f'--config.data.name=text:{corpus}/numbers',
      '--config.data.max_length=60',
      '--config.data.vocab.kind=sentencepiece',
      '--config.data.vocab.size=48',
      '--config.train.num_steps=6',
  ]
  with _Messages() as log:
    train.prepare(cli_config(*args), workdir)
    train.train_and_evaluate(cli_config(*args), workdir)
  return args, workdir, corpus, log.messages


@pytest.mark.slow
def test_prepare_train_eval_translate_on_a_text_corpus(text_run, tmp_path):
  from nmt_jax import inference  # pylint: disable=g-import-not-at-top
  from nmt_jax import train  # pylint: disable=g-import-not-at-top
  from nmt_jax.analysis import attention_maps  # pylint: disable=g-import-not-at-top
  from tests.commands import cli_config  # pylint: disable=g-import-not-at-top
  from tests.commands import snapshot  # pylint: disable=g-import-not-at-top

  args, workdir, corpus, log = text_run
  assert 'prepared: train 400 pairs, validation 25 pairs, test 26 pairs' in log
  assert sorted(os.listdir(os.path.join(workdir, 'vocab'))) == [
      'spm_shared.model',
      'spm_shared.model.settings.json',
  ]
  with open(os.path.join(workdir, 'eval_results.json')) as f:
    result = f.read()
  assert '"eval_split": "test"' in result and '"num_sentences": 26' in result
  # Translating and scoring read the workdir's vocabularies, not the corpus:
  # they run where it is not, and write no encoded cache. (In this process:
  # what --mode=translate and --mode=score print.)
  config = cli_config(*args)
  away = tmp_path / 'away'
  corpus.rename(away)
  try:
    cached = os.listdir(os.path.join(workdir, workdir_files.DATA_CACHE))
    translated = inference.translate(
        config, [workdir], ['Eins zwei drei.', 'Vier.']
    )
    assert len(translated) == 2
    assert len(inference.score(config, [workdir], [(1, 'Vier.', 'four .')]))
    # Attention maps label each piece, as many labels as weights.
    (maps,) = attention_maps.translate_with_attention(
        workdir, ['Eins zwei drei.']
    )
    assert maps.weights.shape == (len(maps.hypothesis), len(maps.source))
    assert maps.source[-1] == '</s>' and len(maps.source) > 3  # pieces
    assert os.listdir(os.path.join(workdir, workdir_files.DATA_CACHE)) == cached
  finally:
    away.rename(corpus)

  # A different vocabulary in the workdir is refused, and nothing is changed
  # (in this process, where --mode=train and --mode=eval fail).
  copy = str(tmp_path / 'copy')
  shutil.copytree(workdir, copy)
  before = snapshot(os.path.join(copy, 'checkpoints'))
  vocab_lib.build_vocab(
      'sentencepiece', ['völlig andere Wörter'] * 50, size=30
  ).save(os.path.join(copy, 'vocab', 'spm_shared.model'))
  for run in (
      train.train_and_evaluate,
      lambda c, w: inference.evaluate(c, [w]),
  ):
    with pytest.raises(UserError) as error:
      run(config, copy)
    assert 'different source vocabulary' in str(error.value)
    assert '\n' not in str(error.value)
  assert snapshot(os.path.join(copy, 'checkpoints')) == before


def test_the_test_split_keeps_every_pair():
  """An over-long pair and one with an empty side are skipped from training,
  but the validation and test splits keep them (in file order): their
  scores must cover the files' lines, as published test BLEU does.
  """
  source, target = ['a b', '', 'a b c d e f', 'c', 'b a'], [
      'x y',
      'x',
      'x y',
      '  ',
      'y x',
  ]
  vocab = vocab_lib.build_vocab('word', source + target, size=0)
  split, dropped = encoding.encode_split(
      source, target, vocab, vocab, 4, 'test', keep_all=True
  )
  assert dropped == {'empty': 2, 'too_long': 1} and len(split) == 5
  assert split.source_text == ['a b', '', 'a b c d e f', 'c', 'b a']


@pytest.mark.slow
def test_the_test_and_validation_splits_are_scored_whole(text_run):
  """Every line of the test files is decoded and scored, in file order
  (eval_hypotheses.txt's line i is the files' line i); validation keeps its
  over-long pair too."""
  _, workdir, corpus, log = text_run
  test_lines = len(open(corpus / 'numbers.test.de').read().splitlines())
  dev_lines = len(open(corpus / 'numbers.dev.de').read().splitlines())
  for kept in (
      f'kept all {test_lines} pairs, 1 of them with an empty side and 1',
      f'kept all {dev_lines} pairs, 0 of them with an empty side and 1',
  ):
    assert any(kept in message for message in log), log
  with open(os.path.join(workdir, 'eval_results.json')) as f:
    assert json.load(f)['num_sentences'] == test_lines
  with open(os.path.join(workdir, 'eval_hypotheses.txt')) as f:
    assert len(f.read().split('\n')) - 1 == test_lines


# ----------------------------------------------------------------- TFDS


def tfds_config(**data_fields):
  config = text_config(kind='word')
  config.data.name = 'tfds:wmt17_translate/de-en'
  config.data.max_length = 30
  for key, value in data_fields.items():
    config.data[key] = value
  return config


@pytest.mark.slow
def test_tfds_prepare_train_and_evaluate_under_mock_data(tmp_path):
  tfds = pytest.importorskip('tensorflow_datasets')
  from nmt_jax import train  # pylint: disable=g-import-not-at-top

  # either direction of de-en
  config = tfds_config(source_lang='en', target_lang='de')
  config.train.num_steps = 4
  config.decode.beam_size = 1
  workdir = str(tmp_path / 'run')
  with tfds.testing.mock_data(num_examples=24):
    task = train.prepare(config, workdir)
    assert (len(task.train), len(task.eval), len(task.test)) == (24, 24, 24)
    # Mock records are str in 'de'/'en'; the source side must be the English one.
    assert task.train.source_text[0] == ' '.join(
        tfds.data_source('wmt17_translate/de-en', split='train')[0][
            'en'
        ].split()
    )
    assert sorted(os.listdir(os.path.join(workdir, 'vocab'))) == [
        'words_shared.txt',
        'words_shared.txt.settings.json',
    ]
    result = train.train_and_evaluate(config, workdir)
  assert result['eval_split'] == 'test' and result['num_sentences'] == 24
  assert os.path.exists(os.path.join(workdir, 'eval_results.json'))
  # Outside the mock the corpus is not there: translating needs only the
  # workdir's vocabularies.
  from nmt_jax import inference  # pylint: disable=g-import-not-at-top

  assert len(inference.translate(config, [workdir], ['a b', '', 'c'])) == 3


def test_tfds_records_are_read_once_in_chunks_in_order(tmp_path):
  """On a real array_record source (what --mode=prepare writes) and on one
  without batched reads (tfds.testing.mock_data's)."""
  tfds = pytest.importorskip('tensorflow_datasets')
  from nmt_jax.data import tfds_corpus  # pylint: disable=g-import-not-at-top

  class Pairs(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version('1.0.0')

    def _info(self):
      return tfds.core.DatasetInfo(
          builder=self,
          features=tfds.features.Translation(languages=['de', 'en']),
      )

    def _split_generators(self, dl_manager):
      del dl_manager
      return {'train': self._generate_examples()}

    def _generate_examples(self):
      for i in range(23):
        yield i, {'de': f'satz {i} ü', 'en': f'sentence {i}'}

  builder = Pairs(data_dir=str(tmp_path), file_format='array_record')
  builder.download_and_prepare()
  source = builder.as_data_source(split='train')
  assert hasattr(source, '__getitems__')
  one_by_one = (
      [source[i]['de'].decode() for i in range(23)],
      [source[i]['en'].decode() for i in range(23)],
  )
  assert sorted(one_by_one[1]) == sorted(f'sentence {i}' for i in range(23))
  assert tfds_corpus.read_pairs(source, 'de', 'en', chunk=5) == one_by_one

  reads = []

  class OneByOne:

    def __len__(self):
      return 23

    def __getitem__(self, i):
      reads.append(i)
      return {'de': f'{i}', 'en': f'{i}'.encode()}

  lines = [str(i) for i in range(23)]
  assert tfds_corpus.read_pairs(OneByOne(), 'en', 'de', chunk=5) == (
      lines,
      lines,
  )
  assert reads == list(range(23))


@pytest.mark.parametrize(
    'fields, message',
    [
        ({'source_lang': 'fr'}, 'has the languages de and en, not fr->en'),
        (
            {'name': 'tfds:wmt17_translate/xx-en'},
            'wmt17_translate has no config',
        ),
        ({'name': 'tfds:wmt99_translate/de-en'}, 'use tfds:<builder>/<config>'),
    ],
)
def test_tfds_config_errors(tmp_path, fields, message):
  pytest.importorskip('tensorflow_datasets')
  with pytest.raises(DataError, match=None) as error:
    data.load_task(tfds_config(**fields).data, 0, str(tmp_path))
  assert message in str(error.value)


def test_tfds_unprepared_dataset_says_what_to_run(tmp_path):
  pytest.importorskip('tensorflow_datasets')
  config = tfds_config(tfds_data_dir=str(tmp_path / 'tfds'))
  with pytest.raises(
      DataError,
      match='is not prepared .* run the same command with --mode=prepare',
  ):
    data.load_task(config.data, 0, str(tmp_path / 'run'), build_vocab=True)


def test_tfds_prepare_offline_says_where_to_put_the_files(
    tmp_path, monkeypatch
):
  tfds = pytest.importorskip('tensorflow_datasets')

  def offline(*args, **kwargs):
    raise ConnectionError(
        'Failed to establish a new connection: [Errno -3] name resolution'
    )

  # What download_and_prepare raises on a machine without network, without touching it.
  monkeypatch.setattr(tfds.core.DatasetBuilder, 'download_and_prepare', offline)
  config = tfds_config(tfds_data_dir=str(tmp_path / 'tfds'))
  with pytest.raises(DataError) as error:
    data.prepare_corpus(config.data)
  message = str(error.value)
  assert (
      'could not prepare wmt17_translate/de-en (Failed to establish' in message
  )
  assert 'tfds_manual_dir' in message and '\n' not in message


def test_tfds_prepare_into_an_unwritable_folder_names_the_data_dir(
    tmp_path, monkeypatch
):
  """It blamed the network for every failure."""
  tfds = pytest.importorskip('tensorflow_datasets')

  def exists(*args, **kwargs):  # another process's download renamed first
    raise FileExistsError('Cannot rename incomplete.X_1.0.0: 1.0.0 exists')

  monkeypatch.setattr(tfds.core.DatasetBuilder, 'download_and_prepare', exists)
  config = tfds_config(tfds_data_dir=str(tmp_path / 'tfds'))
  with pytest.raises(DataError, match='check --config.data.tfds_data_dir') as e:
    data.prepare_corpus(config.data)
  assert 'tfds_manual_dir' not in str(e.value)


# ----------------------------------------------------------------- encoded-corpus cache


def test_ragged_round_trip(tmp_path):
  rows = [
      np.array([5, 6, EOS], np.int32),
      np.array([EOS], np.int32),
      np.array([7] * 9 + [EOS]),
  ]
  ragged = dataset.Ragged.from_rows(rows)
  ragged.save(str(tmp_path / 'r'))
  loaded = dataset.Ragged.load(str(tmp_path / 'r'))
  assert len(loaded) == 3 and list(loaded.lengths()) == [3, 1, 10]
  for i, row in enumerate(rows):
    np.testing.assert_array_equal(loaded[i], row)
  assert isinstance(loaded.flat.base, np.memmap)  # mapped, not read


def _cached_corpus(tmp_path):
  """A small text corpus loaded once: (prefix, config, workdir, its Task)."""
  prefix = write_corpus(
      str(tmp_path),
      train=(['a b c', 'b c', 'c d e f'] * 30, ['x y', 'y', 'z x y'] * 30),
      dev=(['a c', 'd'], ['x', 'z z']),
  )
  config = text_config(kind='word', max_length=10)
  config.data.name = f'text:{prefix}'
  workdir = str(tmp_path / 'run')
  return (
      prefix,
      config,
      workdir,
      data.load_task(config.data, 0, workdir, build_vocab=True),
  )


def test_second_load_maps_the_encoded_cache_and_changes_invalidate_it(
    tmp_path, monkeypatch
):
  prefix, config, workdir, fresh = _cached_corpus(tmp_path)
  assert len(os.listdir(os.path.join(workdir, workdir_files.DATA_CACHE))) == 1

  def no_reading(*args):
    raise AssertionError('a cache hit must not read the corpus')

  monkeypatch.setattr(text_corpus, 'read_split', no_reading)
  cached = data.load_task(config.data, 0, workdir)
  assert isinstance(cached.train.source, dataset.Ragged)
  for name in ('train', 'eval'):
    a, b = getattr(fresh, name), getattr(cached, name)
    assert len(a) == len(b)
    for x, y in zip(a.source + a.target, list(b.source) + list(b.target)):
      np.testing.assert_array_equal(x, y)
  assert cached.eval.target_text == fresh.eval.target_text == ['x', 'z z']
  np.testing.assert_array_equal(
      batching.example_lengths(cached.train),
      batching.example_lengths(fresh.train),
  )
  boundaries = batching.bucket_boundaries(fresh.max_length, 2)
  for step in range(5):
    x = batching.TrainBatches(fresh.train, 4, boundaries, 0).batch(step)
    y = batching.TrainBatches(cached.train, 4, boundaries, 0).batch(step)
    for key in x:
      np.testing.assert_array_equal(x[key], y[key])

  # Another max_length, or an edited corpus file, is another cache entry.
  monkeypatch.undo()
  config.data.max_length = 3
  # 'c d e f' pairs dropped
  assert len(data.load_task(config.data, 0, workdir).train) == 60
  with open(f'{prefix}.dev.en', 'w', encoding='utf-8') as f:
    f.write('x y\nz\n')
  assert data.load_task(config.data, 0, workdir).eval.target_text == [
      'x y',
      'z',
  ]
  assert len(os.listdir(os.path.join(workdir, workdir_files.DATA_CACHE))) == 3


@pytest.mark.parametrize(
    'damage', ['truncate', 'remove_texts', 'remove_offsets']
)
def test_a_damaged_encoded_cache_is_encoded_again(tmp_path, damage):
  # E.g. a copy of the workdir cut short: every later run crashed on it.
  _, config, workdir, fresh = _cached_corpus(tmp_path)
  (entry,) = glob.glob(os.path.join(workdir, workdir_files.DATA_CACHE, '*'))
  if damage == 'truncate':
    path = os.path.join(entry, 'train.source.ids.npy')
    os.truncate(path, os.path.getsize(path) // 2)
  elif damage == 'remove_texts':
    os.remove(os.path.join(entry, 'eval.text.json'))
  else:
    os.remove(os.path.join(entry, 'train.target.offsets.npy'))
  again = data.load_task(config.data, 0, workdir)
  assert len(again.train) == len(fresh.train) == 90
  assert again.eval.target_text == fresh.eval.target_text
  # Written anew: the next load maps it.
  cached = data.load_task(config.data, 0, workdir)
  assert isinstance(cached.train.source, dataset.Ragged)
  for x, y in zip(fresh.train.source, cached.train.source):
    np.testing.assert_array_equal(x, y)


def test_a_workdir_that_cannot_take_the_cache_still_loads(tmp_path):
  # A read-only or full workdir (an ensemble member, a tool reading a run):
  # the cache is only a speed-up.
  prefix = write_corpus(
      str(tmp_path),
      train=(['a b', 'b c'] * 5, ['x', 'y z'] * 5),
      dev=(['a'], ['x']),
  )
  config = text_config(kind='word', max_length=10)
  config.data.name = f'text:{prefix}'
  workdir = str(tmp_path / 'run')
  data.load_task(config.data, 0, workdir, build_vocab=True)
  shutil.rmtree(os.path.join(workdir, workdir_files.DATA_CACHE))
  with open(os.path.join(workdir, workdir_files.DATA_CACHE), 'w') as f:
    f.write('not a directory')
  task = data.load_task(config.data, 0, workdir)
  assert len(task.train) == 10
  assert sorted(os.listdir(workdir)) == ['data_cache', 'vocab']


def test_the_vocabularies_alone_load_without_the_corpus(tmp_path):
  config = defaults.get_config('tiny')
  embedded = data.load_task(config.data, 0)
  alone = data.load_vocab_task(config.data, None)
  assert alone.source_vocab.tokens == embedded.source_vocab.tokens
  assert alone.target_vocab.tokens == embedded.target_vocab.tokens
  assert alone.max_length == embedded.max_length
  assert not len(alone.train) and not len(alone.eval)

  config.data.name = f'text:{tmp_path}/gone/corpus'
  config.data.max_length = 60
  config.data.vocab.size = 48
  workdir = str(tmp_path / 'run')
  with pytest.raises(
      DataError, match=r'vocabulary file .*/vocab/.* is missing'
  ):
    data.load_vocab_task(config.data, workdir)
  config.data.name = f'text:{NUMBERS}'
  full = data.load_task(config.data, 0, workdir, build_vocab=True)
  config.data.name = f'text:{tmp_path}/gone/corpus'
  alone = data.load_vocab_task(config.data, workdir)
  assert alone.source_vocab.tokens == full.source_vocab.tokens
  assert alone.target_vocab.tokens == full.target_vocab.tokens
  assert alone.max_length == full.max_length
  config.data.vocab.size = 50
  with pytest.raises(DataError, match='other data.vocab settings'):
    data.load_vocab_task(config.data, workdir)


def test_a_failed_prepare_leaves_no_workdir(tmp_path):
  from nmt_jax import train  # pylint: disable=g-import-not-at-top

  config = defaults.get_config('tiny')
  config.data.name = f'text:{tmp_path / "missing"}'
  workdir = tmp_path / 'run'
  with pytest.raises(DataError, match='missing'):
    train.prepare(config, str(workdir))
  assert not workdir.exists()
  # A workdir that was there before stays.
  workdir.mkdir()
  with pytest.raises(DataError):
    train.prepare(config, str(workdir))
  assert workdir.is_dir()
