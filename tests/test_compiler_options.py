"""config.compiler_options: parsed, checked by XLA up front, and compiled into the programs."""

import os

import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax import compiler_options
from nmt_jax import decode
from nmt_jax import default_config
from nmt_jax import errors
from nmt_jax import validation
from tests import helpers

NO_FUSION = '--xla_disable_hlo_passes=fusion'


def test_parse_reads_xla_flags_syntax():
  assert compiler_options.parse('') == {}
  assert compiler_options.parse(
      " --xla_a=1  xla_b=X,Y --xla_c='two words' --xla_d --xla_e=False"
  ) == {
      'xla_a': '1',
      'xla_b': 'X,Y',
      'xla_c': 'two words',
      'xla_d': True,
      'xla_e': False,
  }


@pytest.mark.parametrize(
    'text,fragment',
    [
        ('--xla_a=', 'is not --xla_<name>=<value>'),
        ('--jax_a=1', 'is not --xla_<name>=<value>'),
        ('--xla_a=1 --xla_a=2', 'sets xla_a twice'),
        ("--xla_a='1", 'cannot be split'),
        (3, 'must be a string'),
    ],
)
def test_parse_rejects_what_is_not_an_option(text, fragment):
  with pytest.raises(errors.ConfigError, match='compiler_options') as e:
    compiler_options.parse(text)
  assert fragment in str(e.value) and '\n' not in str(e.value)


@pytest.mark.parametrize(
    'text,fragment',
    [
        (
            '--xla_no_such_option=1',
            "No such compile option: 'xla_no_such_option'",
        ),
        (
            '--xla_backend_optimization_level=high',
            "'high' is not a valid int32",
        ),
    ],
)
def test_get_names_what_xla_rejects_before_anything_runs(text, fragment):
  config = default_config.get_config('tiny')
  config.compiler_options = text
  with pytest.raises(errors.ConfigError, match='XLA rejects it') as e:
    compiler_options.get(config)
  assert fragment in str(e.value) and '\n' not in str(e.value)


def test_options_of_another_platform_are_accepted():
  config = default_config.get_config('tiny')
  config.compiler_options = '--xla_gpu_enable_command_buffer=FUSION,WHILE'
  assert compiler_options.get(config) == {
      'xla_gpu_enable_command_buffer': 'FUSION,WHILE'
  }


def test_pmap_with_options_is_refused_by_validation():
  config = default_config.get_config('tiny')
  config.compiler_options = NO_FUSION
  validation.resolve(config)  # jit: fine
  config.parallel.mode = 'pmap'
  with pytest.raises(errors.ConfigError, match='needs parallel.mode=jit'):
    validation.resolve(config)


def test_decoder_compiles_with_the_options_and_decodes_the_same(tmp_path):
  config = helpers.tiny_config()
  model = helpers.make_model(config)
  params = helpers.init_params(model)
  source = jnp.asarray(np.random.RandomState(0).randint(4, 10, (3, 6)))
  outputs = {}
  # XLA writes the programs it compiles with --xla_dump_to, and no others.
  for text in ('', f'--xla_dump_to={tmp_path}'):
    config.compiler_options = text
    decode_fn = decode.make_decode_fn(
        model,
        config.decode,
        beam_size=1,
        compiler_options=compiler_options.get(config),
    )
    outputs[text] = np.asarray(decode_fn(params, source).tokens)
    dumped = {name.split('.')[1] for name in os.listdir(tmp_path)}
    assert ('jit_greedy_search' in dumped) == bool(text), dumped
  np.testing.assert_array_equal(*outputs.values())
