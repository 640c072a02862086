"""The toolkit features, on trained copy models.

Alignments of a trained copy model are the diagonal (also when it reads the
source reversed); n-best lists, scores, ensembles and averaged checkpoints
agree with the single model they are built from; early stopping and plateau
decay decide as the validations say, also across a resume.

The command lines run as commands where their own behaviour is tested (an
ensemble's or an average's command, reading files, a one-line error, the
compilation cache across processes, profiling); the rest calls what they
call (train.train_and_evaluate, inference.evaluate / translate / score,
average.average_checkpoints) in this process.
"""

import functools
import gzip
import json
import os
import shutil
import signal
import stat
import subprocess
import sys

import jax
import numpy as np
import pytest

from benchmarks import op_times
from nmt_jax import average
from nmt_jax import inference
from nmt_jax import train
from nmt_jax.analysis import attention_maps
from nmt_jax.config import validation
from nmt_jax.data import batching
from nmt_jax.data import dataset
from nmt_jax.decoding import restore
from nmt_jax.system import compile_cache
from nmt_jax.system import errors
from nmt_jax.training import steps
from nmt_jax.workdir import writers
from tests import conftest
from tests.commands import QUICK
from tests.commands import cli_config
from tests.commands import copy_reading_backwards
from tests.commands import final_params
from tests.commands import nmt

pytestmark = pytest.mark.slow

COPY = [
    '--config=configs/global_dot.py:tiny',
    '--config.model.hidden_size=32',
    '--config.model.embed_size=32',
    '--config.train.learning_rate=0.01',
    '--config.train.batch_size=32',
    '--config.train.num_steps=600',
    '--config.train.eval_every=300',
    '--config.train.checkpoint_every=300',
    '--config.train.keep_checkpoints=3',
    '--config.train.log_every=300',
    '--config.decode.beam_size=3',
]


def _config(*overrides):
  """The config of `nmt(*COPY, *overrides)`."""
  return cli_config(*COPY, *overrides)


def _lines(text):
  """Input lines as the command line reads them from stdin."""
  return text.split('\n')[:-1]


@pytest.fixture(scope='module')
def copy_model(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp('copy') / 'run')
  train.train_and_evaluate(_config(), workdir)
  return workdir


def _diagonal_fraction(links):
  """(exact, within one, count) of (source, target position) links."""
  exact = np.mean([i == j for i, j in links])
  near = np.mean([abs(i - j) <= 1 for i, j in links])
  return exact, near, len(links)


def _links(line):
  """(source position, target position) of a line of pharaoh links."""
  return [tuple(map(int, link.split('-'))) for link in line.split()]


def _reversed_copy(copy_model, workdir):
  """The copy model reading its sources backwards, as one trained with
  data.reverse_source reads them: it copies what it reads, so it writes
  each source reversed, and attends to the positions it read in order."""
  copy_reading_backwards(copy_model, workdir)
  return ['--config.data.reverse_source=true']


