"""Bad corpora (prepare), nmt_jax.average, nmt_jax.sweep, benchmarks.bench."""

import os
import re

from tests.faults import folded
from tests.faults.battery import CONFIG
from tests.faults.battery import LAST
from tests.faults.battery import QUICK
from tests.faults.battery import absent
from tests.faults.battery import chain
from tests.faults.battery import corpus_lines
from tests.faults.battery import damage
from tests.faults.battery import flip_a_byte
from tests.faults.battery import make_dir
from tests.faults.battery import refuse
from tests.faults.battery import stdout_lines
from tests.faults.battery import succeed
from tests.faults.battery import with_corpus
from tests.faults.battery import write


def _corpus_cases():
  """A new workdir on a bad corpus, written per case in {d}/c.*."""
  prep = [
      f'--config={CONFIG}',
      *QUICK,
      '--config.data.name=text:{d}/c',
      '--config.data.vocab.kind=word',
      '--config.data.max_length=20',
      '--workdir={d}/w',
      '--mode=prepare',
  ]
  train_de = b''.join(corpus_lines('numbers.train.de'))
  train_en = corpus_lines('numbers.train.en')
  cases = [
      succeed('corpus.good', prep, setup=with_corpus()),
      succeed(
          'corpus.no_test_split',
          prep,
          setup=with_corpus(test_de=None, test_en=None),
      ),
      succeed(
          'corpus.bom_and_cr',
          prep,
          setup=with_corpus(
              train_de=b'\xef\xbb\xbf' + train_de.replace(b'\n', b'\r\n')
          ),
      ),
      succeed(
          'corpus.one_very_long_line',
          prep,
          setup=with_corpus(
              train_de=b'eins ' * 20000
              + b'\n'
              + b''.join(corpus_lines('numbers.train.de')[1:])
          ),
      ),
      succeed(
          'corpus.sentencepiece',
          [
              *prep,
              '--config.data.vocab.kind=sentencepiece',
              '--config.data.vocab.size=48',
          ],
          setup=with_corpus(),
      ),
      succeed(
          'corpus.char_vocab',
          [*prep, '--config.data.vocab.kind=char'],
          setup=with_corpus(),
      ),
  ]
  bad = [
      ('train_source_missing', dict(train_de=None), 'c.train.de'),
      ('train_target_missing', dict(train_en=None), 'c.train.en'),
      ('dev_missing', dict(dev_de=None, dev_en=None), 'c.dev'),
      ('test_one_side', dict(test_en=None), 'c.test.en is missing'),
      ('train_empty', dict(train_de=b'', train_en=b''), 'c.train'),
      (
          'dev_blank_lines',
          dict(dev_de=b'\n\n \n', dev_en=b'\n\n\n'),
          'give both sides',
      ),
      (
          'train_counts_differ',
          dict(train_en=b''.join(train_en[:-3])),
          '(400|397)',
      ),
      ('dev_counts_differ', dict(dev_en=b'one\n'), 'c.dev'),
      (
          'train_not_utf8',
          dict(train_de=b'eins\n\xff\xfe zwei\n' + train_de),
          'UTF-8',
      ),
      (
          'train_binary',
          dict(train_de=bytes(range(256)) * 40),
          '(UTF-8|c.train)',
      ),
      (
          'every_line_too_long',
          dict(train_de=b'a b c\n' * 50, train_en=b'a b c\n' * 50),
          'max_length',
      ),
  ]
  # The vocabularies may be built before the fault is found: a workdir with
  # vocab/ may stay (prepare's product), so no check that none is left.
  for name, files, pattern in bad:
    args = list(prep)
    if name == 'every_line_too_long':
      args.append('--config.data.max_length=2')
    cases.append(
        refuse(
            f'corpus.{name}',
            args,
            '^error: .*' + pattern,
            setup=with_corpus(**files),
        )
    )
  cases += [
      refuse(
          'corpus.train_source_is_a_directory',
          prep,
          '^error: .*c.train.de.*directory',
          setup=chain(with_corpus(train_de=None), make_dir('c.train.de')),
          check=absent('w'),
      ),
      refuse(
          'corpus.prefix_in_missing_folder',
          [*prep, '--config.data.name=text:{d}/none/c'],
          '^error: .*none',
          check=absent('w'),
      ),
      refuse(
          'corpus.prefix_is_a_directory',
          [*prep, '--config.data.name=text:{d}'],
          '^error: .*',
          check=absent('w'),
      ),
      refuse(
          'corpus.sentencepiece_too_many_pieces',
          [
              *prep,
              '--config.data.vocab.kind=sentencepiece',
              '--config.data.vocab.size=100000',
          ],
          '^error: .*vocab.size',
          setup=with_corpus(),
      ),
      refuse(
          'corpus.train_mode_counts_differ',
          prep[:-1],
          '^error: .*(400|397)',
          setup=with_corpus(train_en=b''.join(train_en[:-3])),
          check=absent('w'),
      ),
      refuse(
          'corpus.replace_unk_with_sentencepiece',
          [
              *prep[:-1],
              '--config.data.vocab.kind=sentencepiece',
              '--config.data.vocab.size=48',
              '--config.decode.replace_unk=true',
          ],
          '^error: .*replace_unk',
          setup=with_corpus(),
          check=absent('w'),
      ),
  ]
  return cases


