"""XLA compiler options from the config, for every compiled step.

`config.compiler_options` holds XLA's options as XLA_FLAGS writes them,
'--xla_name=value --xla_other=value'. They reach the training step, the
evaluation's scorer and every decoder. Unlike XLA_FLAGS, which a process reads
once, they are part of the config: `bench --compare` alternates two settings
in one process, and the workdir's config records what a run compiled with.
E.g. on a GPU

    --config.compiler_options='--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE'

records the training and search loops as CUDA graphs, launched once per
loop instead of once per kernel. Options of another platform are accepted and
ignored (a GPU option on a CPU changes nothing).

`config.decode.compiler_options` adds options for the decoders alone (a name
set in both takes the decoder's value). The option above made the search
loops x2.4-2.7 faster on an H100 and an H200 and the training step x0.5-0.7
(docs/performance.md), so it is decode.compiler_options' default
(defaults.CUDA_GRAPHS) and not the training step's.
"""

import functools
import shlex
from typing import Dict, Union

import jax
import jax.numpy as jnp

from nmt_jax.system import errors

FIELD = 'compiler_options'
DECODE_FIELD = 'decode.compiler_options'
_FIX = "write them as XLA_FLAGS does: '--xla_name=value --xla_other=value'"


def parse(text: str, field: str = FIELD) -> Dict[str, Union[str, bool]]:
  """'--xla_a=1 --xla_b=X,Y --xla_c' -> {'xla_a': '1', 'xla_b': 'X,Y', 'xla_c': True}.

  As in XLA_FLAGS, a bare name and true/false are booleans (XLA reads the
  strings 'true' and 'false' as no boolean). Checks the syntax only (no
  devices): ConfigError on anything else.
  """
  if not isinstance(text, str):
    raise errors.config_error(field, text, 'must be a string', _FIX)
  try:
    words = shlex.split(text)
  except ValueError as e:
    raise errors.config_error(
        field, text, f'cannot be split ({e})', _FIX
    ) from None
  options = {}
  for word in words:
    name, equals, value = word.removeprefix('--').partition('=')
    if not name.startswith('xla_') or (equals and not value):
      raise errors.config_error(
          field, text, f'{word!r} is not --xla_<name>=<value>', _FIX
      )
    if name in options:
      raise errors.config_error(field, text, f'sets {name} twice', _FIX)
    if not equals or value.lower() in ('true', 'false'):
      value = not equals or value.lower() == 'true'
    options[name] = value
  return options


@functools.lru_cache(maxsize=None)
def _checked(text: str, field: str) -> Dict[str, Union[str, bool]]:
  options = parse(text, field)
  if options:
    # XLA checks names and values only when it compiles: compile one op now,
    # so a typo fails before a run starts instead of at its first step.
    try:
      jax.jit(lambda x: x + 1, compiler_options=options).lower(
          jnp.zeros((), jnp.float32)
      ).compile()
    except jax.errors.JaxRuntimeError as e:
      why = ' '.join(str(e).split()).removeprefix('INVALID_ARGUMENT: ')
      why = why.rstrip('.')
      raise errors.config_error(
          field,
          text,
          f'XLA rejects it: {why}',
          'use the option names of XLA_FLAGS (`XLA_FLAGS=--help`), or drop it',
      ) from None
  return options


def get(config) -> Dict[str, Union[str, bool]]:
  """The options of `config` for jax.jit(compiler_options=...), checked.

  Call it after jax.distributed.initialize: the check compiles one op.
  """
  return dict(_checked(config.get(FIELD, ''), FIELD))


def get_decode(config) -> Dict[str, Union[str, bool]]:
  """The options for the decoders: `config`'s, then decode.compiler_options'."""
  # .get: configs written before the field (an older workdir's) lack it.
  text = config.decode.get('compiler_options', '')
  return {**get(config), **_checked(text, DECODE_FIELD)}
