"""Sweeps, aggregation, the tau sweep, translation with attention, plots and notebooks."""

import csv
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import trained_decode
from nmt_jax import inference
from nmt_jax.analysis import attention_maps
from nmt_jax.analysis import plots
from nmt_jax.analysis import runs as runs_lib
from nmt_jax.analysis import significance
from nmt_jax.analysis import sweep_runs as sweep_lib
from nmt_jax.analysis import tau_sweep
from nmt_jax.system import errors
from nmt_jax.workdir import run_config
from tests import conftest
from tests.commands import copy_reading_backwards
from tests.commands import wait_until

ROOT = conftest.ROOT
pytestmark = pytest.mark.slow

SWEEP_FILE = """
def get_sweep(arg=None):
  quick = {{'decode.beam_size': 1, 'train.eval_num_sentences': 8, 'train.num_steps': 6,
           'data.num_buckets': 1}}
  return [
      {{'name': 'memory_k2', 'config': '{configs}/memory_k64.py:tiny',
        'overrides': {{**quick, 'model.attention.num_memory': 2}}}},
      {{'name': 'memory_k4', 'config': '{configs}/memory_k64.py:tiny',
        'overrides': {{**quick, 'model.attention.num_memory': 4}}}},
      {{'name': 'flexible', 'config': '{configs}/flexible.py:tiny', 'overrides': quick}},
  ]
"""


def sweep(*args, check=True):
  return conftest.run_module('nmt_jax.sweep', *args, check=check, timeout=900)


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  """Three tiny runs made by a sweep file, and a tau sweep of the flexible one."""
  base = tmp_path_factory.mktemp('sweep')
  sweep_file = base / 'tiny_sweep.py'
  sweep_file.write_text(
      SWEEP_FILE.format(configs=os.path.join(ROOT, 'configs'))
  )
  root = str(base / 'runs')
  sweep('run', f'--sweep={sweep_file}', f'--root={root}')
  sweep(
      'tau',
      '--config=configs/flexible.py:tiny',
      f'--workdir={root}/flexible',
      '--taus=0.5,inf',
      '--config.decode.beam_size=1',
  )
  return {'root': root, 'sweep_file': str(sweep_file)}


def test_sweep_runs_each_run_once(runs):
  root = runs['root']
  for name in ('memory_k2', 'memory_k4', 'flexible'):
    run = runs_lib.load_run(os.path.join(root, name))
    assert run.records('train')[-1]['step'] == 6
    # the best by validation BLEU
    assert run.eval_results['checkpoint_step'] in (
        2,
        4,
        6,
    )
    with open(os.path.join(root, name, 'config.json')) as f:
      config = json.load(f)
    if name.startswith('memory'):
      assert config['model']['attention']['num_memory'] == int(name[-1])
  before = os.path.getsize(os.path.join(root, 'flexible', 'metrics.jsonl'))
  again = sweep('run', f'--sweep={runs["sweep_file"]}', f'--root={root}')
  assert again.stderr.count('done before, skipped') == 3
  assert (
      os.path.getsize(os.path.join(root, 'flexible', 'metrics.jsonl')) == before
  )
  # --mode=eval evaluates a trained run again (same BLEU; the timing is new);
  # --only leaves the other runs alone.
  with open(os.path.join(root, 'memory_k2', 'eval_results.json')) as f:
    first = json.load(f)
  others = os.path.join(root, 'memory_k4', 'eval_results.json')
  others_before = os.stat(others).st_mtime_ns
  sweep(
      'run',
      f'--sweep={runs["sweep_file"]}',
      f'--root={root}',
      '--mode=eval',
      '--only=memory_k2',
  )
  assert os.stat(others).st_mtime_ns == others_before
  with open(os.path.join(root, 'memory_k2', 'eval_results.json')) as f:
    second = json.load(f)
  assert (
      second['bleu'] == first['bleu']
      and second['checkpoint_step'] == first['checkpoint_step']
  )
  assert os.path.exists(os.path.join(root, 'logs', 'memory_k2.eval.log'))
  assert not os.path.exists(os.path.join(root, 'logs', 'memory_k4.eval.log'))