@pytest.mark.parametrize('reverse', [False, True])
def test_alignments_of_a_trained_copy_model_are_the_diagonal(
    copy_model, tmp_path, reverse
):
  workdir = copy_model
  extra = []
  if reverse:
    workdir = str(tmp_path / 'reversed')
    extra = _reversed_copy(copy_model, workdir)
  inference.evaluate(
      _config(*extra, '--config.decode.alignments=pharaoh'), [workdir]
  )
  with open(os.path.join(workdir, 'eval_alignments.txt')) as f:
    alignments = f.read().splitlines()
  if not reverse:
    with open(os.path.join(workdir, 'eval_results.json')) as f:
      assert json.load(f)['bleu'] > 90
    exact, near, links = _diagonal_fraction(
        [link for line in alignments for link in _links(line)]
    )
  else:
    # In the text's order: each written word's link goes to the word it
    # copied, the mirror position (read in order, they were the diagonal).
    task = restore.restore_for_inference(
        validation.resolve(_config(*extra)), workdir
    )[0]
    with open(os.path.join(workdir, 'eval_hypotheses.txt')) as f:
      hypotheses = f.read().splitlines()
    sources = task.test_or_eval.source_text
    assert len(sources) == len(hypotheses) == len(alignments)
    copied = np.mean([
        hypothesis.split() == source.split()[::-1]
        for source, hypothesis in zip(sources, hypotheses)
    ])
    assert copied > 0.8, copied
    exact, near, links = _diagonal_fraction([
        (len(source.split()) - 1 - i, j)
        for source, line in zip(sources, alignments)
        for i, j in _links(line)
    ])
  # A small model after 600 steps: some links sit one position off.
  assert links > 100 and exact > 0.9 and near > 0.98
  # Soft alignments: each sentence's attention matrix, in the text's order.
  inference.evaluate(
      _config(*extra, '--config.decode.alignments=soft'), [workdir]
  )
  assert not os.path.exists(os.path.join(workdir, 'eval_alignments.txt'))
  with open(os.path.join(workdir, 'eval_hypotheses.txt')) as f:
    hypotheses = f.read().splitlines()
  task = restore.restore_for_inference(
      validation.resolve(_config(*extra)), workdir
  )[0]
  sources = task.test_or_eval.source_text
  with np.load(os.path.join(workdir, 'eval_alignments.npz')) as soft:
    assert sorted(soft.files, key=int) == [str(i) for i in range(len(sources))]
    mass = []
    for i, (source, hypothesis, line) in enumerate(
        zip(sources, hypotheses, alignments)
    ):
      matrix = soft[str(i)]
      n = len(source.split())
      assert matrix.dtype == np.float32
      assert matrix.shape == (len(hypothesis.split()) + 1, n + 1)
      np.testing.assert_allclose(matrix.sum(1), 1.0, atol=1e-5)
      # Its argmax is the hard links (a link to the source EOS is none).
      argmax = np.argmax(matrix[:-1], axis=1)
      assert [(int(i), j) for j, i in enumerate(argmax) if i < n] == _links(
          line
      )
      # The copy's attention: target word j on source word j (reversed: its
      # mirror, the diagonal as read), within one position.
      ordered = matrix[:, ::-1] if reverse else matrix
      ordered = ordered[:, 1:] if reverse else ordered[:, :-1]  # words only
      for j in range(min(n, len(matrix) - 1)):
        mass.append((ordered[j, j], ordered[j, max(0, j - 1) : j + 2].sum()))
  # Uniform attention would give 1 / (n + 1), ~0.18 here.
  exact, near = np.mean(mass, axis=0)
  assert exact > 0.5 and near > 0.85, (exact, near)
  # Attention maps are in reading order too.
  (translation,) = attention_maps.translate_with_attention(
      workdir, ['a b c d e f']
  )
  assert translation.source == ['a', 'b', 'c', 'd', 'e', 'f', '</s>']
  order = np.arange(6)[::-1] if reverse else np.arange(6)
  assert translation.hypothesis[:6] == [translation.source[i] for i in order]
  np.testing.assert_array_equal(
      np.argmax(translation.weights[:6], axis=1), order
  )
  if not reverse:
    # An evaluation without alignments leaves none of an earlier one's.
    inference.evaluate(_config(), [workdir])
    for name in ('eval_alignments.txt', 'eval_alignments.npz'):
      assert not os.path.exists(os.path.join(workdir, name))


