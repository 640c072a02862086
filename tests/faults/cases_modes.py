"""Every mode on the trained workdirs: translate, score, eval, ensembles.

The copy-task workdir ('base': checkpoints 2, 4 and 6) and the text-corpus
workdir ('text': a word vocabulary and an encoded cache), copied per case.
"""

import glob
import os
import shutil

from tests.faults import folded
from tests.faults.battery import BASE
from tests.faults.battery import EVAL_WRITES
from tests.faults.battery import QUICK
from tests.faults.battery import TEXT
from tests.faults.battery import TRAIN_WRITES
from tests.faults.battery import absent
from tests.faults.battery import chain
from tests.faults.battery import make_dir
from tests.faults.battery import refuse
from tests.faults.battery import stdout_lines
from tests.faults.battery import step_path
from tests.faults.battery import succeed
from tests.faults.battery import write


def _mode_cases():
  """Every mode on the trained copy-task workdir, good and bad input."""
  on = [*BASE, '--workdir={w}']
  tr = [*on, '--mode=translate']
  sc = [*on, '--mode=score']
  long_line = ' '.join(['a'] * 40) + '\n'
  cases = [
      succeed(
          'modes.eval', [*on, '--mode=eval'], workdir='base', writes=EVAL_WRITES
      ),
      succeed(
          'modes.train_more_steps',
          [*on, '--config.train.num_steps=8'],
          workdir='base',
          writes=TRAIN_WRITES,
      ),
      succeed(
          'modes.train_finished_again',
          [*on, '--config.train.num_steps=6'],
          workdir='base',
          writes=TRAIN_WRITES,
      ),
      succeed(
          'modes.prepare_copy_task', [*on, '--mode=prepare'], workdir='base'
      ),
      succeed(
          'modes.translate',
          tr,
          workdir='base',
          stdin=b'a b c\nd e\n',
          check=stdout_lines(2),
      ),
      succeed(
          'modes.translate_blank_lines',
          tr,
          workdir='base',
          stdin=b'a b\n\n\nc\n',
          check=stdout_lines(4),
      ),
      refuse(
          'modes.translate_no_input',
          tr,
          '^error: .*no input',
          workdir='base',
          stdin=b'',
      ),
      succeed(
          'modes.translate_no_final_newline',
          tr,
          workdir='base',
          stdin=b'a b\nc d',
          check=stdout_lines(2),
      ),
      succeed(
          'modes.translate_crlf',
          tr,
          workdir='base',
          stdin=b'a b\r\nc d\r\n',
          check=stdout_lines(2),
      ),
      succeed(
          'modes.translate_step',
          [*tr, '--config.decode.step=4'],
          workdir='base',
          stdin=b'a b\n',
          check=stdout_lines(1),
      ),
      succeed(
          'modes.translate_nbest',
          [*tr, '--config.decode.beam_size=2', '--config.decode.nbest=2'],
          workdir='base',
          stdin=b'a b\n',
          check=stdout_lines(2),
      ),
      succeed(
          'modes.translate_long_line_raised_limit',
          [*tr, '--config.decode.max_input_length=64'],
          workdir='base',
          stdin=long_line.encode(),
          check=stdout_lines(1),
      ),
      succeed(
          'modes.translate_to_file',
          [*tr, '--output={d}/out.txt'],
          workdir='base',
          stdin=b'a b\n',
      ),
      refuse(
          'modes.translate_long_line',
          tr,
          r'^error: .*line 2.*' r'max_input_length',
          workdir='base',
          stdin=b'a\n' + long_line.encode(),
      ),
      refuse(
          'modes.translate_unknown_token',
          tr,
          "^error: .*'z'.*line 3",
          workdir='base',
          stdin=b'a\nb\nz\n',
      ),
      refuse(
          'modes.translate_not_utf8',
          tr,
          '^error: .*UTF-8',
          workdir='base',
          stdin=b'a b\n\xff\xfe c\n',
      ),
      refuse(
          'modes.translate_binary',
          tr,
          '^error: .*(UTF-8|line 1)',
          workdir='base',
          stdin=bytes(range(256)),
      ),
      refuse(
          'modes.translate_input_missing',
          [*tr, '--input={d}/none.txt'],
          '^error: .*none.txt does not exist',
          workdir='base',
      ),
      refuse(
          'modes.translate_input_directory',
          [*tr, '--input={d}'],
          '(?i)^error: .*is a directory',
          workdir='base',
      ),
      refuse(
          'modes.translate_output_folder_missing',
          [*tr, '--output={d}/none/out.txt'],
          '^error: .*does not exist',
          workdir='base',
          stdin=b'a\n',
      ),
      refuse(
          'modes.translate_output_directory',
          [*tr, '--output={d}'],
          '^error: .*is a directory',
          workdir='base',
          stdin=b'a\n',
      ),
      refuse(
          'modes.translate_step_not_kept',
          [*tr, '--config.decode.step=3'],
          '^error: .*step 3',
          workdir='base',
          stdin=b'a\n',
      ),
      refuse(
          'modes.translate_nbest_above_beam',
          [*tr, '--config.decode.beam_size=2', '--config.decode.nbest=3'],
          '^error: .*nbest',
          workdir='base',
          stdin=b'a\n',
      ),
      refuse(
          'modes.translate_no_workdir',
          [*BASE, '--workdir={d}/none', '--mode=translate'],
          '^error: .*none',
          stdin=b'a\n',
          check=absent('none'),
      ),
      refuse(
          'modes.translate_empty_workdir',
          [*BASE, '--workdir={d}/empty', '--mode=translate'],
          '^error: .*(checkpoint|config.json)',
          stdin=b'a\n',
          setup=make_dir('empty'),
      ),
      refuse(
          'modes.eval_no_workdir',
          [*BASE, '--workdir={d}/none', '--mode=eval'],
          '^error: .*none',
          check=absent('none'),
      ),
      refuse(
          'modes.eval_step_not_kept',
          [*on, '--mode=eval', '--config.decode.step=3'],
          '^error: .*step 3',
          workdir='base',
      ),
      refuse(
          'modes.translate_another_kind',
          [
              '--config=configs/local_m.py:tiny',
              *QUICK,
              '--workdir={w}',
              '--mode=translate',
          ],
          '^error: .*holds another model.*model.attention.kind',
          workdir='base',
          stdin=b'a\n',
      ),
      refuse(
          'modes.eval_another_size',
          [*on, '--mode=eval', '--config.model.hidden_size=32'],
          '^error: .*holds another model.*hidden_size',
          workdir='base',
      ),
      refuse(
          'modes.train_another_size',
          [*on, '--config.model.hidden_size=32'],
          '^error: .*holds another model.*hidden_size',
          workdir='base',
      ),
      refuse(
          'modes.train_another_data',
          [*on, '--config.data.num_symbols=8'],
          '^error: .*num_symbols',
          workdir='base',
      ),
      refuse(
          'modes.train_below_last_checkpoint',
          [*on, '--config.train.num_steps=3'],
          '^error: .*num_steps=3 is below the last checkpoint',
          workdir='base',
      ),
      refuse(
          'modes.train_epochs_below_last_checkpoint',
          [*on, '--config.train.num_epochs=0.001'],
          '^error: .*num_epochs',
          workdir='base',
      ),
      refuse(
          'modes.prepare_two_workdirs',
          [*BASE, '--workdir={w},{w}', '--mode=prepare'],
          '^error: .*workdir',
          workdir='base',
      ),
      # score
      succeed(
          'modes.score_pairs',
          sc,
          workdir='base',
          stdin=b'a b\ta b\nc\tc\n',
          check=stdout_lines(2),
      ),
      succeed(
          'modes.score_files',
          [*sc, '--source={d}/s.txt', '--target={d}/t.txt'],
          workdir='base',
          setup=chain(
              lambda d: write(f'{d}/s.txt', 'a b\nc\n'),
              lambda d: write(f'{d}/t.txt', 'a b\nc\n'),
          ),
          check=stdout_lines(2),
      ),
      refuse(
          'modes.score_no_tab',
          sc,
          '^error: .*line 1.*tab',
          workdir='base',
          stdin=b'a b c\n',
      ),
      refuse(
          'modes.score_two_tabs',
          sc,
          '^error: .*line 2',
          workdir='base',
          stdin=b'a\ta\nb\tb\tb\n',
      ),
      refuse(
          'modes.score_source_without_target',
          [*sc, '--source={d}/s.txt'],
          '^error: .*--target',
          workdir='base',
          setup=lambda d: write(f'{d}/s.txt', 'a\n'),
      ),
      refuse(
          'modes.score_target_missing',
          [*sc, '--source={d}/s.txt', '--target={d}/none.txt'],
          '^error: .*none.txt',
          workdir='base',
          setup=lambda d: write(f'{d}/s.txt', 'a\n'),
      ),
      refuse(
          'modes.score_counts_differ',
          [*sc, '--source={d}/s.txt', '--target={d}/t.txt'],
          '^error: .*(2|3) lines',
          workdir='base',
          setup=chain(
              lambda d: write(f'{d}/s.txt', 'a\nb\nc\n'),
              lambda d: write(f'{d}/t.txt', 'a\nb\n'),
          ),
      ),
      refuse(
          'modes.score_target_not_utf8',
          [*sc, '--source={d}/s.txt', '--target={d}/t.txt'],
          '^error: .*UTF-8',
          workdir='base',
          setup=chain(
              lambda d: write(f'{d}/s.txt', 'a\nb\n'),
              lambda d: write(f'{d}/t.txt', b'a\n\xff\n'),
          ),
      ),
      refuse(
          'modes.score_long_line',
          sc,
          '^error: .*line 1.*max_input_length',
          workdir='base',
          stdin=(long_line.strip() + '\ta\n').encode(),
      ),
      refuse(
          'modes.score_unknown_token',
          sc,
          "^error: .*'z'",
          workdir='base',
          stdin=b'a\tz\n',
      ),
  ]
  return cases