def test_evaluations_break_bleu_down_by_source_length(runs, tmp_path):
  root = runs['root']
  for name in ('memory_k2', 'memory_k4', 'flexible'):
    results = runs_lib.load_run(os.path.join(root, name)).eval_results
    bins = results['bleu_by_source_length']
    assert sum(b['sentences'] for b in bins) == results['num_sentences']
    assert all(0 <= b['bleu'] <= 100 for b in bins)
  # A run evaluated before the breakdown existed is left out of the table.
  old = str(tmp_path / 'old')
  shutil.copytree(os.path.join(root, 'memory_k2'), old)
  with open(os.path.join(old, 'eval_results.json')) as f:
    results = json.load(f)
  del results['bleu_by_source_length']
  with open(os.path.join(old, 'eval_results.json'), 'w') as f:
    json.dump(results, f)
  table = runs_lib.length_table(
      [os.path.join(root, 'memory_k2'), os.path.join(root, 'flexible'), old],
      root,
  ).splitlines()
  label = bins[0]['source_length']
  assert table[0].startswith(f'| run | {label} (')
  assert [line.split(' | ')[0] for line in table[2:]] == [
      '| memory_k2',
      '| flexible',
  ]
  assert runs_lib.length_table([old]).startswith('(no run has')
  out = sweep(
      'aggregate', f'--root={root}', '--by_length', '--paired_with=memory_k4'
  ).stdout
  assert 'BLEU by source length' in out and '| memory_k4 |' in out
  # Each evaluation kept its references, line for line with its hypotheses.
  with open(os.path.join(root, 'flexible', 'eval_references.txt')) as f:
    assert len(f.read().splitlines()) == results['num_sentences']
  paired = out[out.index('Paired bootstrap') :].splitlines()
  assert [line.split(' | ')[0] for line in paired[4:]] == [
      '| memory_k4',
      '| flexible',
      '| memory_k2',
  ]
  with pytest.raises(errors.ConfigError, match='none of the evaluated runs'):
    significance.table_against([os.path.join(root, 'flexible')], 'nope', root)


def test_trained_decode_times_every_run_against_the_reference(runs):
  timed = trained_decode.bench(
      runs['root'], 'memory_k4', None, ['greedy'], 2, 6
  )
  assert set(timed) == {'memory_k2', 'flexible'}
  for labels in timed.values():
    f = labels['greedy']
    ratios = [
        r / t
        for r, t in zip(
            f['reference_ms_per_sentence_runs'], f['ms_per_sentence_runs']
        )
    ]
    assert len(ratios) == 2
    assert f['speedup']['median'] == pytest.approx(statistics.median(ratios))
    assert f['speedup']['min'] <= f['speedup']['median'] <= f['speedup']['max']
  # The run's own window, not the reference's (K = 4).
  assert timed['memory_k2']['greedy']['avg_window'] == pytest.approx(2.0)
  assert 'memory_k2' in trained_decode.table(timed)


def test_grid_dry_run_and_shards(tmp_path):
  args = [
      'run',
      '--config=configs/memory_k64.py:tiny',
      f'--root={tmp_path}',
      '--dry_run',
      '--grid=model.attention.num_memory=1,4,16',
      '--grid=model.attention.position_encoding=none,renorm',
      '--config.train.num_steps=7',
      '--set=decode.beam_size=3',
  ]
  lines = sweep(*args).stdout.strip().splitlines()
  assert len(lines) == 6
  assert all(
      '--config.train.num_steps=7' in line
      and '--config.decode.beam_size=3' in line
      for line in lines
  )
  assert (
      f'--workdir={tmp_path}/num_memory=16+position_encoding=renorm'
      in lines[-1]
  )
  assert '--config.model.attention.num_memory=16' in lines[-1]
  shard = sweep(*args, '--shard=1/2').stdout.strip().splitlines()
  assert shard == lines[1::2]
  only = (
      sweep(*args, '--only=num_memory=4+*,*=16+position_encoding=renorm')
      .stdout.strip()
      .splitlines()
  )
  assert only == [lines[2], lines[3], lines[5]]
  assert not os.listdir(tmp_path)  # a dry run writes nothing


# Command lines that stop at their edge: one error line, exit status 2.
SWEEP_MISTAKES = [
    (['run', '--root=/tmp/x'], 'either --sweep'),
    (
        [
            'run',
            '--sweep=configs/sweeps/britz_copy.py',
            '--root=/tmp/x',
            '--shard=2/2',
        ],
        '--shard',
    ),
    (
        [
            'run',
            '--config=configs/memory_k64.py',
            '--grid=num_memory',
            '--root=/tmp/x',
        ],
        'is not field=value',
    ),
    (['aggregate', '--root=configs'], 'found no workdirs'),  # none there
    (['aggregate', '--root=/nonexistent'], 'is not a directory'),
    (
        [
            'run',
            '--sweep=configs/sweeps/britz_copy.py',
            '--root=/tmp/x',
            '--grid=model.hidden_size=8,16',
        ],
        'drop --config and --grid',
    ),
    (
        [
            'run',
            '--sweep=configs/sweeps/britz_copy.py',
            '--root=/tmp/x',
            '--only=L20/nope*',
        ],
        "--only='L20/nope*' matches no run",
    ),
    (
        ['aggregate', '--root=tests', '--workdirs=x', '--pivot=length'],
        "'length' is not a column",
    ),
    (
        ['tau', '--config=configs/memory_k64.py:tiny', '--workdir=/tmp/x'],
        'flexible attention',
    ),
    (['tau', '--workdir=/tmp/no_such_run'], 'holds no config.json'),
    (
        [
            'run',
            '--config=configs/memory_k64.py:nopreset',
            '--grid=seed=0,1',
            '--root=/tmp/x',
            '--dry_run',
        ],
        "unknown config preset 'nopreset'",
    ),
    (
        [
            'run',
            '--config=configs/memory_k64.py:tiny',
            '--config.model.hiden=3',
            '--grid=seed=0,1',
            '--root=/tmp/x',
            '--dry_run',
        ],
        'unknown config field in a --config override: hiden',
    ),
    (
        [
            'run',
            '--config=configs/nonexistent.py',
            '--grid=seed=0,1',
            '--root=/tmp/x',
            '--dry_run',
        ],
        'configs/nonexistent.py does not exist',
    ),
    (
        ['aggregate', '--workdirs=tests', '--markdown=/proc/no/r.md'],
        '--markdown=/proc/no/r.md cannot be written',
    ),
    (['aggregate', '--workdirs=tests'], 'tests is not a workdir'),
    (
        [
            'run',
            '--config=configs/memory_k64.py:tiny',
            '--grid=model.attention.num_memroy=2,4',
            '--root=/tmp/x',
            '--dry_run',
        ],
        'model.attention.num_memroy is not a config field',
    ),
    (
        [
            'run',
            '--sweep=configs/sweeps/britz_copy.py:20',
            '--set=train.num_stesp=5',
            '--root=/tmp/x',
            '--dry_run',
        ],
        'train.num_stesp is not a config field',
    ),
    (
        [
            'run',
            '--sweep=configs/sweeps/britz_copy.py:abc',
            '--root=/tmp/x',
            '--dry_run',
        ],
        "does not run with the argument 'abc'",
    ),
    (
        [
            'run',
            '--sweep=configs/sweeps/gettext_attention.py',
            '--root=/tmp/x',
            '--dry_run',
        ],
        (
            'does not run with no argument: gettext_attention.py needs the'
            ' prepared data folder'
        ),
    ),
]


