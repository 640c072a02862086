"""Training pieces: loss, schedules, config validation, a few real steps."""

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax import attention
from nmt_jax import train
from nmt_jax.config import defaults
from nmt_jax.config import validation
from nmt_jax.data.vocab import PAD
from nmt_jax.system import errors
from nmt_jax.training import plateau as plateau_lib
from nmt_jax.training import progress as progress_lib
from nmt_jax.training import steps
from tests import conftest
from tests import helpers


def test_cross_entropy_matches_numpy_and_ignores_padding():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 3, 5)).astype(np.float32)
  targets = np.array([[1, 2, PAD], [4, PAD, PAD]])
  loss_sum, tokens = steps.cross_entropy(
      jnp.asarray(logits), jnp.asarray(targets)
  )
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  expected = -(logp[0, 0, 1] + logp[0, 1, 2] + logp[1, 0, 4])
  np.testing.assert_allclose(loss_sum, expected, rtol=1e-5)
  assert tokens == 3


def test_label_smoothing_is_zero_at_the_smoothed_target():
  vocab, eps = 6, 0.1
  soft = np.full(vocab, eps / (vocab - 1))
  soft[2] = 1 - eps
  logits = jnp.log(jnp.asarray(soft))[None, None]
  loss_sum, _ = steps.cross_entropy(
      logits, jnp.array([[2]]), label_smoothing=eps
  )
  np.testing.assert_allclose(loss_sum, 0.0, atol=1e-5)


def test_uniform_init_draws_every_parameter_and_keeps_the_forget_bias():
  params = {
      'lstm': {'kernel': jnp.ones((3, 8)), 'bias': jnp.zeros(8).at[2:4].set(1)},
      'embed': {'embedding': jnp.ones((5, 3))},
  }
  drawn = steps.uniform_init(params, jax.random.key(0), 0.1)
  for path, leaf in jax.tree_util.tree_flatten_with_path(drawn)[0]:
    before = params[path[0].key][path[1].key]
    assert leaf.shape == before.shape
    if path[-1].key == 'bias':  # drawn on top of the forget-gate bias
      leaf = leaf - before
    assert float(jnp.abs(leaf).max()) <= 0.1 and float(jnp.std(leaf)) > 0.02


def test_halving_schedule_follows_shu():
  config = defaults.get_config().train
  config.schedule, config.learning_rate, config.halve_from_epoch = (
      'halve',
      1.0,
      4,
  )
  schedule = steps.learning_rate_fn(config, steps_per_epoch=10)
  # Epochs 1-3 at the full rate, halved from the start of epoch 4, again at epoch 5.
  assert [float(schedule(s)) for s in (0, 29, 30, 39, 40)] == [
      1.0,
      1.0,
      0.5,
      0.5,
      0.25,
  ]


def test_a_resumed_plateau_takes_the_checkpoints_factor(tmp_path):
  """Without metrics.jsonl (an averaged workdir) the replay restarted the
  factor at 1 while the optimizer applied 0.125: the next decay raised it."""
  config = defaults.get_config().train
  config.plateau_decay, config.plateau_patience = 0.5, 1
  resumed = plateau_lib.resume(config, str(tmp_path), 40, scale=0.125)
  assert resumed.scale == 0.125
  resumed.update(42, {'bleu': 10.0})
  decayed, _ = resumed.update(44, {'bleu': 9.0})
  assert decayed and resumed.scale == 0.0625
  # metrics.jsonl writes a NaN loss as 'nan'; the replay reads it back.
  config.plateau_metric = 'loss'
  with open(tmp_path / 'metrics.jsonl', 'w') as f:
    f.write('{"step": 2, "split": "valid", "loss": "nan"}\n')
    f.write('{"step": 4, "split": "valid", "loss": 3.0}\n')
  resumed = plateau_lib.resume(config, str(tmp_path), 4, scale=1.0)
  assert (resumed.best, resumed.best_step) == (3.0, 4)


def test_warmup_rsqrt_schedule():
  config = defaults.get_config().train
  config.schedule, config.learning_rate, config.warmup_steps = (
      'warmup_rsqrt',
      1.0,
      4,
  )
  schedule = steps.learning_rate_fn(config, steps_per_epoch=10)
  np.testing.assert_allclose(
      [float(schedule(s)) for s in (0, 3, 16)], [0.25, 1.0, 0.5]
  )