def test_nbest_first_lines_are_the_translations(copy_model, tmp_path):
  # What --mode=translate prints, with and without --config.decode.nbest.
  sources = _lines('a b c d e f\nb b a\n\nc\n')
  best = inference.translate(_config(), [copy_model], sources)
  nbest = inference.translate(
      _config('--config.decode.nbest=3'), [copy_model], sources
  )
  entries = [line.split(' ||| ') for text in nbest for line in text.split('\n')]
  assert sorted({int(e[0]) for e in entries}) == [0, 1, 3]  # input lines
  for index in (0, 1, 3):
    mine = [e for e in entries if int(e[0]) == index]
    assert 1 <= len(mine) <= 3 and mine[0][1] == best[index]
    assert all(len(e) == 4 and e[2] == f'F0= {e[3]}' for e in mine)
    scores = [float(e[3]) for e in mine]
    assert scores == sorted(scores, reverse=True)
  assert best[2] == ''
  # Soft alignments of the same sentences, keyed by input line (blank: none).
  soft = _config('--config.decode.alignments=soft')
  with pytest.raises(errors.ConfigError, match='alignments_file'):
    inference.translate(soft, [copy_model], sources)  # stdout: no file
  assert (
      inference.translate(
          soft, [copy_model], sources, output=str(tmp_path / 'out.txt')
      )
      == best
  )
  # A FIFO (or a device) named as the file is refused, never replaced by
  # one: before decoding on the command line, at the write here.
  fifo = tmp_path / 'fifo'
  os.mkfifo(fifo)
  to_fifo = _config(
      '--config.decode.alignments=soft',
      f'--config.decode.alignments_file={fifo}',
  )
  with pytest.raises(errors.WriteError, match='is a FIFO'):
    inference.checked_alignments_file(to_fifo, None)
  with pytest.raises(errors.WriteError, match='is a FIFO'):
    inference.translate(to_fifo, [copy_model], sources)
  assert stat.S_ISFIFO(os.stat(fifo).st_mode)
  with np.load(tmp_path / 'out.txt.alignments.npz') as matrices:
    assert sorted(matrices.files) == ['0', '1', '3']
    for index in (0, 1, 3):
      words = len(sources[index].split())
      assert matrices[str(index)].shape == (
          len(best[index].split()) + 1,
          words + 1,
      )


def test_translate_and_eval_draw_samples(copy_model, tmp_path):
  # A hot temperature, so that the copy model's samples differ.
  sample = ['--config.decode.method=sample', '--config.decode.temperature=3.0']
  sources = 'a b c d e f\nb b a\n\nc\n'
  printed = nmt(
      *COPY,
      *sample,
      '--config.decode.num_samples=4',
      f'--workdir={copy_model}',
      '--mode=translate',
      input_text=sources,
  ).stdout.splitlines()
  entries = [line.split(' ||| ') for line in printed]
  assert all(len(e) == 4 and e[2] == f'F0= {e[3]}' for e in entries)
  assert [int(e[0]) for e in entries] == [0] * 4 + [1] * 4 + [3] * 4
  assert len({e[1] for e in entries}) > 3  # they are samples
  # One sample: one line per input line, each the first of the four.
  first = inference.translate(_config(*sample), [copy_model], _lines(sources))
  assert first == [entries[0][1], entries[4][1], '', entries[8][1]]
  # Their scores: the log-probability --mode=score gives the pair.
  rows = _lines(sources)
  pairs = [(1, rows[int(e[0])], e[1]) for e in entries]
  totals = [
      float(line.split('\t')[0])
      for line in inference.score(_config(), [copy_model], pairs)
  ]
  np.testing.assert_allclose([float(e[3]) for e in entries], totals, atol=1e-4)
  # eval (in a copy: the workdir keeps its beam search's files): the first
  # samples as hypotheses, all of them in the n-best file.
  workdir = str(tmp_path / 'copy')
  shutil.copytree(copy_model, workdir)
  result = inference.evaluate(
      _config(*sample, '--config.decode.num_samples=2'), [workdir]
  )
  assert result['decode_method'] == 'sample' and 'beam_size' not in result
  nbest = (tmp_path / 'copy' / 'eval_nbest.txt').read_text().splitlines()
  hypotheses = (tmp_path / 'copy' / 'eval_hypotheses.txt').read_text()
  assert len(nbest) == 2 * result['num_sentences']
  assert [line.split(' ||| ')[1] for line in nbest[::2]] == (
      hypotheses.splitlines()
  )


