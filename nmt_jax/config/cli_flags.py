"""Flag parsing of the command-line tools: config mistakes in one error line.

`parse_flags` is absl's flags_parser for `app.run` in nmt_jax.main and
nmt_jax.sweep: a missing or failing config file, an unknown preset or an
unknown --config.<field> ends the process with status 2 and one line
`error: ...`, instead of absl's usage dump or a traceback.
"""

import difflib
import importlib.util
import os
import sys

from absl import flags
import ml_collections
from ml_collections import config_flags

from nmt_jax.config import defaults
from nmt_jax.config import presets
from nmt_jax.system import errors

# A source checkout's configs/ (they are not installed with the package).
CONFIGS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(__file__))), 'configs'
)


def config_help() -> str:
  """What --help says of configs: the files, the presets, where fields live."""
  files = []
  if os.path.isdir(CONFIGS):
    files = sorted(f for f in os.listdir(CONFIGS) if f.endswith('.py'))
  lines = ['', 'Config files (configs/, in the repository):']
  lines += [f'  configs/{name}' for name in files] or ['  (not found here)']
  lines += [
      '',
      "Presets, after ':' and comma-separated (configs/x.py:copy100,tiny):",
  ]
  for name, preset in presets.PRESETS.items():
    summary = (preset.__doc__ or '').strip().splitlines()[0]
    lines.append(f'  {name}: {summary}')
  lines += [
      '',
      (
          'Every config field, with its default and meaning:'
          " nmt_jax/config/defaults.py; an attention kind's own fields"
          ' (model.attention.*): its module in nmt_jax/attention/. Override any'
          ' with --config.<field>=<value>.'
      ),
  ]
  return '\n'.join(lines) + '\n'


def config_of_command(args) -> ml_collections.ConfigDict:
  """The config a command line's --config=FILE[:ARG] and --config.F=V give.

  Parsed by ml_collections' own config flag, as the command line parses it
  (other arguments are ignored). Raises ConfigError in one line.
  """
  argv = ['nmt_jax'] + [a for a in args if a.startswith('--config')]
  values = flags.FlagValues()
  # The override flags are found in sys_argv (sys.argv by default).
  config_flags.DEFINE_config_file('config', flag_values=values, sys_argv=argv)
  try:
    values(argv)
    return values.config
  except (flags.Error, KeyError, AttributeError, ValueError, TypeError) as e:
    raise errors.ConfigError(' '.join(str(e).split())) from None


def check_command(argv, commands, program: str):
  """One error line unless argv (absl's, flags removed) is one command."""
  choices = ' | '.join(commands)
  if len(argv) < 2:
    fail(f'give a command: {program} {choices} (--help describes them)')
  if argv[1] not in commands:
    fail(f'unknown command {argv[1]!r}; give one of {choices}')
  if len(argv) > 2:
    fail(
        f'unexpected arguments: {" ".join(argv[2:])}; every option is a flag,'
        ' --name=value (--help lists them)'
    )


def fail(message: str):
  print(f'error: {message}', file=sys.stderr)
  sys.exit(2)


def load_python_file(path: str, what: str, fix: str, name: str):
  """The module a Python file defines; a failure is one ConfigError line.

  `what` names the file in the message ('config file X'), `fix` says what
  a right one holds.
  """
  spec = importlib.util.spec_from_file_location(name, path)
  if spec is None:  # not a .py file: Python has no loader for it
    raise errors.ConfigError(f'{what} is not a Python file; give {fix}')
  try:
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
  except errors.UserError as e:
    raise errors.ConfigError(f'{what}: {e}') from None
  except SyntaxError as e:
    raise errors.ConfigError(
        f'{what} line {e.lineno}: syntax error ({e.msg})'
    ) from None
  except Exception as e:  # pylint: disable=broad-except
    raise errors.ConfigError(
        f'{what} fails to load: {type(e).__name__}: {e}'
    ) from None
  return module