def _ensemble_cases():
  tr = [*BASE, '--mode=translate']
  return [
      succeed(
          'ensemble.translate_two_copies',
          [*tr, '--workdir={w},{w2}'],
          workdir='base',
          workdir2='base',
          stdin=b'a b\n',
          check=stdout_lines(1),
      ),
      succeed(
          'ensemble.eval_with_output',
          [*BASE, '--mode=eval', '--workdir={w},{w2}', '--output={d}/ens'],
          workdir='base',
          workdir2='base',
      ),
      refuse(
          'ensemble.eval_without_output',
          [*BASE, '--mode=eval', '--workdir={w},{w2}'],
          '^error: .*--output',
          workdir='base',
          workdir2='base',
      ),
      refuse(
          'ensemble.different_data',
          [*tr, '--workdir={w},{w2}'],
          '^error: .*(vocab|data)',
          workdir='base',
          workdir2='text',
          stdin=b'a\n',
      ),
      refuse(
          'ensemble.member_missing',
          [*tr, '--workdir={w},{d}/none'],
          '^error: .*none',
          workdir='base',
          stdin=b'a\n',
          check=absent('none'),
      ),
      succeed(
          'ensemble.trailing_comma',
          [*tr, '--workdir={w},'],
          workdir='base',
          stdin=b'a\n',
          check=stdout_lines(1),
      ),
      refuse(
          'ensemble.step_not_kept_by_one',
          [*tr, '--workdir={w},{w2}', '--config.decode.step=6'],
          '^error: .*step 6',
          workdir='base',
          workdir2='base',
          setup=lambda d: shutil.rmtree(step_path(d, 6, 'w2')),
          stdin=b'a\n',
      ),
  ]