def _average_cases():
  avg = ['--workdir={w}', '--output={d}/avg']
  return [
      succeed(
          'average.last_two',
          [*avg, '--last=2'],
          module='nmt_jax.average',
          workdir='base',
      ),
      succeed(
          'average.best_two',
          [*avg, '--best=2'],
          module='nmt_jax.average',
          workdir='base',
      ),
      refuse(
          'average.no_count',
          avg,
          '^error: .*(--last|--best)',
          module='nmt_jax.average',
          workdir='base',
      ),
      refuse(
          'average.last_and_best',
          [*avg, '--last=2', '--best=2'],
          '^error: .*(--last|--best)',
          module='nmt_jax.average',
          workdir='base',
      ),
      refuse(
          'average.last_negative',
          [*avg, '--last=-1'],
          '^error: .*--last',
          module='nmt_jax.average',
          workdir='base',
      ),
      refuse(
          'average.last_more_than_kept',
          [*avg, '--last=50'],
          '^error: .*(50|keep)',
          module='nmt_jax.average',
          workdir='base',
      ),
      refuse(
          'average.last_text',
          [*avg, '--last=two'],
          '^error: .*--last',
          module='nmt_jax.average',
          workdir='base',
      ),
      refuse(
          'average.no_output',
          ['--workdir={w}', '--last=2'],
          '^error: .*--output',
          module='nmt_jax.average',
          workdir='base',
      ),
      refuse(
          'average.no_workdir',
          ['--output={d}/avg', '--last=2'],
          '^error: .*--workdir',
          module='nmt_jax.average',
      ),
      refuse(
          'average.workdir_missing',
          ['--workdir={d}/none', '--output={d}/avg', '--last=2'],
          '^error: .*none',
          module='nmt_jax.average',
          check=absent('avg'),
      ),
      refuse(
          'average.output_is_the_workdir',
          ['--workdir={w}', '--output={w}', '--last=2'],
          '^error: .*(exists|output)',
          module='nmt_jax.average',
          workdir='base',
      ),
      refuse(
          'average.output_is_another_workdir',
          [*avg[:1], '--output={w2}', '--last=2'],
          '^error: .*(exists|output)',
          module='nmt_jax.average',
          workdir='base',
          workdir2='base',
      ),
      refuse(
          'average.output_is_a_file',
          [*avg[:1], '--output={d}/f', '--last=2'],
          '^error: .*f',
          module='nmt_jax.average',
          workdir='base',
          setup=lambda d: write(f'{d}/f', 'x'),
      ),
      refuse(
          'average.damaged_last',
          [*avg, '--last=2'],
          f'^error: .*checkpoints/{LAST} is damaged',
          module='nmt_jax.average',
          workdir='base',
          setup=damage(flip_a_byte),
          check=absent('avg'),
      ),
      refuse(
          'average.unknown_flag',
          [*avg, '--lst=2'],
          '^error: .*lst',
          module='nmt_jax.average',
          workdir='base',
      ),
  ]