@pytest.mark.parametrize(
    'field,value,message',
    [
        ('model.attention.kind', 'bogus', 'model.attention.kind'),
        ('model.attention.score', 'dotty', 'model.attention.score'),
        ('model.hidden_size', 0, 'model.hidden_size=0 must be > 0'),
        ('decode.beam_size', 0, 'decode.beam_size=0 must be > 0'),
        ('model.hidden_size', 15, 'must be even'),
        ('train.schedule', 'cosine', 'train.schedule'),
        ('model.dropout', 1.0, 'must be below 1'),
        ('train.dropout_rng', 'mt19937', 'train.dropout_rng'),
        ('train.halve_from_epoch', 0, 'train.halve_from_epoch=0 must be > 0'),
        ('train.accumulate_steps', 3, 'does not divide train.batch_size=8'),
        ('train.accumulate_steps', 0, 'must be > 0'),
        ('train.weight_decay', -0.1, 'must be >= 0'),
        ('train.ema_decay', 1.0, 'must be below 1'),
        ('train.attention_images', -1, 'must be >= 0'),
        ('decode.alignments', 'hard', "'', pharaoh, soft"),
        ('decode.alignments_file', 'a.npz', "decode.alignments is ''"),
    ],
)
def test_validate_rejects_bad_values(field, value, message):
  config = defaults.get_config('tiny')
  section, name = field.rsplit('.', 1)
  target = config
  for part in section.split('.'):
    target = target[part]
  target[name] = value
  with pytest.raises(errors.ConfigError, match=message):
    validation.resolve(config)


@pytest.mark.parametrize(
    'fields,message',
    [
        ({'temperature': 1e-38}, 'decode.temperature=1e-38 is below 1e-06'),
        ({'temperature': 0.0}, 'must be > 0'),
        (
            {'coverage_penalty': 0.2, 'beam_size': 4},
            "decode.method='sample' draws samples, which it would ignore",
        ),
    ],
)
def test_sampling_settings_that_cannot_work_are_refused(fields, message):
  config = defaults.get_config('tiny')
  config.decode.method = 'sample'
  for name, value in fields.items():
    config.decode[name] = value
  with pytest.raises(errors.ConfigError, match=message):
    validation.resolve(config)
  config.decode.temperature = 1e-6  # the smallest accepted
  config.decode.coverage_penalty = 0.0
  validation.resolve(config)


def test_validate_derives_max_source_length():
  config = validation.resolve(defaults.get_config('tiny'))
  assert config.model.attention.max_source_length == config.data.max_length + 1


def test_unknown_preset():
  with pytest.raises(ValueError, match='unknown config preset'):
    defaults.get_config('copyx')


def test_presets_that_both_choose_the_data_are_refused():
  config = defaults.get_config('copy50,chunk')
  assert (config.data.name, config.data.max_length) == ('chunk_reverse', 50)
  # copy sets the default data.name: copy100,copy50 was silently L = 50.
  for arg in (
      'chunk,copy50',
      'chunk,wmt17_de_en',
      'copy100,copy50',
      'copy50,wmt17_de_en',
      'wmt17_de_en,shu_de_en',
  ):
    with pytest.raises(ValueError, match='both choose the data'):
      defaults.get_config(arg)


def test_a_few_steps_reduce_the_loss():
  config = helpers.tiny_config('global', 'general')
  config.train.learning_rate = 1e-2
  setup = train.build(config)
  state, batches = setup.state, setup.batches
  step = helpers.jitted_train_step(setup)
  fixed = batches.batch(0)
  losses = []
  for _ in range(15):
    state, metrics = step(state, fixed)
    losses.append(float(metrics['loss_sum'] / metrics['tokens']))
  assert losses[-1] < 0.7 * losses[0]
  assert int(state.step) == 15


def test_flexible_finetuning_objective_rewards_strength():
  """The beta term is exactly -beta * mean_t g(t) over real target tokens."""
  config = helpers.tiny_config('flexible', 'concat', query='previous')
  setup = train.build(config)
  batch = setup.batches.batch(0)
  params = setup.state.params

  def loss_fn(p):
    logits, diagnostics = setup.model.apply(
        {'params': p},
        batch['source'],
        batch['target_in'],
        train=True,
        rngs={'dropout': jax.random.key(0)},
    )
    loss_sum, tokens = steps.cross_entropy(logits, batch['target_out'])
    return loss_sum / tokens, diagnostics['strength']

  nll, strength = jax.jit(loss_fn)(params)
  mask = batch['target_out'] != PAD
  nll = float(nll)
  mean_g = float(np.sum(np.where(mask, strength, 0)) / mask.sum())
  grads = {}
  for name, beta in (('plain', 0.0), ('tuned', 0.5)):
    cfg = setup.config.copy_and_resolve_references()
    cfg.train.beta = beta
    step = jax.jit(
        functools.partial(
            steps.train_step,
            model=setup.model,
            optimizer=setup.optimizer,
            config=cfg,
        )
    )
    state, metrics = step(setup.state, batch)
    grads[name] = state.params
    np.testing.assert_allclose(
        float(metrics['loss_sum'] / metrics['tokens']), nll, rtol=1e-5
    )
  # Same NLL reported, different updates: the strength network gets the extra gradient.
  g_plain = grads['plain']['decoder']['attention']['strength_out']['bias']
  g_tuned = grads['tuned']['decoder']['attention']['strength_out']['bias']
  assert not np.allclose(g_plain, g_tuned)
  assert 0 < mean_g < 1


