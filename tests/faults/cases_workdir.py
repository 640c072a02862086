"""Damaged checkpoints and workdir files, on copies of the copy-task workdir.

Each kind of checkpoint damage in train, eval and translate (the damaged
step set aside intact, the one before it used), config.json, the lock and
the records broken or of the wrong kind.
"""

import json
import os
import shutil

from tests.faults import folded
from tests.faults.battery import BASE
from tests.faults.battery import DAMAGES
from tests.faults.battery import EVAL_WRITES
from tests.faults.battery import TRAIN_WRITES
from tests.faults.battery import both
from tests.faults.battery import damage
from tests.faults.battery import damage_all
from tests.faults.battery import damage_best
from tests.faults.battery import delete_meta
from tests.faults.battery import edit_config
from tests.faults.battery import lock_holding
from tests.faults.battery import make_dir
from tests.faults.battery import refuse
from tests.faults.battery import set_aside
from tests.faults.battery import stdout_lines
from tests.faults.battery import succeed
from tests.faults.battery import truncate_arrays
from tests.faults.battery import write


def _workdir_cases():
  on = [*BASE, '--workdir={w}']
  train = [*on, '--config.train.num_steps=8']
  tr = [*on, '--mode=translate']
  ev = [*on, '--mode=eval']
  cases = []
  # Each kind of checkpoint damage: set aside, the previous one used. Orbax
  # reads a step without _CHECKPOINT_METADATA, and eval and translate do not
  # read the data iterator's state: no damage to them.
  for name, how in DAMAGES.items():
    damaged = name != 'missing_checkpoint_metadata'
    for_decoding = damaged and name != 'bad_data_state'
    cases += [
        succeed(
            f'checkpoint.{name}.train',
            train,
            workdir='base',
            setup=damage(how),
            writes=TRAIN_WRITES,
            check=set_aside() if damaged else None,
        ),
        succeed(
            f'checkpoint.{name}.eval',
            ev,
            workdir='base',
            setup=damage_best(how),
            writes=EVAL_WRITES,
            check=set_aside() if for_decoding else None,
        ),
        succeed(
            f'checkpoint.{name}.translate',
            tr,
            workdir='base',
            setup=damage_best(how),
            stdin=b'a b\n',
            check=both(stdout_lines(1), set_aside() if for_decoding else None),
        ),
    ]
  cases += [
      succeed(
          'checkpoint.empty_step_folder.train',
          train,
          workdir='base',
          setup=make_dir('w', 'checkpoints', '99'),
          writes=TRAIN_WRITES,
      ),
      succeed(
          'checkpoint.tmp_step_folder.train',
          train,
          workdir='base',
          setup=make_dir('w', 'checkpoints', '8.orbax-checkpoint-tmp-1'),
          writes=TRAIN_WRITES,
      ),
      refuse(
          'checkpoint.all_damaged.train',
          train,
          '^error: .*every checkpoint.*damaged',
          workdir='base',
          setup=damage_all(truncate_arrays),
      ),
      refuse(
          'checkpoint.all_damaged.translate',
          tr,
          '^error: .*every checkpoint.*damaged',
          workdir='base',
          setup=damage_all(delete_meta),
          stdin=b'a\n',
      ),
      refuse(
          'checkpoint.folder_is_a_file',
          train,
          '^error: .*checkpoints is a file',
          workdir='base',
          setup=lambda d: (
              shutil.rmtree(f'{d}/w/checkpoints'),
              write(f'{d}/w/checkpoints', 'x'),
          ),
      ),
      # config.json
      refuse(
          'workdir.config_json_garbage.train',
          train,
          '^error: .*config.json',
          workdir='base',
          setup=lambda d: write(f'{d}/w/config.json', 'garbage{'),
      ),
      refuse(
          'workdir.config_json_garbage.translate',
          tr,
          '^error: .*config.json',
          workdir='base',
          stdin=b'a\n',
          setup=lambda d: write(f'{d}/w/config.json', 'garbage{'),
      ),
      refuse(
          'workdir.config_json_empty.eval',
          ev,
          '^error: .*config.json',
          workdir='base',
          setup=lambda d: write(f'{d}/w/config.json', ''),
      ),
      refuse(
          'workdir.config_json_a_list.train',
          train,
          '^error: .*config.json',
          workdir='base',
          setup=lambda d: write(f'{d}/w/config.json', '[1, 2]'),
      ),
      refuse(
          'workdir.config_json_no_model.translate',
          tr,
          '^error: .*config.json',
          workdir='base',
          stdin=b'a\n',
          setup=edit_config(lambda c: c.pop('model')),
      ),
      refuse(
          'workdir.config_json_other_size.train',
          train,
          '^error: .*holds another model.*hidden_size',
          workdir='base',
          setup=edit_config(lambda c: c['model'].update(hidden_size=32)),
      ),
      refuse(
          'workdir.config_json_other_kind.translate',
          tr,
          '^error: .*holds another model',
          workdir='base',
          stdin=b'a\n',
          setup=edit_config(
              lambda c: c['model']['attention'].update(kind='memory')
          ),
      ),
      refuse(
          'workdir.config_json_is_a_directory.train',
          train,
          '^error: .*config.json.*directory',
          workdir='base',
          setup=make_dir('w', 'config.json'),
      ),
      refuse(
          'workdir.is_a_file.train',
          [*BASE, '--workdir={d}/f'],
          '^error: .*f is a file',
          setup=lambda d: write(f'{d}/f', 'x'),
      ),
      refuse(
          'workdir.is_a_file.translate',
          [*BASE, '--workdir={d}/f', '--mode=translate'],
          '^error: .*f',
          setup=lambda d: write(f'{d}/f', 'x'),
          stdin=b'a\n',
      ),
      # Locks.
      succeed(
          'workdir.lock_garbage.train',
          train,
          workdir='base',
          setup=lock_holding(b'garbage\x00 from a broken copy'),
          writes=TRAIN_WRITES,
      ),
      succeed(
          'workdir.lock_dead_pid.eval',
          ev,
          workdir='base',
          setup=lambda d: write(
              f'{d}/w/lock',
              json.dumps({'host': os.uname().nodename, 'pid': 2**22 + 7}),
          ),
          writes=EVAL_WRITES,
      ),
      refuse(
          'workdir.lock_live_pid.train',
          train,
          f'^error: .*is in use by pid {os.getpid()}',
          workdir='base',
          setup=lambda d: write(
              f'{d}/w/lock',
              json.dumps({
                  'host': os.uname().nodename,
                  'pid': os.getpid(),
                  'since': 'now',
                  'command': 'the battery',
              }),
          ),
          writes=('lock',),
      ),
      refuse(
          'workdir.lock_live_pid.eval',
          ev,
          f'^error: .*is in use by pid {os.getpid()}',
          workdir='base',
          setup=lambda d: write(
              f'{d}/w/lock',
              json.dumps({
                  'host': os.uname().nodename,
                  'pid': os.getpid(),
                  'since': 'now',
                  'command': 'the battery',
              }),
          ),
      ),
      refuse(
          'workdir.lock_empty_new.train',
          train,
          '^error: .*being locked by another run',
          workdir='base',
          setup=lock_holding(b''),
      ),
      refuse(
          'workdir.lock_is_a_directory.train',
          train,
          '^error: .*lock is a directory',
          workdir='base',
          setup=make_dir('w', 'lock'),
      ),
      # Records that are the wrong kind of file.
      refuse(
          'workdir.metrics_is_a_directory.train',
          train,
          '^error: .*metrics.jsonl.*directory',
          workdir='base',
          setup=make_dir('w', 'metrics.jsonl'),
          # The resolved config (num_steps 8) is written before the records.
          writes=('config.json',),
      ),
      refuse(
          'workdir.eval_results_is_a_directory.eval',
          ev,
          '^error: .*eval_results.json.*directory',
          workdir='base',
          setup=make_dir('w', 'eval_results.json'),
          writes=EVAL_WRITES,
      ),
      refuse(
          'workdir.eval_hypotheses_is_a_directory.eval',
          ev,
          '^error: .*eval_hypotheses.txt.*directory',
          workdir='base',
          setup=make_dir('w', 'eval_hypotheses.txt'),
          writes=EVAL_WRITES,
      ),
      succeed(
          'workdir.metrics_half_written_line.train',
          train,
          workdir='base',
          writes=TRAIN_WRITES,
          setup=lambda d: open(f'{d}/w/metrics.jsonl', 'a').write(
              '{"step": 7, "split": "tra'
          ),
      ),
      succeed(
          'workdir.metrics_missing.train',
          train,
          workdir='base',
          writes=TRAIN_WRITES,
          setup=lambda d: os.remove(f'{d}/w/metrics.jsonl'),
      ),
      succeed(
          'workdir.eval_results_missing.translate',
          tr,
          workdir='base',
          stdin=b'a\n',
          setup=lambda d: os.remove(f'{d}/w/eval_results.json'),
      ),
  ]
  return cases


def cases():
  """The cases of this file in running order, but the folded ones."""
  return folded.without(_workdir_cases())