@pytest.fixture(scope='module')
def sweep_mistakes():
  """What each command line of SWEEP_MISTAKES wrote and its exit status."""
  results = conftest.run_module_lines(
      'nmt_jax.sweep',
      [args for args, _ in SWEEP_MISTAKES],
  )
  return {
      tuple(args): result for (args, _), result in zip(SWEEP_MISTAKES, results)
  }


@pytest.mark.parametrize('args, fragment', SWEEP_MISTAKES)
def test_sweep_errors_are_one_line(sweep_mistakes, args, fragment):
  result = sweep_mistakes[tuple(args)]
  assert result.returncode == 2, result.stderr
  assert (
      fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1
  ), result.stderr


def test_a_run_is_finished_when_trained_to_its_end_and_evaluated_after(
    runs, tmp_path
):
  workdir = str(tmp_path / 'run')
  shutil.copytree(os.path.join(runs['root'], 'memory_k2'), workdir)
  assert sweep_lib.training_finished(workdir)
  config_path = os.path.join(workdir, 'config.json')
  with open(config_path) as f:
    config = json.load(f)
  config['train']['num_steps'] = 10  # interrupted at step 6 of 10
  with open(config_path, 'w') as f:
    json.dump(config, f)
  # --mode=eval wrote eval_results.json for a run still training.
  assert not sweep_lib.training_finished(workdir)
  # Stopped early at step 6: its validations say so.
  config['train']['early_stopping_patience'] = 1
  with open(config_path, 'w') as f:
    json.dump(config, f)
  records = [{'step': 2, 'split': 'valid', 'bleu': 50.0}]
  records += [{'step': s, 'split': 'valid', 'bleu': 1.0} for s in (4, 6)]
  with open(os.path.join(workdir, 'metrics.jsonl'), 'w') as f:
    f.write(''.join(json.dumps(r) + '\n' for r in records))
  assert sweep_lib.training_finished(workdir)
  # Evaluated before its last checkpoint: not yet after training.
  os.utime(os.path.join(workdir, 'eval_results.json'), (0, 0))
  assert not sweep_lib.training_finished(workdir)
  assert not sweep_lib.training_finished(str(tmp_path / 'nothing'))


def test_a_finished_run_with_other_overrides_is_run_again(runs, tmp_path):
  workdir = os.path.join(runs['root'], 'memory_k2')
  quick = {
      'decode.beam_size': 1,
      'train.eval_num_sentences': 8,
      'train.num_steps': 6,
  }
  run = lambda **more: sweep_lib.Run(
      'memory_k2',
      'configs/memory_k64.py:tiny',
      {**quick, 'model.attention.num_memory': 2, **more},
  )
  changed = lambda r: sweep_lib._changed_fields(r, workdir, runs['root'])
  assert not changed(run())
  # As --set/--grid give them: text.
  assert not changed(run(**{'train.num_steps': '6', 'model.dtype': 'float32'}))
  assert changed(run(**{'train.num_steps': 8})) == ['train.num_steps']
  assert changed(run(**{'model.hidden_size': 32, 'model.no_such': 1})) == [
      'model.hidden_size',
      'model.no_such',
  ]


def test_fine_tuned_runs_share_their_parents_shard_and_wait_for_it(tmp_path):
  run = lambda name, parent=None: sweep_lib.Run(
      name,
      'configs/flexible.py:tiny',
      {'train.init_from': '{root}/' + parent} if parent else {},
  )
  runs = [
      run('a'),
      run('b'),
      run('a_tuned', 'a'),
      run('c'),
      run('b_tuned', 'b'),
  ]
  shards = [[r.name for r in sweep_lib.shard(runs, f'{i}/2')] for i in range(2)]
  assert shards == [['a', 'a_tuned', 'c'], ['b', 'b_tuned']]
  plain = [run(n) for n in 'wxyz']
  assert sweep_lib.shard(plain, '1/2') == plain[1::2]
  # Its parent not trained: the fine-tuned run is not started, and fails.
  assert sweep_lib.run_sweep([run('a_tuned', 'a')], str(tmp_path)) == [
      'a_tuned'
  ]
  assert not os.path.exists(tmp_path / 'a_tuned')