def test_attention_images_need_attention():
  config = defaults.get_config('tiny')
  config.model.attention.kind = 'none'
  config.train.attention_images = 2
  with pytest.raises(errors.ConfigError, match="kind 'none' has none"):
    validation.resolve(config)


def test_beta_needs_flexible_attention():
  config = defaults.get_config('tiny')
  config.train.beta = 0.1
  with pytest.raises(errors.ConfigError, match='train.beta'):
    validation.resolve(config)


@pytest.mark.parametrize(
    'preset', [None, 'copy200', 'chunk', 'wmt17_de_en', 'shu_de_en']
)
def test_every_config_file_and_preset_validates(preset):
  import glob  # pylint: disable=g-import-not-at-top

  root = conftest.ROOT
  files = sorted(glob.glob(os.path.join(root, 'configs', '*.py')))
  assert len(files) == 12
  for path in files:
    name = os.path.basename(path)[:-3]
    config = defaults.sibling_config(path, name, preset)
    assert validation.resolve(config).model.attention.kind in attention.kinds()


def test_a_readout_size_without_attention_is_refused_not_ignored():
  # htilde_t = h_t without a context: readout_size sized nothing, and
  # no_attention.py:shu_de_en silently had no 600-unit layer.
  config = defaults.get_config('tiny')
  config.model.attention.kind = 'none'
  config.model.readout_size = 7
  with pytest.raises(errors.ConfigError, match='output_hidden_size=7'):
    validation.resolve(config)
  config.model.readout = 'bahdanau_maxout'  # U_o q + V_o E y: 7 units
  validation.resolve(config)
  root = conftest.ROOT
  path = os.path.join(root, 'configs', 'no_attention.py')
  config = defaults.sibling_config(path, 'no_attention', 'shu_de_en')
  model = validation.resolve(config).model
  assert (model.readout_size, model.output_hidden_size) == (0, 600)


def test_a_config_files_own_fields_win_over_its_presets():
  root = conftest.ROOT
  configs = os.path.join(root, 'configs')

  def load(name, preset):
    return defaults.sibling_config(os.path.join(configs, 'x.py'), name, preset)

  general = load('global_general', 'rnnsearch').model
  assert (general.attention.score, general.query) == ('general', 'previous')
  assert not general.input_feeding
  assert load('global_concat', 'rnnsearch').model.attention.score == 'concat'
  assert load('memory_k64', 'tiny').model.attention.num_memory == 64
  assert load('memory_k32', 'tiny').model.attention.num_memory == 32
  tiny = load('memory_k64', 'tiny').model
  assert (tiny.hidden_size, tiny.attention.position_encoding) == (16, 'none')


@pytest.mark.parametrize('dropout', [0.0, 0.3])
def test_a_train_step_with_a_chunked_loss_is_the_same_step(dropout):
  config = helpers.tiny_config('global', 'general', dropout=dropout)
  setup = train.build(config)
  batch = setup.batches.batch(0)
  results = []
  for chunk in (0, 3):
    cfg = setup.config.copy_and_resolve_references()
    cfg.train.loss_chunk = chunk
    results.append(helpers.jitted_train_step(setup, cfg)(setup.state, batch))
  (whole, whole_metrics), (chunked, chunked_metrics) = results
  np.testing.assert_allclose(
      chunked_metrics['loss_sum'], whole_metrics['loss_sum'], rtol=1e-5
  )
  np.testing.assert_allclose(
      chunked_metrics['grad_norm'], whole_metrics['grad_norm'], rtol=1e-4
  )
  for a, b in zip(
      jax.tree_util.tree_leaves(chunked.params),
      jax.tree_util.tree_leaves(whole.params),
  ):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize('loss_chunk', [0, 3])