def test_scores_equal_the_loss_and_read_files_or_pairs(copy_model, tmp_path):
  pairs = [('a b c', 'a b c'), ('d e f a', 'd e e a'), ('b', 'c c')]
  (tmp_path / 'src').write_text(''.join(s + '\n' for s, _ in pairs))
  (tmp_path / 'tgt').write_text(''.join(t + '\n' for _, t in pairs))
  # The command reads the files; a pair per batch.
  from_files = nmt(
      *COPY,
      f'--workdir={copy_model}',
      '--mode=score',
      f'--source={tmp_path}/src',
      f'--target={tmp_path}/tgt',
      '--config.decode.batch_size=1',
  ).stdout.splitlines()
  # What it prints for tab-separated pairs (test_corpus.py reads them from
  # stdin), all in one batch.
  from_pairs = inference.score(
      _config(),
      [copy_model],
      [(i + 1, s, t) for i, (s, t) in enumerate(pairs)],
  )
  assert len(from_files) == len(from_pairs) == 3
  config = validation.resolve(_config())
  task, model, _, params, _ = restore.restore_for_inference(config, copy_model)
  # Jitted, as training runs it.
  eval_step = jax.jit(functools.partial(steps.eval_step, model=model))
  for (source, target), a, b in zip(pairs, from_files, from_pairs):
    total_a, mean_a, each_a = a.split('\t')
    total_b = b.split('\t')[0]
    # float32 sums: a few units in the last place (ulp(18) = 1.9e-6).
    np.testing.assert_allclose(float(total_a), float(total_b), rtol=1e-6)
    assert len(each_a.split()) == len(target.split()) + 1  # EOS
    # The teacher-forced loss of the pair alone, as training computes it.
    split = dataset.Split(
        [np.asarray(task.source_vocab.encode(source), np.int32)],
        [np.asarray(task.target_vocab.encode(target), np.int32)],
        [source],
        [target],
    )
    batch = batching.make_batch(split, [0], 8)
    out = eval_step(params, batch)
    np.testing.assert_allclose(
        -float(total_a), out['loss_sum'], rtol=1e-5, atol=2e-6
    )
    np.testing.assert_allclose(
        float(mean_a), float(total_a) / (len(target.split()) + 1), atol=2e-6
    )
  bad = nmt(
      *COPY,
      f'--workdir={copy_model}',
      '--mode=score',
      input_text='a b c\n',
      check=False,
  )
  assert bad.returncode == 2 and 'tab-separated' in bad.stderr


def test_an_ensemble_of_copies_is_the_model(copy_model, tmp_path):
  # decoding/test_toolkit.py checks the ensemble's steps and searches; here
  # the modes built on them, on a trained model.
  sources = ['a b c d e f', 'b b a', 'c']
  translate = lambda paths: inference.translate(_config(), paths, sources)
  assert translate([copy_model] * 2) == translate([copy_model])
  pairs = [(1, 'a b c', 'a b c'), (2, 'b b a', 'b a')]
  score = lambda paths, *overrides: inference.score(
      _config(*overrides), paths, pairs
  )
  assert score([copy_model] * 2) == score([copy_model])
  # The command line's run options reach every member as a single workdir.
  bfloat16 = '--config.model.dtype=bfloat16'
  alone = score([copy_model], bfloat16)
  assert score([copy_model] * 2, bfloat16) == alone != score([copy_model])
  # As a command: --workdir=A,B makes the ensemble, --output its folder.
  out = tmp_path / 'ensemble'
  nmt(
      *COPY,
      f'--workdir={copy_model},{copy_model}',
      '--mode=eval',
      f'--output={out}',
  )
  inference.evaluate(_config(), [copy_model])
  with open(out / 'eval_results.json') as f:
    ensemble = json.load(f)
  with open(os.path.join(copy_model, 'eval_results.json')) as f:
    alone = json.load(f)
  assert ensemble['ensemble'] == [copy_model, copy_model]
  assert ensemble['bleu'] == alone['bleu']
  assert (out / 'eval_hypotheses.txt').read_text() == open(
      os.path.join(copy_model, 'eval_hypotheses.txt')
  ).read()
  with pytest.raises(errors.ConfigError, match='add --output=DIR'):
    inference.evaluate(_config(), [copy_model] * 2)
  before = open(os.path.join(copy_model, 'eval_results.json')).read()
  with pytest.raises(errors.ConfigError) as error:
    inference.evaluate(_config(), [copy_model] * 2, copy_model)
  assert 'is a training workdir' in str(error.value)
  assert '\n' not in str(error.value)  # one line, as the command prints it
  assert open(os.path.join(copy_model, 'eval_results.json')).read() == before