def test_a_run_another_process_holds_is_left_to_it(tmp_path, monkeypatch):
  """Sweep processes over the same runs share them out through the locks."""
  (tmp_path / 'held').mkdir()
  holder = subprocess.Popen(
      [
          sys.executable,
          '-c',
          (
              'import sys, time\n'
              'from nmt_jax.workdir import locks\n'
              'with locks.locked(sys.argv[1]):\n'
              '  print("held", flush=True)\n'
              '  time.sleep(120)\n'
          ),
          str(tmp_path / 'held'),
      ],
      cwd=ROOT,
      stdout=subprocess.PIPE,
      text=True,
  )
  launched = []
  monkeypatch.setattr(
      sweep_lib,
      '_run_passing_signals',
      lambda command, log: (launched.append(command), (0, 0))[1],
  )
  runs = [
      sweep_lib.Run(n, 'configs/global_general.py:tiny', {})
      for n in ('held', 'free')
  ]
  # Fine-tuned from the held run: left to the process that trains it.
  runs.append(
      sweep_lib.Run(
          'tuned',
          'configs/flexible.py:tiny',
          {'train.init_from': '{root}/held'},
      )
  )
  try:
    assert holder.stdout.readline() == 'held\n'
    assert sweep_lib.run_sweep(runs, str(tmp_path)) == []
    assert [
        c[c.index('--config=configs/global_general.py:tiny') + 1]
        for c in launched
    ] == [f'--workdir={tmp_path}/free']
  finally:
    holder.kill()
    holder.wait()
  launched.clear()
  assert sweep_lib.run_sweep(runs[:1], str(tmp_path)) == []  # a stale lock
  assert len(launched) == 1


def test_aggregate_writes_csv_and_markdown(runs, tmp_path):
  root = runs['root']
  out = sweep(
      'aggregate',
      f'--root={root}',
      f'--csv={tmp_path}/r.csv',
      f'--markdown={tmp_path}/r.md',
      f'--plots={tmp_path}/plots',
  )
  assert sorted(os.listdir(tmp_path / 'plots')) == [
      'bleu_vs_K.png',
      'decode_s_vs_K.png',
      'learning_curves.png',
      'tau_tradeoff.png',
      'tau_tradeoff_computed.png',
  ]
  with open(f'{tmp_path}/r.csv') as f:
    rows = {row['run']: row for row in csv.DictReader(f)}
  assert sorted(rows) == ['flexible', 'memory_k2', 'memory_k4']
  for name, row in rows.items():
    with open(os.path.join(root, name, 'eval_results.json')) as f:
      result = json.load(f)
    assert float(row['bleu']) == pytest.approx(result['bleu'])
    assert float(row['decode_s']) == pytest.approx(
        result['decode_ms_per_sentence'] * result['num_sentences'] / 1000
    )
  assert rows['memory_k4']['K'] == '4' and rows['flexible']['K'] == ''
  markdown = open(f'{tmp_path}/r.md').read().strip().splitlines()
  assert len(markdown) == 2 + 3 and markdown[0].startswith('| run |')
  assert out.stdout.strip().splitlines() == markdown


def test_result_row_from_hand_written_workdir(tmp_path):
  workdir = tmp_path / 'w'
  workdir.mkdir()
  (workdir / 'config.json').write_text(
      json.dumps({
          'data': {'name': 'copy', 'max_length': 50},
          'model': {
              'hidden_size': 8,
              'attention': {
                  'kind': 'global',
                  'score': 'concat',
                  'num_memory': 64,
                  'position_encoding': 'none',
              },
          },
      })
  )
  records = [
      {'step': 1, 'split': 'train', 'loss': 3.0, 'tokens_per_sec': 10.0},
      {'step': 2, 'split': 'train', 'loss': 2.0, 'tokens_per_sec': 100.0},
      {'step': 3, 'split': 'train', 'loss': 1.0, 'tokens_per_sec': 200.0},
      {
          'step': 4,
          'split': 'train',
          'loss': 1.0,
          'tokens_per_sec': 1.0,
      },  # stalled
      {'step': 5, 'split': 'train', 'loss': 1.0, 'tokens_per_sec': 150.0},
      {'step': 6, 'split': 'train', 'loss': 1.0, 'tokens_per_sec': 180.0},
      {'step': 3, 'split': 'valid', 'bleu': 40.0},
      {'step': 6, 'split': 'valid', 'bleu': 30.0},
  ]
  (workdir / 'metrics.jsonl').write_text(
      ''.join(json.dumps(r) + '\n' for r in records)
  )
  (workdir / 'eval_results.json').write_text(
      json.dumps({
          'bleu': 41.5,
          'decode_ms_per_sentence': 2.5,
          'num_sentences': 400,
          'beam_size': 10,
      })
  )
  (row,) = runs_lib.results_table([str(workdir)])
  assert row['decode_s'] == pytest.approx(1.0)
  # compile window left out, median
  assert row['train_tokens_per_sec'] == pytest.approx(150.0)
  assert row['best_valid_bleu'] == 40.0
  assert row['K'] is None and row['PE'] is None and row['score'] == 'concat'
  table = runs_lib.markdown_table([row]).splitlines()
  assert 'chrf' not in table[0] and '| 41.50 |' in table[2]