def _sweep_cases():
  m = 'nmt_jax.sweep'
  run = ['run', f'--config={CONFIG}', '--root={d}/root']
  cases = [
      refuse('sweep.no_command', [], '^error: .*(run|aggregate|tau)', module=m),
      refuse('sweep.unknown_command', ['bogus'], '^error: .*bogus', module=m),
      refuse(
          'sweep.run_without_root',
          ['run', f'--config={CONFIG}', '--grid=seed=1,2'],
          '^error: .*--root',
          module=m,
      ),
      refuse(
          'sweep.run_without_grid', run, '^error: .*(--grid|--sweep)', module=m
      ),
      refuse(
          'sweep.grid_without_values',
          [*run, '--grid=seed'],
          '^error: .*seed',
          module=m,
      ),
      refuse(
          'sweep.grid_unknown_field',
          [*run, '--grid=train.num_step=1,2'],
          '^error: .*num_step',
          module=m,
      ),
      refuse(
          'sweep.grid_bad_value',
          [*run, '--grid=train.num_steps=-1,2'],
          '^error: .*num_steps',
          module=m,
      ),
      refuse(
          'sweep.grid_wrong_type',
          [*run, '--grid=train.num_steps=a,b'],
          '^error: .*num_steps',
          module=m,
      ),
      refuse(
          'sweep.set_unknown_field',
          [*run, '--grid=seed=1,2', '--set=train.bogus=1'],
          '^error: .*bogus',
          module=m,
      ),
      refuse(
          'sweep.shard_out_of_range',
          [*run, '--grid=seed=1,2', '--shard=3/2'],
          '^error: .*shard',
          module=m,
      ),
      refuse(
          'sweep.shard_text',
          [*run, '--grid=seed=1,2', '--shard=abc'],
          '^error: .*shard',
          module=m,
      ),
      refuse(
          'sweep.sweep_file_missing',
          ['run', '--sweep={d}/none.py', '--root={d}/root'],
          '^error: .*none.py',
          module=m,
      ),
      refuse(
          'sweep.config_missing',
          ['run', '--config={d}/none.py', '--root={d}/root', '--grid=seed=1,2'],
          '^error: .*none.py',
          module=m,
      ),
      succeed(
          'sweep.dry_run',
          [*run, '--grid=seed=1,2', '--dry_run'],
          module=m,
          check=stdout_lines(2),
      ),
      refuse(
          'sweep.aggregate_root_missing',
          ['aggregate', '--root={d}/none'],
          '^error: .*none',
          module=m,
      ),
      refuse(
          'sweep.aggregate_no_workdirs',
          ['aggregate', '--root={d}/empty'],
          '^error: .*(empty|workdir)',
          module=m,
          setup=make_dir('empty'),
      ),
      succeed(
          'sweep.aggregate_csv_folder_missing',
          ['aggregate', '--workdirs={w}', '--csv={d}/none/x.csv'],
          module=m,
          workdir='base',
          check=lambda d, _: ''
          if os.path.exists(f'{d}/none/x.csv')
          else ('no CSV written'),
      ),
      refuse(
          'sweep.tau_not_flexible',
          ['tau', f'--config={CONFIG}', '--workdir={w}'],
          '^error: .*flexible',
          module=m,
          workdir='base',
      ),
      refuse(
          'sweep.tau_text',
          [
              'tau',
              '--config=configs/flexible.py:tiny',
              '--workdir={w}',
              '--taus=a,b',
          ],
          '^error: .*taus',
          module=m,
          workdir='base',
      ),
      refuse(
          'sweep.tau_workdir_missing',
          ['tau', '--config=configs/flexible.py:tiny', '--workdir={d}/none'],
          '^error: .*none',
          module=m,
          check=absent('none'),
      ),
  ]
  return cases


