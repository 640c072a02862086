"""XLA compiler options from the config, for every compiled step.

`config.compiler_options` holds XLA's options as XLA_FLAGS writes them,
'--xla_name=value --xla_other=value'. They reach the training step, the
evaluation's scorer and every decoder. Unlike XLA_FLAGS, which a process reads
once, they are part of the config: `bench --compare` alternates two settings
in one process, and the workdir's config records what a run compiled with.
E.g. on a GPU

    --config.compiler_options='--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE'

records the decoder's search loop as CUDA graphs, launched once per loop
instead of once per kernel. Options of another platform are accepted and
ignored (a GPU option on a CPU changes nothing).
"""

import functools
import shlex
from typing import Dict, Union

import jax
import jax.numpy as jnp

from nmt_jax import errors

FIELD = 'compiler_options'
_FIX = "write them as XLA_FLAGS does: '--xla_name=value --xla_other=value'"


def parse(text: str) -> Dict[str, Union[str, bool]]:
  """'--xla_a=1 --xla_b=X,Y --xla_c' -> {'xla_a': '1', 'xla_b': 'X,Y', 'xla_c': True}.

  As in XLA_FLAGS, a bare name and true/false are booleans (XLA reads the
  strings 'true' and 'false' as no boolean). Checks the syntax only (no
  devices): ConfigError on anything else.
  """
  if not isinstance(text, str):
    raise errors.config_error(FIELD, text, 'must be a string', _FIX)
  try:
    words = shlex.split(text)
  except ValueError as e:
    raise errors.config_error(
        FIELD, text, f'cannot be split ({e})', _FIX
    ) from None
  options = {}
  for word in words:
    name, equals, value = word.removeprefix('--').partition('=')
    if not name.startswith('xla_') or (equals and not value):
      raise errors.config_error(
          FIELD, text, f'{word!r} is not --xla_<name>=<value>', _FIX
      )
    if name in options:
      raise errors.config_error(FIELD, text, f'sets {name} twice', _FIX)
    if not equals or value.lower() in ('true', 'false'):
      value = not equals or value.lower() == 'true'
    options[name] = value
  return options


@functools.lru_cache(maxsize=None)
def _checked(text: str) -> Dict[str, Union[str, bool]]:
  options = parse(text)
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
          FIELD,
          text,
          f'XLA rejects it: {why}',
          'use the option names of XLA_FLAGS (`XLA_FLAGS=--help`), or drop it',
      ) from None
  return options


def get(config) -> Dict[str, Union[str, bool]]:
  """The options of `config` for jax.jit(compiler_options=...), checked.

  Call it after jax.distributed.initialize: the check compiles one op.
  """
  return dict(_checked(config.get(FIELD, '')))