def test_tau_sweep_rows(runs):
  with open(os.path.join(runs['root'], 'flexible', 'tau_sweep.json')) as f:
    rows = {
        float(r['tau']) if r['tau'] != 'inf' else float('inf'): r
        for r in json.load(f)['rows']
    }
  with open(os.path.join(runs['root'], 'flexible', 'eval_results.json')) as f:
    # greedy, tau = inf: the same decoding as the sweep's inf row
    trained = json.load(f)
  assert rows[float('inf')]['avg_window_fraction'] == pytest.approx(1.0)
  assert rows[float('inf')]['bleu'] == pytest.approx(trained['bleu'])
  assert rows[0.5]['avg_window'] <= rows[float('inf')]['avg_window']
  # A second sweep adds its taus to the curve.
  sweep(
      'tau',
      '--config=configs/flexible.py:tiny',
      f'--workdir={runs["root"]}/flexible',
      '--taus=2',
      '--config.decode.beam_size=1',
  )
  merged = runs_lib.load_run(f'{runs["root"]}/flexible').tau_sweep
  assert [float(r['tau']) for r in merged] == [0.5, 2.0, float('inf')]
  assert merged[-1] == rows[float('inf')]
  # Another beam size is a curve of its own, not points on the greedy one.
  # (Without --config: the workdir's config.json.)
  sweep(
      'tau', f'--workdir={runs["root"]}/flexible', '--taus=2', '--beam_size=2'
  )
  again = runs_lib.load_run(f'{runs["root"]}/flexible').tau_sweep
  assert [(float(r['tau']), r['beam_size']) for r in again] == [
      (0.5, 1),
      (2.0, 1),
      (float('inf'), 1),
      (2.0, 2),
  ]
  assert again[:3] == merged
  figure = plots.plot_tau_tradeoff(
      [runs_lib.load_run(f'{runs["root"]}/flexible')]
  )
  labels = [line.get_label() for line in figure.axes[0].get_lines()]
  assert labels == ['flexible (beam 1)', 'flexible (beam 2)']
  # Shu & Nakayama's protocol: every tau on dev, the rule's choice on test.
  sweep(
      'tau', f'--workdir={runs["root"]}/flexible', '--taus=0.5,2',
      '--beam_size=1', '--select_on_dev',
  )  # fmt: skip
  with open(os.path.join(runs['root'], 'flexible', 'tau_sweep.json')) as f:
    content = json.load(f)
  (selection,) = content['selections']
  dev = [r for r in content['rows'] if r['beam_size'] == 1]
  assert sorted(float(r['tau']) for r in dev) == [0.5, 2.0, float('inf')]
  # The copy task has no test split: the validation split is scored again
  # (the same BLEU; the rows keep the last decoding's times).
  assert selection['tau'] == tau_sweep.select_tau(dev)['tau']
  assert selection['test'] == next(
      r for r in dev if r['tau'] == selection['tau']
  )
  assert selection['test_unpruned'] == dev[-1]
  assert selection['validation']['bleu'] == selection['test']['bleu']
  # The test curve is the one plotted; the dev rows are not points on it.
  figure = plots.plot_tau_tradeoff(
      [runs_lib.load_run(f'{runs["root"]}/flexible')]
  )
  greedy, _ = figure.axes[0].get_lines()
  assert len(greedy.get_xdata()) == 3


def test_tau_is_chosen_by_the_largest_reduction_within_half_a_bleu():
  rows = [
      {'tau': float('inf'), 'bleu': 30.0, 'window_reduction': 0.0},
      {'tau': 1.6, 'bleu': 29.6, 'window_reduction': 0.4},
      {'tau': 1.2, 'bleu': 29.5, 'window_reduction': 0.5},  # at the limit
      {'tau': 0.8, 'bleu': 29.4, 'window_reduction': 0.6},  # 0.6 below
  ]
  assert tau_sweep.select_tau(rows)['tau'] == 1.2
  assert tau_sweep.select_tau(rows, tolerance=0.45)['tau'] == 1.6
  # Nothing within: the unpruned model itself.
  assert tau_sweep.select_tau(rows[:1] + rows[3:])['tau'] == float('inf')
  with pytest.raises(errors.ConfigError, match='tau = inf'):
    tau_sweep.select_tau(rows[1:])