def _bench_cases():
  m = 'benchmarks.bench'
  tiny = f'--config={CONFIG}'
  return [
      refuse('bench.no_command', [tiny], '^error: .*(train|decode)', module=m),
      refuse(
          'bench.unknown_command', ['bogus', tiny], '^error: .*bogus', module=m
      ),
      refuse(
          'bench.config_missing',
          ['train', '--config=/nonexistent.py'],
          '^error: .*does not exist',
          module=m,
      ),
      refuse('bench.no_config', ['train'], '^error: .*--config', module=m),
      refuse(
          'bench.threads_negative',
          ['train', tiny, '--threads=-3'],
          '^error: .*--threads',
          module=m,
      ),
      refuse(
          'bench.steps_zero',
          ['train', tiny, '--steps=0'],
          '^error: .*--steps',
          module=m,
      ),
      refuse(
          'bench.repeats_negative',
          ['train', tiny, '--repeats=-1'],
          '^error: .*--repeats',
          module=m,
      ),
      refuse(
          'bench.compare_missing',
          ['decode', tiny, '--compare=/nonexistent.py'],
          '^error: .*nonexistent',
          module=m,
      ),
      refuse(
          'bench.json_folder_missing',
          ['train', tiny, '--json={d}/none/x.json'],
          '^error: .*none',
          module=m,
      ),
      refuse(
          'bench.trace_unknown',
          ['ops', tiny, '--trace=bogus'],
          '^error: .*trace',
          module=m,
      ),
      refuse(
          'bench.bad_config_value',
          ['train', tiny, '--config.train.batch_size=0'],
          '^error: .*batch_size',
          module=m,
      ),
      refuse(
          'bench.unknown_flag',
          ['train', tiny, '--stpes=3'],
          '^error: .*stpes',
          module=m,
      ),
      refuse(
          'bench.modes_unknown',
          ['decode', tiny, '--modes=bogus'],
          '^error: .*bogus',
          module=m,
      ),
      refuse(
          'bench.peer_missing',
          ['train', tiny, '--peer={d}/none*.json'],
          '^error: .*none',
          module=m,
      ),
  ]


def _sweep_file_cases():
  """Sweep files that are not what `sweep run` needs, and config files with
  a misspelt field: one error line each, nothing run or written."""
  m = 'nmt_jax.sweep'
  run = ['run', '--sweep={d}/s.py', '--root={d}/root']
  good = "{'name': 'a', 'config': 'configs/global_general.py'}"
  files = {
      'raises': ('raise RuntimeError("boom")', 'RuntimeError: boom'),
      'syntax_error': ('def get_sweep(arg=None)', 'syntax error'),
      'no_get_sweep': ('x = 1', 'has no get_sweep'),
      'returns_none': ('def get_sweep(arg=None):\n  return None', 'NoneType'),
      'run_without_config': (
          "def get_sweep(arg=None):\n  return [{'name': 'a'}]",
          "needs 'config'",
      ),
      'overrides_as_a_list': (
          (
              "def get_sweep(arg=None):\n  return [{'name': 'a', 'config':"
              " 'configs/global_general.py', 'overrides': ['x=1']}]"
          ),
          "'overrides' is a list",
      ),
  }
  for name in ('../../escape', '/tmp/absolute', '.'):
    files[f'run_name_{name.strip("./") or "dot"}'] = (
        f'def get_sweep(arg=None):\n  return [{good},'
        f" {{'name': {name!r}, 'config': 'configs/global_general.py'}}]",
        'outside --root',
    )
  cases = [
      refuse(
          f'sweepfile.{name}',
          run,
          f'^error: .*{re.escape(fragment)}',
          module=m,
          setup=lambda d, text=text: write(f'{d}/s.py', text + '\n'),
          check=absent('root'),
      )
      for name, (text, fragment) in files.items()
  ]
  cases.append(
      refuse(
          'sweepfile.root_is_a_file',
          ['run', '--sweep=configs/sweeps/britz_copy.py', '--root={d}/root'],
          '^error: .*is a file',
          module=m,
          setup=lambda d: write(f'{d}/root', 'kept'),
      )
  )
  typo = (
      'from nmt_jax.config import defaults\n'
      'def get_config(arg=None):\n'
      '  c = defaults.get_config(arg)\n'
      '  c.model.hiden_size = 64\n'
      '  return c\n'
  )
  cases.append(
      refuse(
          'configfile.misspelt_field',
          ['--config={d}/typo.py:tiny', '--workdir={d}/w'],
          '^error: .*did you mean model.hidden_size',
          setup=lambda d: write(f'{d}/typo.py', typo),
          check=absent('w'),
      )
  )
  return cases


def cases():
  """The cases of this file in running order, but the folded ones."""
  return folded.without(
      _corpus_cases()
      + _average_cases()
      + _sweep_cases()
      + _sweep_file_cases()
      + _bench_cases()
  )
