"""Corpora segmented by another tool, and a user's own SentencePiece model.

The references: SentencePiece's own decoding of its pieces, sacreBLEU on the
raw reference text, and the user's model's own encode/decode.
"""

import io
import json
import os

import pytest
import sacrebleu
import sentencepiece

from nmt_jax import inference
from nmt_jax import train
from nmt_jax.config import validation
from nmt_jax.data import segmentation
from nmt_jax.data import vocab as vocab_lib
from nmt_jax.data.vocab import EOS
from nmt_jax.data.vocab import SPECIALS
from nmt_jax.data.vocab import UNK
from nmt_jax.system import errors
from tests import conftest
from tests.commands import QUICK
from tests.commands import cli_config

NUMBERS = os.path.join(conftest.ROOT, 'tests', 'corpora', 'numbers')
SPLITS = {'train': 'train', 'dev': 'dev', 'test': 'test'}


def _lines(split, lang):
  with open(f'{NUMBERS}.{split}.{lang}', encoding='utf-8') as f:
    return f.read().splitlines()


def _user_model(size=40, **ids):
  """A SentencePiece model trained as a user would: its default ids."""
  model = io.BytesIO()
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(_lines('train', 'de') + _lines('train', 'en')),
      model_writer=model,
      vocab_size=size,
      minloglevel=2,
      **ids,
  )
  return model.getvalue()


def test_sentencepiece_pieces_join_as_sentencepiece_decodes_them():
  processor = sentencepiece.SentencePieceProcessor(model_proto=_user_model())
  for text in _lines('test', 'de') + ['  Vier,  eins!  ', 'x\u2581y z']:
    pieces = processor.encode(text, out_type=str)
    assert segmentation.desegment('sentencepiece', ' '.join(pieces)) == (
        processor.decode_pieces(pieces)
    )


@pytest.mark.parametrize(
    'pieces, text',
    [
        ('Hal@@ lo Welt', 'Hallo Welt'),
        ('Hal@@ l@@ o W@@ elt@@', 'Hallo Welt'),
        ('e-@@ mail @-@ x', 'e-mail @-@ x'),  # Moses' @-@ is not a joiner
        ('a  b', 'a  b'),
    ],
)
def test_bpe_joiners_are_removed(pieces, text):
  kind = 'bpe' if '@@' in pieces else 'none'
  assert segmentation.desegment(kind, pieces) == text


def test_a_users_model_reads_through_a_table_of_nmt_jax_ids():
  proto = _user_model()  # <unk> 0, <s> 1, </s> 2, no <pad>
  processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
  vocab = vocab_lib.SentencePieceVocab(proto)
  assert tuple(vocab.tokens[:4]) == SPECIALS
  assert len(vocab) == processor.get_piece_size() + 1  # 3 out, 4 in
  for text in _lines('test', 'de'):
    ids = vocab.encode(text)
    assert ids[-1] == EOS and min(ids[:-1]) >= len(SPECIALS)
    assert [vocab.tokens[i] for i in ids[:-1]] == processor.encode(
        text, out_type=str
    )
    assert vocab.decode(ids) == processor.decode(processor.encode(text))
  assert vocab.encode('Vier \u4e00')[-2] == UNK  # a character it never saw
  assert vocab.encode_lines(['Vier eins.']) == [vocab.encode('Vier eins.')]


def test_a_model_with_a_normal_piece_named_like_a_reserved_one_is_refused():
  proto = _user_model(user_defined_symbols=['<pad>'])
  with pytest.raises(vocab_lib.VocabError, match="'<pad>'"):
    vocab_lib.SentencePieceVocab(proto)


@pytest.mark.parametrize(
    'field, value, fragment',
    [
        ('data.segmentation', 'sentencepiece', 'data.vocab.kind=word'),
        ('data.segmentation', 'wordpiece', 'none, sentencepiece, bpe'),
        ('data.vocab.sentencepiece_model', 'm.model', 'shared=true'),
    ],
)
def test_settings_that_cannot_work_together_are_refused(field, value, fragment):
  args = [
      '--config=configs/global_general.py:tiny',
      f'--config.{field}={value}',
  ]
  if field == 'data.vocab.sentencepiece_model':
    args.append('--config.data.vocab.shared=false')
  with pytest.raises(errors.ConfigError, match=fragment):
    validation.resolve(cli_config(*args))


@pytest.mark.slow
def test_a_segmented_corpus_is_scored_and_written_as_text(tmp_path):
  processor = sentencepiece.SentencePieceProcessor(model_proto=_user_model())
  corpus = tmp_path / 'pieces'
  corpus.mkdir()
  for split in SPLITS:
    for lang in ('de', 'en'):
      pieces = [
          ' '.join(processor.encode(line, out_type=str))
          for line in _lines(split, lang)
      ]
      (corpus / f'n.{split}.{lang}').write_text('\n'.join(pieces) + '\n')
  workdir = str(tmp_path / 'run')
  args = [
      '--config=configs/global_general.py:tiny',
      *QUICK,
      f'--config.data.name=text:{corpus}/n',
      '--config.data.vocab.kind=word',
      '--config.data.vocab.size=0',
      '--config.data.segmentation=sentencepiece',
      '--config.data.max_length=60',
      '--config.train.num_steps=30',
  ]
  result = train.train_and_evaluate(cli_config(*args), workdir)
  with open(os.path.join(workdir, 'eval_hypotheses.txt')) as f:
    hypotheses = f.read().splitlines()
  assert not any('\u2581' in h for h in hypotheses)
  references = _lines('test', 'en')
  assert result['bleu'] == pytest.approx(
      sacrebleu.corpus_bleu(hypotheses, [references]).score
  )
  assert result['chrf'] == pytest.approx(
      sacrebleu.corpus_chrf(hypotheses, [references]).score
  )
  piece_line = ' '.join(processor.encode(_lines('test', 'de')[0], out_type=str))
  out = inference.translate(cli_config(*args), [workdir], [piece_line])
  assert '\u2581' not in out[0]


@pytest.mark.slow
def test_a_users_sentencepiece_model_is_the_vocabulary(tmp_path):
  proto = _user_model()
  model_file = tmp_path / 'user.model'
  model_file.write_bytes(proto)
  workdir = str(tmp_path / 'run')
  args = [
      '--config=configs/global_general.py:tiny',
      *QUICK,
      f'--config.data.name=text:{NUMBERS}',
      f'--config.data.vocab.sentencepiece_model={model_file}',
      '--config.train.num_steps=4',
  ]
  train.train_and_evaluate(cli_config(*args), workdir)
  with open(os.path.join(workdir, 'vocab', 'spm_shared.model'), 'rb') as f:
    assert f.read() == proto
  with open(os.path.join(workdir, 'eval_results.json')) as f:
    assert json.load(f)['num_sentences'] == len(_lines('test', 'de'))
  # Another model file under the same workdir is another vocabulary.
  other = tmp_path / 'other.model'
  other.write_bytes(_user_model(size=48))
  with pytest.raises(errors.UserError, match='sentencepiece_model: .* there'):
    inference.translate(
        cli_config(*args, f'--config.data.vocab.sentencepiece_model={other}'),
        [workdir],
        ['Vier eins.'],
    )