def test_translate_with_attention(runs):
  root = runs['root']
  sentences = attention_maps.sample_sentences(f'{root}/memory_k4', 4)
  memory = attention_maps.translate_with_attention(
      f'{root}/memory_k4', sentences
  )
  config = run_config.load_config(f'{root}/memory_k4')
  config.decode.beam_size = 1
  # The same hypotheses as the translate mode (greedy, no diagnostics).
  assert [' '.join(t.hypothesis[:-1]) for t in memory] == inference.translate(
      config, [f'{root}/memory_k4'], sentences
  )
  for t in memory:
    assert t.weights.shape == (len(t.hypothesis), len(t.source))
    assert t.extras['alpha'].shape == (len(t.source), 4)
    # softmax over time per slot, softmax over slots per step: each step's product sums to 1.
    np.testing.assert_allclose(t.weights.sum(-1), 1.0, rtol=1e-5)
  flexible = attention_maps.translate_with_attention(
      f'{root}/flexible', sentences, overrides={'model.attention.tau': 0.5}
  )
  for t in flexible:
    np.testing.assert_allclose(t.weights.sum(-1), 1.0, rtol=1e-5)
    outside = np.arange(len(t.source))[None, :]
    outside = (outside < t.extras['first'][:, None]) | (
        outside > t.extras['last'][:, None]
    )
    assert np.all(t.weights[outside] == 0)


def test_attention_of_a_reversed_source_is_in_reading_order(runs, tmp_path):
  # With reverse_source the model reads "c b a </s>" for "a b c": the same
  # input as the sentence "c b a" without it, so the same steps, flipped.
  workdir = f"{runs['root']}/flexible"
  flipped = str(tmp_path / 'flipped')
  copy_reading_backwards(workdir, flipped)
  sentences = attention_maps.sample_sentences(workdir, 4)
  backwards = [' '.join(s.split()[::-1]) for s in sentences]
  tau = {'model.attention.tau': 0.5}
  reversed_ = attention_maps.translate_with_attention(
      flipped, sentences, overrides=tau
  )
  plain = attention_maps.translate_with_attention(
      workdir, backwards, overrides=tau
  )
  for r, p in zip(reversed_, plain):
    assert r.source == p.source[-2::-1] + ['</s>']
    assert r.hypothesis == p.hypothesis
    np.testing.assert_array_equal(r.weights[:, :-1], p.weights[:, -2::-1])
    np.testing.assert_array_equal(r.weights[:, -1], p.weights[:, -1])
    positions = np.arange(len(r.source))[None, :]
    kept = (positions >= r.extras['first'][:, None]) & (
        positions <= r.extras['last'][:, None]
    )
    kept[:, -1] |= r.extras['eos_kept']
    plain_kept = (positions >= p.extras['first'][:, None]) & (
        positions <= p.extras['last'][:, None]
    )
    np.testing.assert_array_equal(kept[:, :-1], plain_kept[:, -2::-1])
    np.testing.assert_array_equal(kept[:, -1], plain_kept[:, -1])
    assert np.all(r.weights[~kept] == 0)


def test_plots_write_png(runs, tmp_path):
  root = runs['root']
  memory, flexible = (
      runs_lib.load_run(f'{root}/{n}') for n in ('memory_k4', 'flexible')
  )
  plots.plot_learning_curves([memory, flexible], str(tmp_path / 'curves.png'))
  plots.plot_tau_tradeoff([flexible], [memory], str(tmp_path / 'tau.png'))
  rows = runs_lib.results_table([memory.workdir, flexible.workdir])
  figure = plots.plot_results(
      rows[:1],
      'K',
      'bleu',
      ('L', 'PE'),
      str(tmp_path / 'k.png'),
      baselines=rows[1:],
  )
  labels = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
  length, pe = rows[0]['L'], rows[0]['PE']
  assert labels == [
      f'L={length}, PE={pe}',
      f'L={length}, {runs_lib.model_label(rows[1], leave_out="L")}',
  ]
  assert (figure.axes[0].get_xlabel(), figure.axes[0].get_ylabel()) == (
      'K (memory slots)',
      'BLEU',
  )
  for name in ('curves', 'tau', 'k'):
    with open(tmp_path / f'{name}.png', 'rb') as f:
      assert f.read(8) == b'\x89PNG\r\n\x1a\n'
  with pytest.raises(ValueError, match='no tau_sweep.json'):
    plots.plot_tau_tradeoff([memory])


def test_the_tau_plot_leaves_out_references_without_a_window_over_the_source():
  # Memory's window is its K slots: K / S = 1,782% put the flexible curve
  # into the first twentieth of the x-axis.
  def record(kind, fraction, tau_sweep=None):
    return runs_lib.RunRecord(
        workdir=f'/runs/{kind}',
        config={'model': {'attention': {'kind': kind}}},
        metrics=[],
        eval_results={
            'bleu': 50.0,
            'beam_size': 1,
            'avg_window_fraction': fraction,
        },
        tau_sweep=tau_sweep,
    )

  sweep_rows = [
      {'tau': tau, 'beam_size': 1, 'bleu': 40.0, 'avg_window_fraction': f}
      for tau, f in (('0.5', 0.4), ('inf', 0.95))
  ]
  figure = plots.plot_tau_tradeoff(
      [record('flexible', 0.6, sweep_rows)],
      [record('global', 1.0), record('memory', 17.8), record('none', 1.0)],
  )
  labels = [line.get_label() for line in figure.axes[0].get_lines()]
  assert labels == ['flexible', 'global (beam 1)']
  assert figure.axes[0].get_xlim()[1] < 110