def test_accumulated_micro_batches_make_the_big_batchs_update(loss_chunk):
  """4 micro-batches of 2 rows: the 8-row batch's loss, gradient, update."""
  config = helpers.tiny_config('global', 'general')
  config.train.loss_chunk = loss_chunk
  setup = train.build(config)
  batch = setup.batches.batch(0)
  assert len(batch['source']) == 8
  results = []
  for count in (1, 4):
    cfg = setup.config.copy_and_resolve_references()
    cfg.train.accumulate_steps = count
    results.append(helpers.jitted_train_step(setup, cfg)(setup.state, batch))
  (whole, whole_metrics), (accumulated, accumulated_metrics) = results
  for key in ('loss_sum', 'tokens', 'grad_norm'):
    np.testing.assert_allclose(
        accumulated_metrics[key], whole_metrics[key], rtol=1e-5
    )
  for a, b in zip(
      jax.tree_util.tree_leaves(accumulated.params),
      jax.tree_util.tree_leaves(whole.params),
  ):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  moved = [
      float(np.max(np.abs(a - b)))
      for a, b in zip(
          jax.tree_util.tree_leaves(whole.params),
          jax.tree_util.tree_leaves(setup.state.params),
      )
  ]
  assert max(moved) > 1e-3  # the step did update


def test_adamw_decays_the_weights_outside_adams_scaling():
  config = defaults.get_config('tiny')
  config.train.clip_norm = 0.0
  config.train.learning_rate, config.train.weight_decay = 0.1, 0.5
  optimizer, _ = steps.create_optimizer(config.train, steps_per_epoch=10)
  params = {'w': np.array([1.0, -2.0, 3.0], np.float32)}
  grads = {'w': np.array([0.5, 0.0, -4.0], np.float32)}
  updates, _ = optimizer.update(grads, optimizer.init(params), params)
  # Step 1: Adam's bias-corrected m / sqrt(v) is g / |g| (eps 1e-8).
  g, w = grads['w'], params['w']
  expected = -0.1 * (g / (np.abs(g) + 1e-8) + 0.5 * w)
  np.testing.assert_allclose(updates['w'], expected, rtol=1e-4)


def test_the_ema_follows_its_recurrence_from_the_initial_parameters():
  config = helpers.tiny_config('global', 'general')
  config.train.ema_decay = 0.75
  setup = train.build(config)
  step = helpers.jitted_train_step(setup, setup.config)
  leaves = lambda tree: [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]
  state = setup.state
  expected = leaves(state.params)  # the average starts at the parameters
  for got, want in zip(leaves(state.ema_params), expected):
    np.testing.assert_array_equal(got, want)
  for i in range(3):
    state, _ = step(state, setup.batches.batch(i))
    params = leaves(state.params)
    expected = [0.75 * e + 0.25 * p for e, p in zip(expected, params)]
  for got, want in zip(leaves(state.ema_params), expected):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  assert any(not np.allclose(e, p) for e, p in zip(expected, params))
  assert steps.eval_params(state) is state.ema_params
  assert helpers.tiny_config('global', 'general').train.ema_decay == 0
  plain = train.build(helpers.tiny_config('global', 'general')).state
  assert plain.ema_params is None and steps.eval_params(plain) is plain.params


def test_micro_batches_interleave_the_rows():
  batch = {'source': np.arange(12).reshape(6, 2)}
  micro = steps.micro_batches(batch, 3)['source']
  assert micro.shape == (3, 2, 2)
  np.testing.assert_array_equal(micro[1], [[2, 3], [8, 9]])  # rows 1 and 4


def test_dropout_masks_come_from_the_configured_generator():
  """train.dropout_rng picks the generator; without dropout it is unused."""
  batch = None
  losses = {}
  for dropout in (0.0, 0.3):
    setup = train.build(
        helpers.tiny_config('global', 'general', dropout=dropout)
    )
    batch = setup.batches.batch(0) if batch is None else batch
    for rng in ('philox2x32', 'threefry2x32'):
      # The step reads the generator from its config (nothing else does).
      config = setup.config.copy_and_resolve_references()
      config.train.dropout_rng = rng
      step = functools.partial(
          steps.train_step,
          model=setup.model,
          optimizer=setup.optimizer,
          config=config,
      )
      if dropout:
        jaxpr = str(jax.make_jaxpr(step)(setup.state, batch))
        other = ({'philox2x32', 'threefry2x32'} - {rng}).pop()
        key_type = lambda impl: str(jax.random.key(0, impl=impl).dtype)
        assert key_type(rng) in jaxpr and key_type(other) not in jaxpr
      _, metrics = jax.jit(step)(setup.state, batch)
      losses[dropout, rng] = float(metrics['loss_sum'])
  assert losses[0.0, 'philox2x32'] == losses[0.0, 'threefry2x32']
  assert losses[0.3, 'philox2x32'] != losses[0.3, 'threefry2x32']