def test_averaged_checkpoints_load_in_every_mode(copy_model, tmp_path):
  best = str(tmp_path / 'best1')
  average.average_checkpoints(copy_model, best, best=1)
  sources = ['a b c d e f', 'b b a']
  translate = lambda w: inference.translate(_config(), [w], sources)
  assert translate(best) == translate(copy_model)  # the average of one
  # As a command (test_faults.py has its one-line errors).
  last = str(tmp_path / 'last2')
  conftest.run_module(
      'nmt_jax.average',
      f'--workdir={copy_model}',
      '--last=2',
      f'--output={last}',
  )
  averaged = final_params(last, 600)
  first, second = final_params(copy_model, 300), final_params(copy_model, 600)
  for key, value in averaged.items():
    if '.params' in key or "['params']" in key:
      expected = (first[key].astype(np.float64) + second[key]) / 2
      np.testing.assert_array_equal(value, expected.astype(value.dtype))
  inference.evaluate(_config(), [last])
  inference.score(_config(), [last], [(1, 'a b', 'a b')])
  with open(os.path.join(last, 'eval_results.json')) as f:
    assert json.load(f)['checkpoint_step'] == 600
  with pytest.raises(errors.UserError, match='keep_checkpoints'):
    average.average_checkpoints(copy_model, str(tmp_path / 'nine'), last=9)
  assert not os.path.exists(tmp_path / 'nine')
  # A workdir without checkpoints (prepared, or stopped before its first
  # save) is not a new folder: its config and vocabulary were replaced.
  prepared = tmp_path / 'prepared'
  prepared.mkdir()
  (prepared / 'config.json').write_text('{"mine": 1}')
  (prepared / 'metrics.jsonl').write_text('')
  with pytest.raises(
      errors.UserError, match='holds config.json, metrics.jsonl'
  ):
    average.average_checkpoints(copy_model, str(prepared), last=1)
  assert (prepared / 'config.json').read_text() == '{"mine": 1}'


def _valid_steps(workdir):
  return [
      r['step'] for r in writers.read_metrics(workdir) if r['split'] == 'valid'
  ]


def _scale(workdir, step):
  params = final_params(workdir, step)
  (value,) = [v for k, v in params.items() if 'step_size' in k]
  return float(value)


def test_plateau_decay_and_early_stopping_are_kept_across_a_resume(tmp_path):
  # One run, saved at step 4 and resumed there: it decays and stops as one
  # that was not interrupted (decoding/test_toolkit.py: the same factor bit
  # for bit; the best validation test below: stopping in one go).
  workdir = str(tmp_path / 'run')
  args = [
      '--config=configs/global_general.py:tiny',
      '--config.train.learning_rate=1e-12',  # validation BLEU never moves
      '--config.train.plateau_decay=0.5',
      '--config.train.plateau_patience=1',
      '--config.train.early_stopping_patience=3',
      *QUICK,
  ]
  run = lambda num_steps: train.train_and_evaluate(
      cli_config(*args, f'--config.train.num_steps={num_steps}'), workdir
  )
  run(4)
  # Validations at 2 and 4: the first is the best, the second decays.
  assert _valid_steps(workdir) == [2, 4]
  assert _scale(workdir, 4) == 0.5
  run(40)
  # The first validation (step 2) is the best; three more without a better
  # one (each decaying) stop the run.
  assert _valid_steps(workdir) == [2, 4, 6, 8]
  assert _scale(workdir, 8) == 0.125
  rates = {
      r['step']: r['learning_rate']
      for r in writers.read_metrics(workdir)
      if r['split'] == 'train'
  }
  assert rates[8] == pytest.approx(1e-12 * 0.25)  # logged before step 8's
  run(40)  # the same command again: stopped already, nothing trained
  assert _valid_steps(workdir) == [2, 4, 6, 8]
  with open(os.path.join(workdir, 'eval_results.json')) as f:
    # Equal BLEU everywhere: Orbax's best is the newest of the tie.
    assert json.load(f)['checkpoint_step'] == 8
  steps_saved = os.listdir(os.path.join(workdir, 'checkpoints'))
  assert max(int(s) for s in steps_saved if s.isdigit()) == 8