def _images(notebook):
  return sum(
      'image/png' in out.get('data', {})
      for cell in notebook['cells']
      for out in cell.get('outputs', [])
  )


@pytest.mark.parametrize(
    'notebook, parameters, env_var, images',
    [
        ('inspect_run', {'tau': 0.5}, ('NMT_JAX_WORKDIR', 'flexible'), 3 + 2),
        # Given sentences (no corpus read): one map each.
        (
            'inspect_run',
            {'sentences': ['a b c', 'd e']},
            ('NMT_JAX_WORKDIR', 'memory_k4'),
            1 + 2,
        ),
        (
            'compare_runs',
            {},
            ('NMT_JAX_WORKDIRS', 'memory_k2,memory_k4,flexible'),
            1 + 2 + 1,
        ),
    ],
)
def test_notebooks_run_headless(
    runs, tmp_path, monkeypatch, notebook, parameters, env_var, images
):
  variable, names = env_var
  monkeypatch.setenv(
      variable, ','.join(f'{runs["root"]}/{n}' for n in names.split(','))
  )
  assert _images(_execute(notebook, parameters, tmp_path, monkeypatch)) == (
      images
  )


def _execute(notebook, parameters, tmp_path, monkeypatch):
  """The notebook run headless (papermill), as JSON."""
  import papermill  # pylint: disable=g-import-not-at-top

  for key, value in conftest.subprocess_env().items():
    monkeypatch.setenv(key, value)
  output = tmp_path / f'{notebook}.ipynb'
  # Raises PapermillExecutionError if any cell fails.
  papermill.execute_notebook(
      os.path.join(ROOT, 'notebooks', f'{notebook}.ipynb'),
      str(output),
      parameters=parameters,
      cwd=ROOT,
      progress_bar=False,
      kernel_name='python3',
  )
  with open(output) as f:
    return json.load(f)


def test_a_run_before_its_first_checkpoint_is_inspected_without_maps(
    runs, tmp_path, monkeypatch
):
  # The attention cell raised CheckpointError and papermill stopped there.
  early = tmp_path / 'early'
  early.mkdir()
  for name in ('config.json', 'metrics.jsonl'):
    shutil.copy(os.path.join(runs['root'], 'flexible', name), early / name)
  notebook = _execute(
      'inspect_run', {'workdir': str(early)}, tmp_path, monkeypatch
  )
  assert _images(notebook) == 1  # the learning curves
  printed = [
      ''.join(out.get('text', ''))
      for cell in notebook['cells']
      for out in cell.get('outputs', [])
  ]
  assert any(f'no checkpoint in {early} yet' in text for text in printed)


def test_pivot_table_puts_each_model_on_one_row():
  def row(
      run, L, attention, K=None, PE=None, score=None, bleu=None, decode_s=None
  ):
    return {
        'run': run,
        'L': L,
        'attention': attention,
        'K': K,
        'PE': PE,
        'score': score,
        'bleu': bleu,
        'decode_s': decode_s,
    }

  rows = [
      row('L50/global', 50, 'global', score='concat', bleu=99.0, decode_s=9.0),
      row('L20/k4_pe', 20, 'memory', 4, 'renorm', bleu=80.0, decode_s=2.0),
      row('L20/k16', 20, 'memory', 16, 'none', bleu=90.0, decode_s=3.0),
      row('L20/none', 20, 'none', bleu=50.0, decode_s=1.5),
      row('L50/k4_pe', 50, 'memory', 4, 'renorm', bleu=60.0, decode_s=5.0),
  ]
  lines = runs_lib.pivot_table(rows, 'L').splitlines()
  assert (
      lines[0]
      == '| model | L=20 bleu | L=20 decode_s | L=50 bleu | L=50 decode_s |'
  )
  assert lines[2:] == [
      '| none | 50.00 | 1.50 |  |  |',
      '| memory K=4 +PE (renorm) | 80.00 | 2.00 | 60.00 | 5.00 |',
      '| memory K=16 | 90.00 | 3.00 |  |  |',
      '| global concat |  |  | 99.00 | 9.00 |',
  ]
  by_k = runs_lib.pivot_table(
      [r for r in rows if r['L'] == 20], 'K', ['bleu']
  ).splitlines()
  assert by_k[0] == '| model | K=4 bleu | K=16 bleu | K=None bleu |'
  assert by_k[2:] == [
      '| none |  |  | 50.00 |',
      '| memory +PE (renorm) | 80.00 |  |  |',
      '| memory |  | 90.00 |  |',
  ]
  # Runs differing in the source's reading direction are two models.
  forwards = row('L20/dot', 20, 'global', score='dot', bleu=70.0, decode_s=2.0)
  backwards = dict(forwards, run='L20/dot_r', reversed=True, bleu=75.0)
  assert runs_lib.pivot_table([forwards, backwards], 'L', ['bleu']).split('\n')[
      2:
  ] == ['| global dot | 70.00 |', '| global dot reversed | 75.00 |']
  with pytest.raises(
      ValueError, match='L20/k16 and L20/k16b are the same model at L=20'
  ):
    runs_lib.pivot_table(
        rows + [row('L20/k16b', 20, 'memory', 16, 'none')], 'L'
    )


