"""The command line's edge: flags, config files, config values, rules.

Each case stops before any model is built (most before any workdir is made):
they run forked (battery.run_forked), a child process per command line.
"""

import os
import re

from nmt_jax.attention import base as attention
from nmt_jax.config import defaults
from nmt_jax.config import validation
from tests.faults import folded
from tests.faults.battery import BASE
from tests.faults.battery import CONFIG
from tests.faults.battery import absent
from tests.faults.battery import refuse
from tests.faults.battery import write


def _field_value_cases():
  """Bad values of every numeric and choice field of the config."""
  config = defaults.get_config('tiny')

  def value(field):
    node = config
    for part in field.split('.'):
      node = node[part]
    return node

  checks = {f: 'positive' for f in validation.POSITIVE}
  checks.update({f: 'non_negative' for f in validation.NON_NEGATIVE})
  checks.update({f: 'finite' for f in validation.FINITE})
  for field, (_, check) in attention.fields().items():
    name = getattr(check, '__name__', '')
    if name in ('positive', 'non_negative', 'non_negative_or_inf'):
      checks[f'model.attention.{field}'] = name
  checks['model.attention.max_source_length'] = 'positive'
  checks['decode.step'] = 'non_negative'
  checks['seed'] = 'non_negative'
  cases = []
  typed = set()
  for field, check in checks.items():
    current = value(field)
    is_float = isinstance(current, float)
    bad = {} if check == 'finite' else {'negative': '-1'}
    # Text where a number goes: the flag parser's one path, once per section
    # and type.
    section = (field.rpartition('.')[0], type(current))
    if section not in typed:
      typed.add(section)
      bad['wrong_type'] = 'abc'
    if check == 'positive':
      bad['zero'] = '0'
    if is_float:
      bad['nan'] = 'nan'
      if check != 'non_negative_or_inf':
        bad['inf'] = 'inf'
    else:
      bad['huge'] = str(10**20)
    for what, text in bad.items():
      cases.append(
          refuse(
              f'config.{field}.{what}',
              [*BASE, '--workdir={d}/w', f'--config.{field}={text}'],
              r'^error: .*' + re.escape(field.split('.')[-1]),
              check=absent('w'),
          )
      )
  for field in validation.CHOICES:
    cases.append(
        refuse(
            f'config.{field}.unknown_choice',
            [*BASE, '--workdir={d}/w', f'--config.{field}=bogus'],
            r'^error: .*' + re.escape(field) + '.*not one of',
            check=absent('w'),
        )
    )
  for field, (default, _) in attention.fields().items():
    if isinstance(default, str):
      cases.append(
          refuse(
              f'config.model.attention.{field}.unknown_choice',
              [*BASE, '--workdir={d}/w', f'--config.model.attention.{field}=x'],
              r'^error: .*model\.attention\.' + field,
              check=absent('w'),
          )
      )
  return cases