def test_the_best_validation_is_saved_between_checkpoint_steps(tmp_path):
  # Validations every 10 steps, checkpoints every 1000: early stopping ends
  # the run after validations that are no better, so unless the best one
  # was saved when it happened, eval would take a worse checkpoint.
  workdir = str(tmp_path / 'run')
  config = cli_config(
      '--config=configs/global_general.py:tiny',
      '--config.train.learning_rate=0.03',
      '--config.train.num_steps=400',
      '--config.train.eval_every=10',
      '--config.train.checkpoint_every=1000',
      '--config.train.early_stopping_patience=3',
      *QUICK,
  )
  train.train_and_evaluate(config, workdir)
  bleu = {
      r['step']: r['bleu']
      for r in writers.read_metrics(workdir)
      if r['split'] == 'valid'
  }
  last = max(bleu)
  assert last < 400 and bleu[last] < max(bleu.values())  # stopped early
  with open(os.path.join(workdir, 'eval_results.json')) as f:
    step = json.load(f)['checkpoint_step']
  assert bleu[step] == max(bleu.values()), (step, bleu)


def test_unknown_words_are_replaced_from_the_source(tmp_path):
  workdir = str(tmp_path / 'words')
  # Target words only the 3 most frequent: the rest of the target is <unk>.
  args = [
      '--config=configs/global_general.py:tiny',
      f'--config.data.name=text:{conftest.ROOT}/tests/corpora/numbers',
      '--config.data.max_length=12',
      '--config.data.vocab.kind=word',
      '--config.data.vocab.shared=false',
      '--config.data.vocab.size=40',
      '--config.data.vocab.target_size=3',
      '--config.train.num_steps=60',
      '--config.train.learning_rate=0.01',
      # Fewer validations and saves than the tiny preset's every 2 steps:
      # the same training (none of them decides anything here).
      '--config.train.eval_every=20',
      '--config.train.checkpoint_every=20',
      '--config.train.log_every=20',
      '--config.decode.beam_size=1',
  ]
  train.train_and_evaluate(cli_config(*args), workdir)
  with open(os.path.join(conftest.ROOT, 'tests/corpora/numbers.dev.de')) as f:
    sources = f.read().splitlines()[:12]
  translate = lambda *overrides: inference.translate(
      cli_config(*args, *overrides), [workdir], sources
  )
  plain = translate('--config.decode.alignments=pharaoh')
  replaced = translate('--config.decode.replace_unk=true')
  swapped = 0
  for source, line, new in zip(sources, plain, replaced):
    text, alignment = line.split(' ||| ')
    links = dict(
        (int(j), int(i))
        for i, j in (link.split('-') for link in alignment.split())
    )
    words, new_words = text.split(), new.split()
    assert len(words) == len(new_words)
    for j, (word, new_word) in enumerate(zip(words, new_words)):
      if word == '<unk>' and j in links:
        assert new_word == source.split()[links[j]]
        swapped += 1
      else:
        assert new_word == word
  assert swapped > 0
  wrong = cli_config(
      '--config=configs/global_general.py:tiny',
      '--config.decode.replace_unk=true',
  )
  with pytest.raises(errors.ConfigError, match='word vocabulary') as error:
    inference.translate(wrong, [workdir], ['a b'])
  assert '\n' not in str(error.value)  # one line, as the command prints it


@pytest.fixture(scope='module')
def sgd_run(tmp_path_factory):
  """A model without attention trained a few steps with the luong_sgd preset."""
  workdir = str(tmp_path_factory.mktemp('sgd') / 'run')
  config = cli_config(
      '--config=configs/no_attention.py:tiny,luong_sgd',
      '--config.train.num_epochs=0.05',
      '--config.train.batch_size=8',
      '--config.decode.beam_size=1',
  )
  train.train_and_evaluate(config, workdir)
  return workdir


