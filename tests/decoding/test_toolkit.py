"""Scoring, n-best lists, ensembles, averaging, alignments, plateaus, SGD.

Each against an independent reference: the training loss, NumPy, the
single model an ensemble of copies must reproduce.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax import average
from nmt_jax import data
from nmt_jax.config import defaults
from nmt_jax.config import validation
from nmt_jax.data import batching
from nmt_jax.data import dataset
from nmt_jax.data.vocab import EOS
from nmt_jax.data.vocab import UNK
from nmt_jax.decoding import evaluation
from nmt_jax.decoding import outputs
from nmt_jax.decoding import scorers
from nmt_jax.decoding import search
from nmt_jax.model import seq2seq
from nmt_jax.system import parallel
from nmt_jax.system import profiling
from nmt_jax.training import plateau
from nmt_jax.training import steps
from nmt_jax.workdir import run_config
from nmt_jax.workdir import writers
from tests import helpers


@functools.lru_cache(maxsize=None)
def _task():
  return data.load_task(helpers.tiny_config().data, seed=0)


@functools.lru_cache(maxsize=None)
def _model(kind='global', seed=0, **attention):
  """(config, model, params), built once per arguments (none changes them)."""
  config = helpers.tiny_config(kind, 'concat')
  for key, value in attention.items():
    config.model.attention[key] = value
  model = seq2seq.create_model(config, _task())
  return config, model, helpers.init_params(model, seed)


# ----------------------------------------------------------------- scoring


def test_scores_are_the_teacher_forced_loss_whatever_the_batch():
  config, model, params = _model()
  task = _task()
  evaluator = evaluation.Evaluator(config, model, task, parallel.make_mesh())
  by_one = evaluator.token_log_probs(params, task.eval, 1)
  by_eight = evaluator.token_log_probs(params, task.eval, 8)
  for a, b, target in zip(by_one, by_eight, task.eval.target):
    assert len(a) == len(target)  # EOS included
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  # The loss of training's eval_step (jitted, as training runs it) over the
  # same pairs.
  eval_step = jax.jit(functools.partial(steps.eval_step, model=model))
  boundaries = batching.bucket_boundaries(task.max_length, 2)
  loss_sum = tokens = 0.0
  for _, batch in batching.eval_batches(task.eval, 8, boundaries):
    out = eval_step(params, batch)
    loss_sum, tokens = loss_sum + out['loss_sum'], tokens + out['tokens']
  total = sum(float(np.sum(v)) for v in by_one)
  np.testing.assert_allclose(-total, loss_sum, rtol=1e-5)
  np.testing.assert_allclose(
      evaluator.loss(params, task.eval), loss_sum / tokens, rtol=1e-5
  )


def test_score_line_sums_and_averages_the_token_log_probs():
  line = outputs.score_line([-1.0, -2.0, -0.5])
  total, mean, each = line.split('\t')
  assert float(total) == -3.5 and float(mean) == pytest.approx(-3.5 / 3)
  assert each.split() == ['-1.0000', '-2.0000', '-0.5000']


# ----------------------------------------------------------------- n-best


def test_nbest_lists_start_with_the_best_and_fall():
  config, model, params = _model()
  task = _task()
  evaluator = evaluation.Evaluator(config, model, task, parallel.make_mesh())
  decoded = evaluator.decode(params, task.eval, beam_size=3)
  for text, nbest in zip(decoded.texts, decoded.nbest):
    assert 1 <= len(nbest) <= 3
    assert task.target_vocab.decode(nbest[0].ids) == text
    scores = [h.score for h in nbest]
    assert scores == sorted(scores, reverse=True)
  aligned = evaluator.decode(params, task.eval, beam_size=3, alignments=True)
  assert aligned.texts == decoded.texts
  for nbest in aligned.nbest:  # every hypothesis has its own alignment
    for hypothesis in nbest:
      assert hypothesis.alignment.shape == hypothesis.ids.shape
  greedy = evaluator.decode(params, task.eval, beam_size=1)
  assert all(len(n) == 1 for n in greedy.nbest)
  assert (
      outputs.nbest_line(3, 'a b', -1.5, None)
      == '3 ||| a b ||| F0= -1.500000 ||| -1.500000'
  )
  assert outputs.nbest_line(0, 'a', -2.0, '0-0').endswith(
      ' ||| -2.000000 ||| 0-0'
  )


# ----------------------------------------------------------------- ensembles


@pytest.mark.parametrize('beam_size', [1, 3])
def test_ensembles_of_one_model_or_two_copies_decode_as_the_model(beam_size):
  config, model, params = _model('memory', num_memory=3)
  source = jnp.asarray(batching.make_batch(_task().eval, range(6), 9)['source'])
  single = search.make_decode_fn(model, config.decode, beam_size)(
      params, source
  )
  for members in (1, 2):
    ensemble = scorers.Ensemble([model] * members)
    out = search.make_decode_fn(ensemble, config.decode, beam_size)(
        (params,) * members, source
    )
    np.testing.assert_array_equal(out.tokens, single.tokens)
    np.testing.assert_allclose(out.scores, single.scores, rtol=1e-6)
    # The ensemble attends with every member.
    np.testing.assert_allclose(
        out.windows.window, members * single.windows.window
    )


def test_an_ensemble_step_averages_its_members():
  # Both averages (scorers.AVERAGES) against one NumPy reference.
  _, first, first_params = _model('global', seed=1)
  _, second, second_params = _model('memory', seed=2, num_memory=3)
  source = jnp.asarray(batching.make_batch(_task().eval, range(4), 9)['source'])
  params = (first_params, second_params)
  tokens = jnp.full((4,), 5, jnp.int32)
  members = []
  for member, p in zip((first, second), params):
    c, s = scorers.Single(member).encode(p, source)
    decode_step = jax.jit(
        lambda p, s, c, member=member: member.apply(
            {'params': p},
            s,
            c,
            tokens,
            True,
            method=seq2seq.Seq2Seq.decode_step,
        )
    )
    _, logits, _ = decode_step(p, s, c)
    logits = np.asarray(logits, np.float64)
    members.append(logits - np.log(np.exp(logits).sum(-1, keepdims=True)))
  expected = {
      'log_probs': np.mean(members, axis=0),
      'probs': np.log(np.mean(np.exp(members), axis=0)),
  }
  assert set(expected) == set(scorers.AVERAGES)
  lengths = np.sum(np.asarray(source) != 0, axis=1)
  for average_kind, want in expected.items():
    ensemble = scorers.Ensemble([first, second], average_kind)
    assert ensemble.lead == 0
    cache, state = ensemble.encode(params, source)
    # The members look their input gates up (gate table); the reference
    # above computes them.
    prepared = ensemble.prepare(params, lookups=1, gate_table='on')
    assert all(table is not None for _, table in prepared)
    # Jitted, as decoding runs it.
    _, log_probs, diagnostics = jax.jit(
        functools.partial(ensemble.step, with_weights=True)
    )(prepared, state, cache, tokens)
    np.testing.assert_allclose(log_probs, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(diagnostics['window'], lengths + 3)
    assert diagnostics['weights'].shape == source.shape  # the global member's


def test_an_ensembles_scores_are_a_distribution():
  # The mean of two members' log-probabilities summed to 0.65 over the
  # vocabulary: scores and the evaluation loss read it as log-probabilities.
  _, first, first_params = _model('global', seed=1)
  _, second, second_params = _model('memory', seed=2, num_memory=3)
  batch = batching.make_batch(_task().eval, range(4), 9)
  source, target_in = (jnp.asarray(batch[k]) for k in ('source', 'target_in'))
  params = (first_params, second_params)
  members = [
      np.asarray(scorers.Single(m).log_probs(p, source, target_in), np.float64)
      for m, p in zip((first, second), params)
  ]
  expected = {  # NumPy: each average, normalised over the vocabulary
      'log_probs': np.mean(members, axis=0),
      'probs': np.log(np.mean(np.exp(members), axis=0)),
  }
  for average_kind, want in expected.items():
    want = want - np.log(np.exp(want).sum(-1, keepdims=True))
    ensemble = scorers.Ensemble([first, second], average_kind)
    got = jax.jit(ensemble.log_probs)(params, source, target_in)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.exp(got).sum(-1), 1.0, rtol=1e-5)
  # Unnormalised, the geometric mean is not one (the test can fail).
  assert np.exp(expected['log_probs']).sum(-1).max() < 1 - 1e-4


# ----------------------------------------------------------------- averaging


def test_the_mean_of_identical_trees_is_the_tree_bit_for_bit():
  _, _, params = _model()
  host = jax.device_get(params)
  same = average.mean_tree([host] * 3)
  for a, b in zip(
      jax.tree_util.tree_leaves(same), jax.tree_util.tree_leaves(host)
  ):
    np.testing.assert_array_equal(a, b)
    assert a.dtype == b.dtype
  _, _, other = _model(seed=1)
  mean = average.mean_tree([host, jax.device_get(other)])
  for m, a, b in zip(
      *(jax.tree_util.tree_leaves(t) for t in (mean, host, other))
  ):
    expected = (np.float64(a) + np.float64(b)) / 2
    np.testing.assert_array_equal(m, expected.astype(np.float32))


# ----------------------------------------------------------------- alignments


def test_pharaoh_alignments_skip_eos_and_undo_reversal():
  # Target token 2 looks at the source EOS (position 3): no link.
  positions = outputs.source_positions([0, 2, 3, 1], 3, reversed_source=False)
  assert outputs.pharaoh(positions) == '0-0 2-1 1-3'
  reversed_positions = outputs.source_positions([2, 0, 3], 3, True)
  assert list(reversed_positions) == [0, 2, -1]


def test_unknown_words_take_their_aligned_source_word():
  words = outputs.replace_unk(
      [7, UNK, UNK, UNK],
      ['the', '<unk>', '<unk>', '<unk>'],
      [0, 2, -1, 9],
      ['Der', 'Hund', 'Zeus'],
  )
  # Aligned to 'Zeus'; unaligned and out-of-range links keep <unk>.
  assert words == ['the', 'Zeus', '<unk>', '<unk>']


def test_memory_alignments_are_the_argmax_of_beta_alpha():
  # softmax_time: alpha sums to 1 over the source, so beta alpha^T does too.
  config, model, params = _model(
      'memory', num_memory=3, encoder_scoring='softmax_time'
  )
  source = batching.make_batch(_task().eval, range(6), 9)['source']
  out = search.make_decode_fn(
      model,
      config.decode,
      1,
      with_diagnostics=True,
      alignments=True,
      attention_weights=True,
  )(params, jnp.asarray(source))
  cache, _ = jax.jit(
      functools.partial(model.apply, method=seq2seq.Seq2Seq.encode)
  )({'params': params}, jnp.asarray(source))
  alpha = np.asarray(cache['alpha'])  # [B, S, K]
  beta = np.asarray(out.diagnostics['weights'])  # [B, T, K]
  soft = np.einsum('btk,bsk->bts', beta, alpha)
  expected = np.argmax(soft, axis=-1)
  steps_taken = np.asarray(out.tokens) != 0
  np.testing.assert_array_equal(
      np.asarray(out.diagnostics['alignment'])[steps_taken],
      expected[steps_taken],
  )
  # Soft alignments: beta alpha^T itself on the steps taken, zeros after EOS
  # and on the source's padding; each step's row sums to 1.
  attention = np.asarray(out.diagnostics['attention'])  # [B, T, S]
  assert attention.dtype == np.float32
  np.testing.assert_allclose(
      attention, np.where(steps_taken[..., None], soft, 0.0), atol=1e-6
  )
  padding = (source == 0)[:, None, :]  # [B, 1, S]
  assert padding.any() and not np.any(np.where(padding, attention, 0.0))
  np.testing.assert_allclose(
      attention.sum(-1), steps_taken.astype(np.float32), atol=1e-5
  )


@pytest.mark.parametrize('beam_size', [1, 3])
def test_soft_alignments_are_distributions_with_the_hard_links_as_argmax(
    beam_size,
):
  config, model, params = _model()
  task = _task()
  evaluator = evaluation.Evaluator(config, model, task, parallel.make_mesh())
  decoded = evaluator.decode(
      params,
      task.eval,
      beam_size,
      limit=12,
      alignments=True,
      attention_weights=True,
  )
  plain = evaluator.decode(params, task.eval, beam_size, limit=12)
  assert decoded.texts == plain.texts  # recording the weights changes nothing
  for i, nbest in enumerate(decoded.nbest):
    best, length = nbest[0], len(task.eval.source[i])
    matrix = decoded.attention(i)
    # Rows: the hypothesis's tokens and EOS; columns: the source's and EOS.
    assert matrix.shape == (len(best.ids) + 1, length)
    assert matrix.dtype == np.float32
    np.testing.assert_allclose(matrix.sum(1), 1.0, atol=1e-5)
    # The best hypothesis's (beam search carries it with the hypothesis).
    np.testing.assert_array_equal(
        np.argmax(matrix[:-1], axis=1), best.alignment
    )
    # data.reverse_source: the words' columns mirrored, EOS's last.
    order = [*range(length - 2, -1, -1), length - 1]
    np.testing.assert_array_equal(
        decoded.attention(i, reverse=True), matrix[:, order]
    )
    assert all(h.attention is None for h in nbest[1:])


# ----------------------------------------------------------------- reversal


def test_source_reversal_keeps_eos_last_and_is_its_own_inverse():
  rows = [np.array([4, 5, 6, EOS]), np.array([EOS]), np.array([7, 8, EOS])]
  split = dataset.Split(rows, rows, ['a'] * 3, ['a'] * 3)
  ragged = dataset.Split(dataset.Ragged.from_rows(rows), rows, [], [])
  expected = [[6, 5, 4, EOS], [EOS], [8, 7, EOS]]
  for s in (split, ragged):
    reversed_split = dataset.reverse_sources(s)
    assert [list(r) for r in reversed_split.source] == expected
    again = dataset.reverse_sources(reversed_split)
    assert [list(r) for r in again.source] == [list(r) for r in rows]
    assert list(reversed_split.target[0]) == [4, 5, 6, EOS]  # targets stay


def test_reverse_source_reaches_every_split_and_the_identity():
  config = helpers.tiny_config()
  config.data.reverse_source = True
  task = data.load_task(config.data, seed=0)
  plain = _task()
  for a, b in zip(task.train.source[:20], plain.train.source[:20]):
    np.testing.assert_array_equal(a, np.append(b[:-1][::-1], EOS))
  assert run_config.identity_fields(config)['data.reverse_source'] is True


def test_position_encodings_length_is_part_of_the_models_identity():
  # S of memory attention's position encodings changes every output: a
  # workdir evaluated with another data.max_length (which sets it) is another
  # model. Without encodings the field is unused and may differ.
  def identity(encoding, max_length):
    config = defaults.get_config('tiny')
    config.model.attention.kind = 'memory'
    config.model.attention.position_encoding = encoding
    config.data.max_length = max_length
    return run_config.identity_fields(validation.resolve(config))

  key = 'model.attention.max_source_length'
  assert identity('renorm', 8)[key] == 9
  assert identity('renorm', 8) != identity('renorm', 200)
  assert key not in identity('none', 8)
  assert identity('none', 8) == identity('none', 200)


def test_the_identity_holds_the_vocabulary_fields_the_task_uses():
  def identity(name, vocab_size=16_000, num_symbols=6, gate_table='auto'):
    config = defaults.get_config('tiny')
    config.data.name = name
    config.data.vocab.size = vocab_size
    config.data.num_symbols = num_symbols
    config.model.gate_table = gate_table
    return run_config.identity_fields(config)

  # An embedded task's vocabulary is its symbols: data.vocab.* is unused.
  assert identity('copy') == identity('copy', vocab_size=99)
  assert identity('copy') != identity('copy', num_symbols=7)
  # A corpus's vocabulary is data.vocab.*; data.num_symbols is unused.
  corpus = 'text:/corpus/train'
  assert identity(corpus) == identity(corpus, num_symbols=7)
  assert identity(corpus) != identity(corpus, vocab_size=99)
  # A speed switch (the same numbers) is not part of it.
  assert identity('copy') == identity('copy', gate_table='off')


# ----------------------------------------------------------------- training


def _train_config(**train):
  config = defaults.get_config('tiny')
  for key, value in train.items():
    config.train[key] = value
  return validation.resolve(config).train


def test_plateau_decays_and_stops_after_its_patience():
  tracker = plateau.Plateau(
      _train_config(
          plateau_decay=0.5, plateau_patience=2, early_stopping_patience=3
      )
  )
  events = [
      tracker.update(step, {'bleu': bleu})
      for step, bleu in enumerate([1, 2, 2, 2, 3, 3, 3, 3])
  ]
  assert events == [
      (False, False),
      (False, False),
      (False, False),
      (True, False),  # two validations without a better BLEU
      (False, False),  # better: the counts start again
      (False, False),
      (True, False),
      (False, True),  # three without: stop
  ]
  assert tracker.scale == 0.25 and tracker.best_step == 4
  loss = plateau.Plateau(
      _train_config(
          plateau_metric='loss', plateau_decay=0.5, plateau_patience=1
      )
  )
  assert loss.update(0, {'loss': 2.0}) == (False, False)
  assert loss.update(1, {'loss': 1.0}) == (False, False)  # lower is better
  assert loss.update(2, {'loss': 1.5}) == (True, False)
  replayed = plateau.Plateau(_train_config(plateau_decay=0.5))
  records = [
      {'step': s, 'split': 'valid', 'bleu': b}
      for s, b in [(2, 5.0), (4, 4.0), (6, 4.0), (8, 1.0)]
  ] + [{'step': 4, 'split': 'train', 'loss': 1.0}]
  replayed.replay(records, until=6)
  assert (replayed.scale, replayed.since_best) == (0.5, 2)


def test_plateau_min_delta_counts_only_gains_above_it():
  """Gains of at most train.plateau_min_delta are not improvements: the
  counts go on from the last value that improved by more, in both metrics'
  directions, and 0 keeps counting any gain."""
  for metric, sign in (('loss', -1.0), ('bleu', 1.0)):
    config = _train_config(
        plateau_metric=metric,
        plateau_decay=0.5,
        plateau_patience=1,
        early_stopping_patience=3,
        plateau_min_delta=0.01,
    )
    tracker = plateau.Plateau(config)
    # 1.0, then gains of 0.004 twice (0.008 in all: not more than
    # min_delta), then 0.011 over the counted best, then 0.004 at a time.
    values = [1.0, 1.004, 1.008, 1.011, 1.015, 1.019, 1.0205]
    events = [
        tracker.update(step, {metric: 1.0 + sign * (v - 1.0)})
        for step, v in enumerate(values)
    ]
    assert events == [
        (False, False),
        (True, False),
        (True, False),
        (False, False),  # 0.011 above 1.0: better
        (True, False),
        (True, False),
        (True, True),  # three small gains in a row (0.0095 in all): stop
    ]
    assert tracker.best_step == 3
    assert tracker.best == pytest.approx(1.0 + sign * 0.011)
    any_gain = plateau.Plateau(
        _train_config(plateau_metric=metric, early_stopping_patience=3)
    )
    for step, v in enumerate(values):
      any_gain.update(step, {metric: 1.0 + sign * (v - 1.0)})
    assert (any_gain.best_step, any_gain.since_best) == (6, 0)


def test_a_resumed_plateau_decays_to_the_same_factor():
  """The factor is kept as the checkpoint's float32: a resume from it goes on
  bit for bit (in float64 0.7 * 0.7 gave 0.49, the resumed run 0.48999998)."""
  config = _train_config(plateau_decay=0.7, plateau_patience=1)
  uninterrupted, first = plateau.Plateau(config), plateau.Plateau(config)
  for step in range(1, 5):
    uninterrupted.update(step, {'bleu': 1.0})
  for step in range(1, 3):
    first.update(step, {'bleu': 1.0})
  resumed = plateau.Plateau(config)
  resumed.replay(
      [{'step': s, 'split': 'valid', 'bleu': 1.0} for s in (1, 2)], 2
  )
  resumed.scale = float(np.float32(first.scale))  # what the checkpoint holds
  for step in range(3, 5):
    resumed.update(step, {'bleu': 1.0})
  assert resumed.scale == uninterrupted.scale
  assert uninterrupted.scale == float(np.float32(uninterrupted.scale))
  never = plateau.Plateau(config)
  never.update(1, {'bleu': float('nan')})
  assert never.describe().endswith('(none finite yet)')


def _one_update(train_config, scale=None):
  _, model, params = _model()
  optimizer, _ = steps.create_optimizer(train_config, steps_per_epoch=10)
  state = steps.TrainState(
      step=jnp.int32(0), params=params, opt_state=optimizer.init(params)
  )
  if scale is not None:
    state = steps.set_plateau_scale(state, scale)
    assert steps.plateau_scale(state.opt_state) == scale
  grads = jax.tree_util.tree_map(jnp.ones_like, params)
  # Jitted, as the training step runs it.
  updates, _ = jax.jit(optimizer.update)(grads, state.opt_state, params)
  return grads, updates


def test_the_plateau_factor_scales_the_update():
  config = _train_config(plateau_decay=0.5)
  _, full = _one_update(config)
  _, half = _one_update(config, scale=0.5)
  for f, h in zip(*(jax.tree_util.tree_leaves(t) for t in (full, half))):
    np.testing.assert_allclose(h, 0.5 * np.asarray(f), rtol=1e-6)
  assert (
      steps.plateau_scale(
          steps.create_optimizer(_train_config(), 10)[0].init(
              {'a': jnp.ones(1)}
          )
      )
      == 1.0
  )


def test_sgd_steps_minus_the_learning_rate_times_the_clipped_gradient():
  config = _train_config(optimizer='sgd', learning_rate=0.3, clip_norm=5.0)
  grads, updates = _one_update(config)
  # In NumPy (float64): the global norm of the gradient, above clip_norm.
  grads = [np.asarray(g, np.float64) for g in jax.tree_util.tree_leaves(grads)]
  norm = np.sqrt(sum(np.sum(g**2) for g in grads))
  assert norm > 5.0
  for g, u in zip(grads, jax.tree_util.tree_leaves(updates)):
    np.testing.assert_allclose(u, -0.3 * g * 5.0 / norm, rtol=1e-5)


def test_luong_sgd_preset_halves_every_epoch_after_the_fifth():
  config = defaults.get_config('luong_sgd')
  t = validation.resolve(config).train
  assert (t.optimizer, t.learning_rate, t.clip_norm, t.num_epochs) == (
      'sgd',
      1.0,
      5.0,
      10.0,
  )
  schedule = steps.learning_rate_fn(t, steps_per_epoch=10)
  rates = [float(schedule(epoch * 10)) for epoch in range(8)]
  assert rates == [1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.25, 0.125]


def test_a_workdir_without_metrics_has_no_records_to_replay(tmp_path):
  # nmt_jax.average writes no metrics.jsonl; resuming training there with
  # early stopping replays nothing instead of failing.
  assert writers.read_metrics(str(tmp_path)) == []
  tracker = plateau.Plateau(_train_config(early_stopping_patience=2))
  tracker.replay(writers.read_metrics(str(tmp_path)), 100)
  assert not tracker.stopped and tracker.best is None


@pytest.mark.parametrize(
    'first, count, num_steps, start, traced',
    [
        (1, 2, 10, 0, (1, 3)),  # steps 2-3
        (10, 3, 4, 0, None),  # the default step 10 in a 4-step run: a warning
        (2, 5, 4, 0, (2, 4)),  # the window ends with the run
        (10, 3, 20, 11, (11, 13)),  # resumed inside it: the rest of it
        (10, 3, 20, 15, None),  # resumed after it: a warning
    ],
)
def test_the_profiler_traces_the_steps_of_its_window_the_run_reaches(
    monkeypatch, first, count, num_steps, start, traced
):
  # It started only at step == profile_from_step exactly: a short or resumed
  # run wrote no profile and said nothing.
  calls = []
  monkeypatch.setattr(
      profiling.jax.profiler, 'start_trace', lambda *a, **k: calls.append('+')
  )
  monkeypatch.setattr(
      profiling.jax.profiler, 'stop_trace', lambda: calls.append('-')
  )
  warnings = []
  monkeypatch.setattr(
      profiling.logging, 'warning', lambda *a: warnings.append(a[0] % a[1:])
  )
  t = defaults.get_config().train
  t.profile_from_step, t.profile_steps, t.num_steps = first, count, num_steps
  marks = []
  with profiling.Profiler('/unused', t) as profiler:
    for step in range(start, num_steps):
      profiler.before(step)
      marks.append(len(calls))
      profiler.after(step + 1, None)
  if traced is None:
    assert calls == [] and len(warnings) == 1 and 'no profile' in warnings[0]
  else:
    assert calls == ['+', '-'] and not warnings
    # Steps traced: those run while the trace was open.
    inside = [s + 1 for s, n in zip(range(start, num_steps), marks) if n == 1]
    assert (inside[0] - 1, inside[-1]) == traced