def _flag_cases():
  fresh = [*BASE, '--workdir={d}/w']
  cases = [
      refuse('flags.mode_unknown', [*fresh, '--mode=bogus'], '--mode=bogus'),
      refuse('flags.typo', [*fresh, '--confg=x'], "Unknown .* flag 'confg'"),
      refuse(
          'flags.typo_workdir', [f'--config={CONFIG}', '--wrokdir=x'], 'wrokdir'
      ),
      refuse('flags.no_config', ['--workdir={d}/w'], '--config'),
      refuse('flags.no_workdir', [f'--config={CONFIG}'], '--workdir'),
      refuse('flags.empty_workdir', [*BASE, '--workdir='], 'workdir'),
      refuse('flags.positional_argument', [*fresh, 'extra'], 'extra'),
      refuse('flags.threads_zero', [*fresh, '--threads=0'], '--threads'),
      refuse('flags.threads_negative', [*fresh, '--threads=-3'], '--threads'),
      refuse('flags.threads_text', [*fresh, '--threads=abc'], '--threads'),
      refuse(
          'flags.distributed_unknown',
          [*fresh, '--distributed=maybe'],
          '--distributed',
      ),
      refuse(
          'flags.distributed_timeout_zero',
          [*fresh, '--distributed_timeout=0'],
          'distributed_timeout',
      ),
      refuse(
          'flags.num_processes_text',
          [*fresh, '--num_processes=two'],
          'num_processes',
      ),
      refuse(
          'flags.process_id_beyond',
          [
              *fresh,
              '--coordinator_address=localhost:1',
              '--num_processes=2',
              '--process_id=5',
              '--distributed_timeout=5',
          ],
          'process_id',
      ),
      refuse('flags.verbosity_text', [*fresh, '--verbosity=loud'], 'verbosity'),
      refuse(
          'flags.config_field_unknown',
          [*fresh, '--config.train.num_step=5'],
          "'num_step'",
      ),
      refuse(
          'flags.config_section_unknown',
          [*fresh, '--config.trian.num_steps=5'],
          'trian',
      ),
      refuse('flags.config_top_unknown', [*fresh, '--config.bogus=1'], 'bogus'),
      refuse(
          'flags.config_value_empty',
          [*fresh, '--config.train.num_steps='],
          'num_steps',
      ),
      refuse(
          'flags.config_section_as_value', [*fresh, '--config.train=5'], 'train'
      ),
      refuse(
          'flags.train_with_two_workdirs',
          [*BASE, '--workdir={d}/a,{d}/b'],
          'workdir',
      ),
      refuse(
          'flags.attention_kind_unknown',
          [*fresh, '--config.model.attention.kind=bogus'],
          'bogus',
      ),
  ]
  for case in cases:
    case.pattern = '^error: .*' + case.pattern
    case.check = absent('w')
  return cases


BROKEN_CONFIGS = {
    'missing': (None, 'does not exist'),
    'empty': ('', 'get_config'),
    'not_python': ('root:x:0:0:root:/root:/bin/bash\n', 'not a Python'),
    'syntax_error': ('def get_config(:\n', 'syntax error'),
    'import_error': ('import no_such_module\n', 'no_such_module'),
    'no_get_config': ('x = 1\n', 'get_config'),
    'returns_dict': (
        'def get_config(arg=None):\n  return {"a": 1}\n',
        'ConfigDict',
    ),
    'raises': (
        'def get_config(arg=None):\n  raise RuntimeError("oops")\n',
        'oops',
    ),
    'returns_none': ('def get_config(arg=None):\n  return None\n', 'None'),
}


def _config_file_cases():
  cases = []
  for name, (text, pattern) in BROKEN_CONFIGS.items():
    # A file of another kind, named as it is: not a .py.
    file = 'passwd' if name == 'not_python' else 'broken.py'
    setup = (
        None
        if text is None
        else (lambda d, text=text, file=file: write(f'{d}/{file}', text))
    )
    cases.append(
        refuse(
            f'config_file.{name}',
            [f'--config={{d}}/{file}', '--workdir={d}/w'],
            '^error: .*' + pattern,
            setup=setup,
            check=absent('w'),
        )
    )
  for section in (
      'data',
      'model',
      'model.attention',
      'train',
      'decode',
      'parallel',
  ):
    parent, _, leaf = section.rpartition('.')
    where = f'config.{parent}' if parent else 'config'
    text = (
        'from nmt_jax.config import defaults\n\n'
        'def get_config(arg=None):\n'
        '  config = defaults.get_config(arg)\n'
        f'  del {where}["{leaf}"]\n'
        '  return config\n'
    )
    cases.append(
        refuse(
            f'config_file.no_{section.replace(".", "_")}_section',
            ['--config={d}/broken.py:tiny', '--workdir={d}/w'],
            '^error: .*' + re.escape(section),
            setup=lambda d, text=text: write(
                os.path.join(d, 'broken.py'), text
            ),
            check=absent('w'),
        )
    )
  more = [
      ('directory', '--config=configs', 'configs'),
      ('json_file', '--config={d}/w0/config.json', 'Python'),
      ('preset_unknown', '--config=configs/global_general.py:bogus', 'bogus'),
      (
          'two_data_presets',
          '--config=configs/global_general.py:copy50,wmt17_de_en',
          'wmt17_de_en',
      ),
      ('preset_copy0', '--config=configs/global_general.py:copy0', 'copy0'),
  ]
  for name, flag, pattern in more:
    setup = None
    if 'w0' in flag:
      setup = lambda d: write(os.path.join(d, 'w0', 'config.json'), '{}')
    cases.append(
        refuse(
            f'config_file.{name}',
            [flag, '--workdir={d}/w'],
            '^error: .*' + pattern,
            setup=setup,
            check=absent('w'),
        )
    )
  return cases