def test_the_luong_sgd_preset_trains(sgd_run):
  with open(os.path.join(sgd_run, 'config.json')) as f:
    saved = json.load(f)['train']
  assert (saved['optimizer'], saved['learning_rate']) == ('sgd', 1.0)
  records = writers.read_metrics(sgd_run)
  assert records[-1]['split'] == 'eval'
  assert records[-1]['step'] == saved['num_steps']  # 5% of an epoch


def test_runs_share_a_persistent_compilation_cache(
    copy_model, tmp_path, monkeypatch
):
  env = conftest.subprocess_env()
  del env['JAX_COMPILATION_CACHE_DIR']  # the test suite's own cache
  cache = tmp_path / 'cache'
  env['NMT_JAX_COMPILATION_CACHE'] = str(cache)
  # Store every program: with optimizations off, a fast host compiles the
  # tiny decoder under the suite's 0.5 s threshold and stores nothing.
  env['JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS'] = '0'
  command = [
      sys.executable,
      '-m',
      'nmt_jax.main',
      *COPY,
      f'--workdir={copy_model}',
      '--mode=translate',
  ]
  run = lambda: subprocess.run(
      command,
      cwd=conftest.ROOT,
      env=env,
      input='a b c\n',
      capture_output=True,
      text=True,
      check=True,
  ).stdout
  first = run()
  entries = set(os.listdir(cache))
  assert entries  # the compiled decoder (and the encoder init) are stored
  assert run() == first
  assert set(os.listdir(cache)) == entries  # nothing compiled again
  # Turned off, the command leaves JAX's cache alone: nothing is written, not
  # even the default folder under ~ (what main's compile_cache.configure()
  # does, in this process).
  monkeypatch.delenv('JAX_COMPILATION_CACHE_DIR', raising=False)
  monkeypatch.setenv(compile_cache.ENV, 'off')
  off_cache = tmp_path / 'unused'
  monkeypatch.setenv('HOME', str(off_cache))
  updates = {}
  monkeypatch.setattr(
      compile_cache.jax.config, 'update', lambda k, v: updates.update({k: v})
  )
  assert compile_cache.configure() is None
  assert not updates and not off_cache.exists()


def test_profiles_of_training_steps_and_decoding(tmp_path):
  args = (
      '--config=configs/global_general.py:tiny',
      '--config.train.profile_steps=2',
      '--config.train.profile_from_step=1',
      '--config.decode.profile=true',
      '--config.decode.beam_size=1',
      # Steps 2-3 only: no validation or new bucket's compilation inside
      # the traced window (with them a trace is ~10x larger and slower).
      '--config.train.eval_every=100',
      '--config.data.num_buckets=1',
  )
  # jax.profiler (JAX 0.10.2 on XLA:CPU) once died of SIGSEGV inside the
  # traced steps of this run, in a CI run with both cores busy (not seen
  # again in 30 runs three at a time): a second run in a fresh workdir tells
  # that rare crash from profiling that fails.
  for attempt in range(2):
    workdir = tmp_path / f'run_{attempt}'
    result = nmt(*args, f'--workdir={workdir}', check=False)
    if result.returncode != -signal.SIGSEGV:
      break
  assert result.returncode == 0, result.stderr[-3000:]
  for folder, program in (
      ('profile', 'jit_train_step'),
      ('profile_decode', 'jit_greedy_search'),
  ):
    (trace,) = (workdir / folder / 'plugins' / 'profile').iterdir()
    names = {p.name for p in trace.iterdir()}
    assert 'perfetto_trace.json.gz' in names
    assert any(name.endswith('.xplane.pb') for name in names)
    with gzip.open(trace / 'perfetto_trace.json.gz') as f:
      modules = {module for module, *_ in op_times.op_events(json.load(f))}
    assert program in modules, modules