def test_window_positions_of_a_reversed_source_are_put_in_reading_order():
  # 5 words + EOS (length 6), read backwards by the model: its position p of
  # a word is 4 - p in the text; EOS (5) stays last.
  # A window reaching EOS keeps the text's first words and EOS, not what lies
  # between: words [0, 2] plus EOS; EOS alone keeps no words (last < first).
  extras = {
      'first': np.array([0, 1, 2, 5]),
      'last': np.array([1, 3, 5, 5]),
      'center': np.array([0.5, 2.0, 5.0, 5.0]),
  }
  ordered = attention_maps._positions_in_reading_order(extras, 6)
  np.testing.assert_array_equal(ordered['first'], [3, 1, 0, 0])
  np.testing.assert_array_equal(ordered['last'], [4, 3, 2, -1])
  np.testing.assert_array_equal(ordered['eos_kept'], [0, 0, 1, 1])
  np.testing.assert_allclose(ordered['center'], [3.5, 2.0, 5.0, 5.0])


def test_vision_span_draws_a_reversed_windows_eos_apart_from_its_words():
  source = ['a', 'b', 'c', 'd', 'e', '</s>']
  extras = attention_maps._positions_in_reading_order(
      {
          'first': np.array([0, 2, 5]),
          'last': np.array([1, 5, 5]),
          'previous_center': np.zeros(3),
          'strength': np.ones(3),
      },
      len(source),
  )
  figure = plots.plot_vision_span(
      attention_maps.Translation(
          source, ['x', 'y', '</s>'], np.zeros((3, 6)), extras, 'flexible'
      )
  )
  boxes = sorted(
      (round(b.get_y() + b.get_height() / 2), b.get_x() + 0.5, b.get_width())
      for b in figure.axes[0].patches
  )
  # (step, first position, positions kept); step 2 keeps EOS alone: no box
  # of width 0 (its edge would be drawn as a line).
  assert boxes == [(0, 3, 2), (1, 0, 3), (1, 5, 1), (2, 5, 1)]


@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_sweep_stops_its_run_with_a_checkpoint(
    tmp_path, signum
):
  """SIGTERM killed the sweep and left its run training (holding the
  workdir); SIGINT stopped only the run and the sweep went on."""
  root = tmp_path / 'runs'
  process = subprocess.Popen(
      [
          sys.executable,
          '-m',
          'nmt_jax.sweep',
          'run',
          '--config=configs/global_general.py:tiny',
          '--grid=seed=0,1',
          f'--root={root}',
          '--config.train.num_steps=100000',
          '--config.train.checkpoint_every=100000',
          '--config.train.log_every=1',
      ],
      cwd=ROOT,
      env=conftest.subprocess_env(),
      stderr=subprocess.PIPE,
      text=True,
  )
  try:
    metrics = root / 'seed=0' / 'metrics.jsonl'
    wait_until(
        lambda: metrics.exists() and metrics.stat().st_size > 300, [process]
    )
    process.send_signal(signum)
    _, err = process.communicate(timeout=120)
  finally:
    if process.poll() is None:
      process.kill()
      # The run has a session of its own: not killed with the sweep.
      lock = root / 'seed=0' / 'lock'
      if lock.exists():
        os.kill(json.loads(lock.read_text())['pid'], signal.SIGKILL)
  assert process.returncode == 128 + signum, err[-2000:]
  name = signal.Signals(signum).name
  last = err.strip().splitlines()[-1]
  assert last.startswith(f'error: stopped by {name} during seed=0'), last
  log = (root / 'logs' / 'seed=0.log').read_text()
  stop = (
      'stopped by SIGTERM after step'
      if signum == signal.SIGTERM
      else ('interrupted; run the same command again')
  )
  assert stop in log.strip().splitlines()[-1], log[-2000:]
  assert not (root / 'seed=0' / 'lock').exists()  # the run has ended
  assert not (root / 'seed=1').exists()  # and the sweep did not go on
  if signum == signal.SIGTERM:
    assert os.listdir(root / 'seed=0' / 'checkpoints')


def test_an_ensembles_evaluation_folder_is_named_as_such(tmp_path):
  # It was "not a workdir; train first with ... --workdir=<the folder>".
  folder = tmp_path / 'ensemble'
  folder.mkdir()
  (folder / 'eval_results.json').write_text(
      json.dumps({'bleu': 50.0, 'ensemble': ['/runs/a', '/runs/b']})
  )
  with pytest.raises(FileNotFoundError, match='ensemble of /runs/a, /runs/b'):
    runs_lib.load_run(str(folder))
  (folder / 'eval_results.json').write_text('{"bleu": ')  # half-written
  with pytest.raises(FileNotFoundError, match='is not a workdir'):
    runs_lib.load_run(str(folder))