def _text_cases():
  """The text-corpus workdir: vocabularies and the encoded cache."""
  on = [*TEXT, '--workdir={w}']
  train = [*on, '--config.train.num_steps=6']
  tr = [*on, '--mode=translate']

  def vocab_file(d):
    return glob.glob(f'{d}/w/vocab/*.txt')[0]

  def cache_files(d):
    return [
        p
        for p in glob.glob(f'{d}/w/data_cache/**', recursive=True)
        if os.path.isfile(p)
    ]

  def truncate_cache(d):
    for path in cache_files(d):
      os.truncate(path, os.path.getsize(path) // 2)

  def garble_vocab(d):
    path = vocab_file(d)
    with open(path, encoding='utf-8') as f:
      words = f.read().splitlines()
    words[5], words[6] = words[6], words[5]
    write(path, '\n'.join(words) + '\n')

  return [
      succeed(
          'text.translate',
          tr,
          workdir='text',
          stdin=b'eins zwei\n',
          check=stdout_lines(1),
      ),
      succeed('text.train_more', train, workdir='text', writes=TRAIN_WRITES),
      succeed(
          'text.translate_unknown_word',
          tr,
          workdir='text',
          stdin=b'eins zzzz\n',
          check=stdout_lines(1),
      ),
      refuse(
          'text.vocab_missing.translate',
          tr,
          '^error: .*vocab',
          workdir='text',
          stdin=b'eins\n',
          setup=lambda d: os.remove(vocab_file(d)),
      ),
      # Built again from the corpus, as the checkpoints recorded it.
      succeed(
          'text.vocab_missing.train',
          train,
          workdir='text',
          setup=lambda d: os.remove(vocab_file(d)),
          writes=(*TRAIN_WRITES, 'vocab/*'),
      ),
      refuse(
          'text.vocab_reordered.translate',
          tr,
          '^error: .*vocab',
          workdir='text',
          stdin=b'eins\n',
          setup=garble_vocab,
      ),
      refuse(
          'text.vocab_reordered.train',
          train,
          '^error: .*vocab',
          workdir='text',
          setup=garble_vocab,
      ),
      refuse(
          'text.vocab_not_utf8.translate',
          tr,
          '^error: .*vocab',
          workdir='text',
          stdin=b'eins\n',
          setup=lambda d: write(vocab_file(d), b'\xff\xfe\x00garbage\n'),
      ),
      refuse(
          'text.vocab_empty.translate',
          tr,
          '^error: .*vocab',
          workdir='text',
          stdin=b'eins\n',
          setup=lambda d: write(vocab_file(d), b''),
      ),
      refuse(
          'text.other_vocab_min_count.train',
          [*train, '--config.data.vocab.min_count=2'],
          '^error: .*(vocab|min_count)',
          workdir='text',
      ),
      refuse(
          'text.vocab_is_a_directory.translate',
          tr,
          '^error: .*is a directory',
          workdir='text',
          stdin=b'eins\n',
          setup=lambda d: (
              os.remove(vocab_file(d)),
              os.makedirs(f'{d}/w/vocab/words_shared.txt'),
          ),
      ),
      refuse(
          'text.other_vocab_size.train',
          [*train, '--config.data.vocab.size=10'],
          '^error: .*vocab',
          workdir='text',
      ),
      succeed(
          'text.cache_truncated.train',
          train,
          workdir='text',
          setup=truncate_cache,
          writes=(*TRAIN_WRITES, 'data_cache/*'),
      ),
      succeed(
          'text.cache_deleted.train',
          train,
          workdir='text',
          setup=lambda d: shutil.rmtree(f'{d}/w/data_cache'),
          writes=TRAIN_WRITES,
      ),
      succeed(
          'text.eval_test_split',
          [*on, '--mode=eval'],
          workdir='text',
          writes=EVAL_WRITES,
      ),
  ]


def cases():
  """The cases of this file in running order, but the folded ones."""
  return folded.without(_mode_cases() + _ensemble_cases() + _text_cases())