def load_config(path: str, arg=None) -> ml_collections.ConfigDict:
  """get_config(arg) of a config file; errors.ConfigError in one line."""

  def error(message):
    return errors.ConfigError(f'config file {path}{message}')

  module = load_python_file(
      path,
      f'config file {path}',
      'a .py file whose get_config() returns an ml_collections.ConfigDict'
      ' (see configs/)',
      'nmt_jax_config_check',
  )
  get_config = getattr(module, 'get_config', None)
  if not callable(get_config):
    raise error(
        ' has no get_config(); define get_config(arg=None) returning an'
        ' ml_collections.ConfigDict (see configs/)'
    )
  try:
    config = get_config(arg) if arg is not None else get_config()
  except (errors.UserError, ValueError) as e:  # e.g. an unknown preset
    raise error(f': {e}') from None
  except Exception as e:  # pylint: disable=broad-except
    raise error(f': get_config failed: {type(e).__name__}: {e}') from None
  if not isinstance(config, ml_collections.ConfigDict):
    raise error(
        f': get_config() returned a {type(config).__name__}, not an'
        ' ml_collections.ConfigDict; start from'
        ' nmt_jax.config.defaults.get_config()'
    )
  reference = defaults.get_config()
  missing = _missing_section(reference, config)
  if missing:
    raise error(
        f"'s config has no {missing}; start from"
        ' nmt_jax.config.defaults.get_config() and change its fields'
    )
  unknown = _unknown_field(reference, config)
  if unknown:
    raise error(
        f' sets {unknown}, which is not a config'
        f' field{_nearest(reference, unknown)} (every field is listed in'
        ' nmt_jax/config/defaults.py and, for model.attention, in the kinds of'
        ' nmt_jax/attention/)'
    )
  return config


def _unknown_field(reference, config, prefix='') -> str:
  """The first field of `config` that `reference` (the defaults) lacks."""
  for name, value in config.items():
    if name not in reference:
      return prefix + name
    if isinstance(value, ml_collections.ConfigDict) and isinstance(
        reference[name], ml_collections.ConfigDict
    ):
      unknown = _unknown_field(reference[name], value, f'{prefix}{name}.')
      if unknown:
        return unknown
  return ''


def _nearest(reference, dotted: str) -> str:
  """'; did you mean X?' with the closest field of the same section."""
  *section, name = dotted.split('.')
  for part in section:
    reference = reference[part]
  close = difflib.get_close_matches(name, list(reference.keys()), n=1)
  return f'; did you mean {".".join(section + close)}?' if close else ''


def _missing_section(reference, config, prefix='') -> str:
  """The first section (a nested ConfigDict) of `reference` not in `config`."""
  for name, value in reference.items():
    if isinstance(value, ml_collections.ConfigDict):
      if not isinstance(config.get(name), ml_collections.ConfigDict):
        return prefix + name
      missing = _missing_section(value, config[name], f'{prefix}{name}.')
      if missing:
        return missing
  return ''


def check_config_file(path: str, arg):
  """One error line for a config file that does not load or give a config."""
  try:
    load_config(path, arg)
  except errors.ConfigError as e:
    fail(str(e))


def parse_flags(argv):
  """Parses absl flags; config mistakes are one error line, not a traceback."""
  for i, arg in enumerate(argv[1:], start=1):
    if arg == '--':  # absl reads no flags after it
      break
    name, equals, value = arg.partition('=')
    if name not in ('--config', '-config', '--compare', '-compare'):
      continue
    if not equals:  # --config PATH
      if i + 1 >= len(argv):
        continue  # absl says the flag needs a value
      value = argv[i + 1]
    path, _, config_arg = value.partition(':')
    if not os.path.isfile(path):
      fail(
          f'config file {path} does not exist (run from the repository root,'
          ' or give the path of a config file, e.g.'
          ' --config=configs/global_general.py)'
      )
    check_config_file(path, config_arg or None)
  try:
    return flags.FLAGS(argv)
  except (KeyError, AttributeError) as e:  # --config.<unknown field>=...
    detail = ' '.join(
        str(e).strip('"\'').replace('\\n', ' ').replace("\\'", "'").split()
    )
    fail(
        f'unknown config field in a --config override: {detail} (every field is'
        ' listed in nmt_jax/config/defaults.py and, for model.attention, in the'
        ' kinds of nmt_jax/attention/)'
    )
  except OSError as e:  # config file missing or failing to import
    fail(
        ' '.join(str(e).split())
        + ' (run from the repository root, or give the path of a config file)'
    )
  except (flags.Error, ValueError, TypeError) as e:
    lines = str(e).strip().splitlines()
    # A failing get_config() arrives as a traceback in the message: its last
    # line says why.
    message = lines[-1] if 'Traceback' in str(e) else ' '.join(str(e).split())
    fail(message + ' (see --helpfull)')