def test_averaging_the_last_n_stays_within_the_kept_checkpoints(tmp_path):
  # keep_checkpoints=1 keeps step 6 and the best, step 2: "the last 2" would
  # average a step far older than the one before the last (4, deleted).
  (tmp_path / 'config.json').write_text(
      json.dumps({'train': {'keep_checkpoints': 1}})
  )

  class Kept:
    directory = str(tmp_path / 'checkpoints')
    manager = type('Manager', (), {'all_steps': staticmethod(lambda: [2, 6])})

  assert average.choose_steps(Kept, last=1) == [6]
  with pytest.raises(errors.UserError, match='at most --last=1'):
    average.choose_steps(Kept, last=2)


def test_averaging_the_best_n_takes_only_validated_checkpoints(monkeypatch):
  # Step 4 was saved between validations: no BLEU to rank it by.
  class Kept:
    directory = '/nonexistent/checkpoints'
    manager = type(
        'Manager', (), {'all_steps': staticmethod(lambda: [2, 4, 6])}
    )

  bleu = {2: 10.0, 4: float('-inf'), 6: 20.0}
  monkeypatch.setattr(average, '_bleu', lambda ckpts, step: bleu[step])
  assert average.choose_steps(Kept, best=2) == [2, 6]
  with pytest.raises(errors.UserError, match='fewer than --best=3'):
    average.choose_steps(Kept, best=3)


def _run_with_validations(tmp_path, monkeypatch, validations, kept):
  """Checkpoints of `kept` steps of a run with these (step, BLEU)s."""
  with open(tmp_path / 'metrics.jsonl', 'w') as f:
    for step, value in validations:
      f.write(json.dumps({'step': step, 'split': 'valid', 'bleu': value}))
      f.write('\n')

  class Kept:
    directory = str(tmp_path / 'checkpoints')
    manager = type('Manager', (), {'all_steps': staticmethod(lambda: kept)})

  bleu = dict(validations)
  monkeypatch.setattr(average, '_bleu', lambda ckpts, step: bleu[step])
  return Kept


def test_averaging_the_best_n_refuses_when_a_better_one_is_gone(
    tmp_path, monkeypatch
):
  # Validations at steps 2, 4, 6 (BLEU 15, 12, 20); step 4 was rotated away
  # and step 8 (BLEU 1) kept as one of the newest: 2 and 8 are not the best 2.
  kept = _run_with_validations(
      tmp_path,
      monkeypatch,
      [(2, 15.0), (4, 12.0), (6, 20.0), (8, 1.0)],
      [2, 6, 8],
  )
  assert average.choose_steps(kept, best=2) == [2, 6]
  with pytest.raises(
      errors.UserError, match=r'steps \[4\] scored above.*--best=2,'
  ):
    average.choose_steps(kept, best=3)


def test_averaging_the_best_n_is_not_refused_for_a_tie_that_was_not_saved(
    tmp_path, monkeypatch
):
  # Validations 5, 5, 3, 3 at steps 1-4: training saves a new best only, so
  # of the tie it kept step 1 (and step 4, the newest). The best 1 was
  # refused as "step 2 has no kept checkpoint".
  kept = _run_with_validations(
      tmp_path, monkeypatch, [(1, 5.0), (2, 5.0), (3, 3.0), (4, 3.0)], [1, 4]
  )
  assert average.choose_steps(kept, best=1) == [1]
  # Step 2 (BLEU 5) beats step 4: [1, 4] are not the best 2.
  with pytest.raises(errors.UserError, match=r'steps \[2\] scored above'):
    average.choose_steps(kept, best=2)


def test_alignments_of_an_ensemble_without_attention_are_one_line(sgd_run):
  config = cli_config(
      '--config=configs/global_general.py:tiny',
      '--config.decode.alignments=pharaoh',
  )
  with pytest.raises(errors.UserError) as error:
    inference.translate(config, [sgd_run, sgd_run], ['a b c'])
  # One line, as the command prints it.
  message = str(error.value)
  assert 'no ensemble member has attention' in message and '\n' not in message
