"""A new attention kind is one class: registered here, it trains, decodes, benchmarks and plots.

Nothing outside this file knows the kind: its config field, validation, cost
model and inspection all come from the class through the registry.
"""

import json
import os
from unittest import mock

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import train_speed
from nmt_jax import attention
from nmt_jax import inference
from nmt_jax import train
from nmt_jax.analysis import attention_maps
from nmt_jax.analysis import runs
from nmt_jax.attention import base
from nmt_jax.config import defaults
from nmt_jax.config import validation
from nmt_jax.system import errors


class PositionAttention(attention.Attention):
  """A toy kind: a softmax over positions scored by w^T hbar_s / temperature,
  the same for every query (no use of h_t)."""

  FIELDS = {'toy_temperature': (2.0, errors.positive)}
  RANK = 5

  def setup(self):
    self.key_score = nn.Dense(1, use_bias=False)

  def prepare(self, memory, lengths):
    cache = base.source_cache(memory, lengths)
    scores = self.key_score(memory)[..., 0] / self.config.toy_temperature
    cache['weights'] = attention.masked_softmax(scores, cache['mask'])  # [B, S]
    return cache

  def __call__(
      self, query, cache, state, step, with_weights=False, train=False
  ):
    del step, train
    context = jnp.einsum('bs,bsd->bd', cache['weights'], cache['memory'])
    diagnostics = {'window': cache['lengths'].astype(jnp.float32)}
    if with_weights:
      diagnostics['weights'] = cache['weights']
    return context, state, diagnostics

  @classmethod
  def cost(cls, model_config, source_length):
    hidden = model_config.hidden_size
    return attention.Cost(
        2.0 * hidden * source_length,
        2.0 * hidden * source_length,
        float(source_length),
    )


@pytest.fixture(scope='module')
def toy_kind():
  with mock.patch.dict(base._KINDS):  # pylint: disable=protected-access
    attention.register('toy_position')(PositionAttention)
    yield 'toy_position'


def toy_config(kind):
  config = defaults.get_config('tiny')
  config.model.attention.kind = kind
  config.decode.beam_size = 2
  config.train.eval_num_sentences = 8
  return config


def test_the_registry_knows_the_new_kind(toy_kind):
  assert toy_kind in attention.kinds()
  assert attention.kinds()[:2] == ('none', toy_kind)  # RANK orders tables
  config = toy_config(toy_kind)
  assert config.model.attention.toy_temperature == 2.0
  resolved = validation.resolve(config)
  assert resolved.model.attention.kind == toy_kind
  config.model.attention.toy_temperature = 0.0
  with pytest.raises(
      errors.ConfigError,
      match='model.attention.toy_temperature=0.0 must be > 0',
  ):
    validation.resolve(config)


def test_the_new_kind_trains_decodes_benchmarks_and_plots(toy_kind, tmp_path):
  workdir = str(tmp_path / 'toy')
  config = toy_config(toy_kind)
  result = train.train_and_evaluate(config, workdir)
  assert 0 <= result['bleu'] <= 100 and result['beam_size'] == 2
  # The kind's 'window' diagnostic is the source length, EOS included.
  assert 1 < result['avg_window'] <= config.data.max_length + 1
  with open(os.path.join(workdir, 'config.json')) as f:
    assert json.load(f)['model']['attention']['kind'] == toy_kind

  sentences = ['a b c', 'd e f a']
  greedy = validation.resolve(config)
  greedy.decode.beam_size = 1
  hypotheses = inference.translate(greedy, [workdir], sentences)
  assert len(hypotheses) == 2

  maps = attention_maps.translate_with_attention(workdir, sentences)
  assert [' '.join(t.hypothesis[:-1]) for t in maps] == hypotheses
  for t in maps:
    assert t.weights.shape == (len(t.hypothesis), len(t.source))
    np.testing.assert_allclose(t.weights.sum(-1), 1.0, rtol=1e-5)

  row = runs.result_row(runs.load_run(workdir))
  assert (
      row['attention'] == toy_kind and row['K'] is None and row['score'] is None
  )

  model = greedy.model
  flops = train_speed.dense_flops(model, 8, 9, 9, 10)
  model.attention.kind = 'none'
  assert flops > train_speed.dense_flops(model, 8, 9, 9, 10)
