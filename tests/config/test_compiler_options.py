"""config.compiler_options and decode.compiler_options: parsed, checked by XLA up
front, and compiled into the programs they are for."""

import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax import data
from nmt_jax.config import compiler_options
from nmt_jax.config import defaults
from nmt_jax.config import validation
from nmt_jax.decoding import evaluation
from nmt_jax.decoding import search
from nmt_jax.model import seq2seq
from nmt_jax.system import errors
from nmt_jax.system import parallel
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
  config = defaults.get_config('tiny')
  config.compiler_options = text
  with pytest.raises(errors.ConfigError, match='XLA rejects it') as e:
    compiler_options.get(config)
  assert fragment in str(e.value) and '\n' not in str(e.value)


def test_options_of_another_platform_are_accepted():
  config = defaults.get_config('tiny')
  config.compiler_options = '--xla_gpu_enable_command_buffer=FUSION,WHILE'
  assert compiler_options.get(config) == {
      'xla_gpu_enable_command_buffer': 'FUSION,WHILE'
  }


def test_pmap_with_options_is_refused_by_validation():
  config = defaults.get_config('tiny')
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
    decode_fn = search.make_decode_fn(
        model,
        config.decode,
        beam_size=1,
        compiler_options=compiler_options.get(config),
    )
    outputs[text] = np.asarray(decode_fn(params, source).tokens)
    dumped = {name.split('.')[1] for name in os.listdir(tmp_path)}
    assert ('jit_greedy_search' in dumped) == bool(text), dumped
  np.testing.assert_array_equal(*outputs.values())


def test_decode_options_add_to_the_run_options_and_win_a_clash():
  config = defaults.get_config('tiny')
  config.compiler_options = (
      '--xla_gpu_enable_command_buffer=FUSION --xla_cpu_enable_fast_math'
  )
  config.decode.compiler_options = '--xla_gpu_enable_command_buffer=WHILE'
  assert compiler_options.get_decode(config) == {
      'xla_gpu_enable_command_buffer': 'WHILE',
      'xla_cpu_enable_fast_math': True,
  }
  # The training step and the scorer keep the run's own options.
  assert compiler_options.get(config) == {
      'xla_gpu_enable_command_buffer': 'FUSION',
      'xla_cpu_enable_fast_math': True,
  }


def test_decode_options_errors_name_their_own_field():
  config = defaults.get_config('tiny')
  config.decode.compiler_options = '--xla_no_such_option=1'
  with pytest.raises(errors.ConfigError) as e:
    compiler_options.get_decode(config)
  assert str(e.value).startswith('config: decode.compiler_options=')
  assert '--config.decode.compiler_options=' in str(e.value)
  config.decode.compiler_options = 'xla_a='
  with pytest.raises(errors.ConfigError, match='decode.compiler_options'):
    validation.resolve(config)
  # Decoding compiles with jax.jit in either parallel mode: pmap is fine.
  config.decode.compiler_options = NO_FUSION
  config.parallel.mode = 'pmap'
  validation.resolve(config)


def test_evaluator_compiles_only_its_decoders_with_the_decode_options(
    tmp_path,
):
  config = helpers.tiny_config()
  config.decode.compiler_options = f'--xla_dump_to={tmp_path}'
  task = data.load_task(config.data, seed=0)
  model = seq2seq.create_model(config, task)
  params = helpers.init_params(model)
  evaluator = evaluation.Evaluator(config, model, task, parallel.make_mesh())
  # Drop what the options' own check compiled, then score: the scorer
  # compiles with the run's options (''), so nothing is dumped.
  shutil.rmtree(tmp_path)
  evaluator.loss(params, task.eval)
  assert not tmp_path.exists()
  decoded = evaluator.decode(params, task.eval, beam_size=1)
  dumped = {name.split('.')[1] for name in os.listdir(tmp_path)}
  assert 'jit_greedy_search' in dumped, dumped
  config.decode.compiler_options = ''
  plain = evaluation.Evaluator(config, model, task, parallel.make_mesh())
  assert plain.decode(params, task.eval, beam_size=1).texts == decoded.texts


def test_default_decode_options_are_cuda_graphs_that_a_cpu_ignores():
  config = helpers.tiny_config()
  # The default: the search loops as CUDA graphs on a GPU, nothing else.
  assert compiler_options.get_decode(config) == {
      'xla_gpu_enable_command_buffer': (
          'FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE'
      )
  }
  model = helpers.make_model(config)
  params = helpers.init_params(model)
  source = jnp.asarray(np.random.RandomState(1).randint(4, 10, (3, 6)))
  outputs = []
  for text in (config.decode.compiler_options, ''):
    config.decode.compiler_options = text
    decode_fn = search.make_decode_fn(
        model,
        config.decode,
        beam_size=2,
        compiler_options=compiler_options.get_decode(config),
    )
    outputs.append(np.asarray(decode_fn(params, source).tokens))
  np.testing.assert_array_equal(*outputs)