def test_logged_rates_leave_out_validation_but_keep_the_steps_before_it(
    monkeypatch,
):
  # 10 steps of 0.1 s and 100 tokens; a 5 s validation after step 5, between
  # two log lines: 1,000 tokens/s, not the 2,000 a clock restarted after the
  # validation (and blind to steps 1-5) would report.
  now = [0.0]
  monkeypatch.setattr(progress_lib.time, 'perf_counter', lambda: now[0])
  record = {'loss_sum': 1.0, 'tokens': 100.0, 'grad_norm': 1.0}
  progress = progress_lib.Progress(lambda metrics: metrics)
  for step in range(1, 11):
    now[0] += 0.1
    progress.push(step, record, 1)
    if step == 5:
      progress.flush()
      progress.pause()
      now[0] += 5.0
      progress.resume()
  progress.flush()
  summary = progress.summary(10, 1, 100, lambda step: 1.0)
  assert summary['tokens_per_sec'] == pytest.approx(1000.0)
  assert progress.seconds_per_step == pytest.approx(0.1)


def test_an_empty_choice_is_spelled_out_in_the_advice():
  # decode.alignments is '' (off) or 'pharaoh': "use one of , pharaoh" said
  # nothing of the first.
  with pytest.raises(errors.ConfigError, match="use one of '', pharaoh"):
    errors.one_of('', 'pharaoh')('decode.alignments', 'pharoah')


def test_the_eta_is_steps_times_step_time_plus_validations_left():
  # eval_every 100 to step 250: validations at 100, 200 and 250 (the last).
  left = {s: progress_lib.validations_left(s, 250, 100) for s in (1, 101, 251)}
  assert left == {1: 3, 101: 2, 251: 0}
  for num_steps, every in ((250, 100), (200, 100), (7, 3), (5, 1), (4, 9)):
    for step in range(1, num_steps + 2):  # against counting them one by one
      counted = sum(
          s % every == 0 or s == num_steps for s in range(step, num_steps + 1)
      )
      assert progress_lib.validations_left(step, num_steps, every) == counted
  # At step 120: 130 steps of 0.5 s and 2 validations of 20 s to come.
  assert progress_lib.seconds_left(120, 250, 100, 0.5, 20.0) == 65.0 + 40.0
  assert progress_lib.seconds_left(120, 250, 100, 0.5, None) == 65.0


def test_the_eta_times_steps_and_validations_apart():
  now = [0.0]
  eta = progress_lib.Eta(1000, eval_every=100, clock=lambda: now[0])
  now[0] = 60.0  # step 50: a window that compiled (1.2 s/step); no validation
  assert eta.seconds_left(50, 1.2) == pytest.approx(950 * 1.2)
  assert eta.steps_only(50)
  now[0] = 65.0  # step 100: 0.1 s/step, its validation still to come
  assert eta.seconds_left(100, 0.1) == pytest.approx(900 * 0.1)
  with eta.validation():  # the first, compiling the decoder
    now[0] += 25.0
  assert not eta.steps_only(100)
  now[0] = 100.0  # step 150: 15 s of steps since step 50, a 25 s validation
  # 850 steps of 0.15 s, validations at 200, ..., 1000 of 25 s.
  assert eta.seconds_left(150, 0.3) == pytest.approx(850 * 0.15 + 9 * 25.0)
  with eta.validation():  # step 200: 5 s; the compiling first one left out
    now[0] += 5.0
  now[0] = 130.0  # step 250: 40 s of steps in 200
  assert eta.seconds_left(250, 0.3) == pytest.approx(750 * 0.2 + 8 * 5.0)
  now[0] = 200.0
  assert eta.seconds_left(1000, 0.1) == pytest.approx(5.0)  # the last one
  assert progress_lib.Eta(10, 100).steps_only(10)  # the last step validates


def test_decode_step_on_a_training_run_is_refused_before_it(tmp_path):
  config = defaults.get_config('tiny')
  config.decode.step = 2
  with pytest.raises(
      errors.ConfigError, match='decode.step=2 names a checkpoint'
  ):
    train.train_and_evaluate(config, str(tmp_path / 'w'))
  assert not (tmp_path / 'w').exists()