def _rule_cases():
  """Values each fine alone that do not go together."""
  rules = [
      (
          'keep_every_not_multiple',
          ['--config.train.keep_every=3'],
          'keep_every',
      ),
      (
          'plateau_decay_one',
          ['--config.train.plateau_decay=1'],
          'plateau_decay',
      ),
      (
          'label_smoothing_one',
          ['--config.train.label_smoothing=1'],
          'label_smoothing',
      ),
      ('beta_without_flexible', ['--config.train.beta=0.1'], 'beta'),
      (
          'readout_size_without_attention',
          [
              '--config.model.attention.kind=none',
              '--config.model.readout_size=8',
          ],
          'readout_size',
      ),
      (
          'tied_embeddings_other_width',
          ['--config.model.tie_embeddings=true', '--config.model.embed_size=8'],
          'tie_embeddings',
      ),
      (
          'beam_wider_than_vocabulary',
          ['--config.decode.beam_size=100000'],
          'beam',
      ),
      (
          'eval_beam_wider_than_vocabulary',
          ['--config.train.eval_beam_size=100000'],
          'beam',
      ),
      (
          'compiler_option_unknown',
          ['--config.compiler_options=--xla_bogus=1'],
          'compiler_options',
      ),
      (
          'compiler_options_not_flags',
          ['--config.compiler_options=hello'],
          'compiler_options',
      ),
      (
          'compiler_options_with_pmap',
          [
              '--config.compiler_options=--xla_cpu_enable_fast_math=false',
              '--config.parallel.mode=pmap',
          ],
          'compiler_options',
      ),
      ('nbest_above_beam', ['--config.decode.nbest=5'], 'nbest'),
      (
          'replace_unk_without_words',
          ['--config.decode.replace_unk=true'],
          'replace_unk',
      ),
      (
          'min_length_above_max_length',
          ['--config.data.min_length=50'],
          'min_length',
      ),
      (
          'batch_tokens_below_a_sentence',
          ['--config.data.batch_tokens=3'],
          'batch_tokens',
      ),
      (
          'mesh_of_three_devices',
          ['--config.parallel.mesh_shape=(3,)'],
          'mesh_shape',
      ),
      ('mesh_text', ['--config.parallel.mesh_shape=abc'], 'mesh_shape'),
      (
          'bridge_copy_other_layers',
          ['--config.model.bridge=copy', '--config.model.num_decoder_layers=2'],
          'bridge',
      ),
      ('data_name_unknown', ['--config.data.name=bogus'], 'data.name'),
      ('data_name_text_empty', ['--config.data.name=text:'], 'text:'),
      (
          'data_name_tfds_unknown',
          ['--config.data.name=tfds:nonexistent/x'],
          '(nonexistent|tfds)',
      ),
      ('seed_huge', [f'--config.seed={2**64}'], 'seed'),
      (
          'init_from_missing',
          ['--config.train.init_from={d}/nowhere'],
          'init_from',
      ),
      (
          'profile_into_a_file',
          [
              '--config.train.profile_steps=1',
              '--config.train.profile_from_step=0',
          ],
          'profile',
      ),
  ]
  cases = []
  for name, flags, pattern in rules:
    setup = None
    if name == 'profile_into_a_file':
      setup = lambda d: write(os.path.join(d, 'w', 'profile'), '')
    cases.append(
        refuse(
            f'rules.{name}',
            [*BASE, '--workdir={d}/w', *flags],
            '^error: .*' + pattern,
            setup=setup,
            check=None if setup else absent('w'),
        )
    )
  return cases


def cases():
  """The cases of this file in running order, but the folded ones."""
  return folded.without(
      _flag_cases()
      + _config_file_cases()
      + _field_value_cases()
      + _rule_cases()
  )
