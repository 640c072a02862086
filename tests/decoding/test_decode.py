"""Decoding: beam 1 == greedy, batch-size invariance, exactness, scores, EOS and limits."""

import contextlib
import functools
import itertools

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from nmt_jax import attention
from nmt_jax.data import dataset
from nmt_jax.data.vocab import BOS
from nmt_jax.data.vocab import EOS
from nmt_jax.data.vocab import PAD
from nmt_jax.decoding import beam
from nmt_jax.decoding import evaluation
from nmt_jax.decoding import loop
from nmt_jax.decoding import scorers
from nmt_jax.decoding import search
from nmt_jax.model import seq2seq
from tests import helpers


@functools.lru_cache(maxsize=None)
def _setup(
    query='current',
    seed=3,
    kind='global',
    readout='luong',
    score='general',
    **attention,
):
  config = helpers.tiny_config(kind, score, query=query, readout=readout)
  config.model.attention.update(attention)
  model = helpers.make_model(config)
  params = helpers.init_params(model, seed=seed)
  # Sharpen the untrained output distribution so hypotheses differ in interesting ways.
  params = jax.tree_util.tree_map(lambda x: x * 3.0, params)
  return config, model, params


def _sources(seed=0, batch=6, length=6):
  return helpers.random_batch(np.random.default_rng(seed), batch, length, 4)[0]


def _search_fn(model, k=1, alpha=0.0, force_beam=False, **kw):
  """A jitted greedy (k = 1, not `force_beam`) or beam search: (params, source)
  -> its output.

  A new function (traced afresh) per call: reuse it for several sources.
  """
  options = dict(
      ratio=kw.get('ratio', 1.5),
      offset=kw.get('offset', 2),
      gate_table=kw.get('gate_table', 'auto'),
      with_diagnostics=kw.get('with_diagnostics', False),
      unroll=kw.get('unroll', 1),
  )
  if k == 1 and not force_beam:
    return jax.jit(functools.partial(search.greedy_search, model, **options))
  return jax.jit(
      functools.partial(
          beam.beam_search, model, beam_size=k, alpha=alpha, **options
      )
  )


def _greedy(model, params, source, **kw):
  return _search_fn(model, **kw)(params, source)


def _beam(model, params, source, k, alpha, **kw):
  return _search_fn(model, k, alpha, force_beam=True, **kw)(params, source)


def _strip(tokens):
  tokens = list(np.asarray(tokens))
  return (
      tuple(tokens[: tokens.index(EOS) + 1])
      if EOS in tokens
      else tuple(t for t in tokens if t != PAD)
  )


def _sequence_logprobs(model, params, source, hyps):
  """log p(hyp | source) of EOS-terminated hypotheses, by one batched teacher-forced pass."""
  length = max(len(h) for h in hyps)
  target_out = np.array(
      [list(h) + [PAD] * (length - len(h)) for h in hyps], np.int32
  )
  target_in = np.concatenate(
      [np.full((len(hyps), 1), BOS, np.int32), target_out[:, :-1]], 1
  )
  sources = np.repeat(source[None], len(hyps), 0)
  logits = _apply_fn(model)(params, sources, target_in)
  logp = np.take_along_axis(
      np.asarray(jax.nn.log_softmax(logits)), target_out[..., None], -1
  )[..., 0]
  return np.where(target_out != PAD, logp, 0.0).sum(1)


_APPLY = {}


def _apply_fn(model):
  if id(model) not in _APPLY:
    _APPLY[id(model)] = jax.jit(
        lambda p, s, t: model.apply({'params': p}, s, t)[0]
    )
  return _APPLY[id(model)]


@pytest.mark.parametrize('query', ['current', 'previous'])
def test_beam_one_equals_greedy(query):
  _, model, params = _setup(query)
  source = _sources()
  greedy = _greedy(model, params, source)
  beamed = _beam(model, params, source, 1, 0.0)
  for g, b in zip(greedy.tokens, beamed.tokens):
    assert _strip(g) == _strip(b)
  np.testing.assert_allclose(greedy.scores, beamed.scores, rtol=1e-5)


# Each table (the gates; flexible's attention rows; maxout's readout rows)
# once, and greedy and beam search each (they look it up alike).
@pytest.mark.parametrize(
    'k, kind, readout',
    [
        (1, 'global', 'luong'),
        (3, 'flexible', 'luong'),
        (3, 'global', 'bahdanau_maxout'),
    ],
)
def test_the_token_table_decodes_as_the_projections(k, kind, readout):
  config, model, params = _setup(kind=kind, readout=readout)
  source = _sources(batch=5, length=7)
  if k == 1:
    run = lambda table: _greedy(model, params, source, gate_table=table)
  else:
    run = lambda table: _beam(model, params, source, k, 0.6, gate_table=table)
  on, off, auto = run('on'), run('off'), run('auto')
  np.testing.assert_array_equal(on.tokens, off.tokens)
  np.testing.assert_allclose(on.scores, off.scores, rtol=1e-5, atol=1e-6)
  # 10 words < rows x steps: 'auto' takes the table.
  np.testing.assert_array_equal(auto.scores, on.scores)
  # The table holds each embedding row's projections.
  table = model.apply({'params': params}, method=seq2seq.Seq2Seq.token_table)
  decoder = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), params)
  decoder = decoder['decoder']
  embedding = decoder['embed']['embedding']
  expected = {
      'gates': (
          embedding @ decoder['input_proj']['kernel']
          + decoder['input_proj']['bias']
      )
  }
  if kind == 'flexible':  # W_g's rows after the H of h_{t-1}
    w_g = decoder['attention']['strength_hidden']['kernel']
    expected['attention'] = embedding @ w_g[config.model.hidden_size :]
  if readout == 'bahdanau_maxout':
    expected['readout'] = embedding @ decoder['readout_input']['kernel']
  assert set(table) == set(expected)
  for name, want in expected.items():
    np.testing.assert_allclose(table[name], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('k', [1, 3])
def test_decoding_does_not_depend_on_batch_size(k):
  """Nor do the recorded diagnostics: zeros after a row's EOS in both searches
  (greedy recorded the steps a finished row went on running in a batch)."""
  _, model, params = _setup()
  source = _sources(seed=1, batch=5)
  decode_fn = functools.partial(
      _search_fn(model, k, 0.6, with_diagnostics=True), params
  )
  full = decode_fn(source)
  for row in range(source.shape[0]):
    one = decode_fn(source[row : row + 1])
    assert _strip(one.tokens[0]) == _strip(full.tokens[row])
    np.testing.assert_allclose(one.scores[0], full.scores[row], rtol=1e-5)
    for name in ('window', 'weights'):
      np.testing.assert_allclose(
          one.diagnostics[name][0], full.diagnostics[name][row], atol=1e-6
      )
    steps = len(_strip(full.tokens[row]))
    assert not np.any(np.asarray(full.diagnostics['window'][row, steps:]))
  # ... nor on extra source padding.
  padded = np.pad(source, ((0, 0), (0, 3)))
  more = decode_fn(padded)
  for a, b in zip(more.tokens, full.tokens):
    assert _strip(a) == _strip(b)


def _flat_best(live_logp, log_probs, n):
  """NumPy: the n best of live_logp[b, k] + log_probs[b, k, v], ties to the lower flat index."""
  batch, k, vocab = log_probs.shape
  flat = (live_logp[..., None] + log_probs).reshape(batch, k * vocab)
  order = np.stack(
      [np.lexsort((np.arange(k * vocab), -row))[:n] for row in flat]
  )
  return np.take_along_axis(flat, order, 1), order // vocab, order % vocab


@pytest.mark.parametrize(
    'case', ['random', 'ties', 'same_beam_ties', 'dead_beams', 'last_step']
)
def test_best_candidates_equal_one_top_k_over_every_candidate(case):
  """The two-stage selection returns the flat top_k's scores, beams and tokens,
  ties and -inf included."""
  rng = np.random.default_rng(0)
  batch, k, vocab, n = 5, 4, 40, 8
  log_probs = rng.normal(size=(batch, k, vocab)).astype(np.float32)
  live_logp = np.sort(rng.normal(size=(batch, k)), -1)[:, ::-1]
  live_logp = live_logp.astype(np.float32)
  if case == 'ties':  # few values: ties inside, across and at the n-th place
    log_probs = np.round(log_probs).astype(np.float32)
    live_logp = np.round(live_logp).astype(np.float32)
  elif case == 'same_beam_ties':
    # Tokens 3 and 7 tie in beam 0, token 7 ranks first by beam 1's score,
    # and the flat top_k puts (0, 3) before (0, 7).
    log_probs -= 10.0
    live_logp[:] = 0.0
    log_probs[:, 0, [3, 7]] = -1.0
    log_probs[:, 1, 7] = -0.5
  elif case == 'dead_beams':  # the first step: one live hypothesis
    live_logp[:, 1:] = -np.inf
    log_probs[:, :, :2] = -np.inf  # PAD and BOS
  elif case == 'last_step':  # only EOS allowed, or nothing at all (row 0)
    log_probs[:, :, :EOS] = -np.inf
    log_probs[:, :, EOS + 1 :] = -np.inf
    log_probs[0] = -np.inf
    live_logp[1, 2:] = -np.inf
  got = jax.jit(beam.best_candidates, static_argnums=2)(
      jnp.asarray(live_logp), jnp.asarray(log_probs), n
  )
  want = _flat_best(live_logp, log_probs, n)
  for g, w in zip(got, want):
    np.testing.assert_array_equal(np.asarray(g), w)


def test_beam_search_is_exact_when_the_beam_holds_every_prefix():
  """With K >= the number of live prefixes, beam search finds the best hypothesis."""
  _, model, params = _setup()
  source = _sources(seed=2, batch=2)
  alpha, offset = 0.6, 3  # at most 3 tokens: y1 y2 EOS
  symbols = range(4, helpers.VOCAB)
  result = _beam(
      model,
      params,
      source,
      k=len(symbols) ** 2,
      alpha=alpha,
      ratio=0.0,
      offset=offset,
  )
  for row in range(source.shape[0]):
    candidates = (
        [(EOS,)]
        + [(a, EOS) for a in symbols]
        + [(a, b, EOS) for a, b in itertools.product(symbols, symbols)]
    )
    logprobs = _sequence_logprobs(model, params, source[row], candidates)
    scored = [
        (lp / beam.length_penalty(len(c), alpha), c)
        for lp, c in zip(logprobs, candidates)
    ]
    best_score, best = max(scored)
    assert _strip(result.tokens[row]) == best
    np.testing.assert_allclose(float(result.scores[row]), best_score, rtol=1e-4)


def test_beam_scores_are_normalised_log_probs_and_nbest_is_sorted():
  _, model, params = _setup()
  source = _sources(seed=4, batch=3)
  alpha = 0.8
  result = _beam(model, params, source, 4, alpha)
  for row in range(source.shape[0]):
    scores = np.asarray(result.nbest_scores[row])
    assert np.all(
        np.isfinite(scores)
    ), 'the n-best list holds K finished hypotheses'
    assert np.all(np.diff(scores) <= 1e-6)
    hyps = [_strip(h) for h in result.nbest_tokens[row]]
    assert all(h[-1] == EOS for h in hyps)
    logprobs = _sequence_logprobs(model, params, source[row], hyps)
    expected = [
        lp / beam.length_penalty(len(h), alpha) for lp, h in zip(logprobs, hyps)
    ]
    np.testing.assert_allclose(scores, expected, rtol=1e-4)


@pytest.mark.parametrize('k', [1, 3])
def test_length_limit_forces_eos(k):
  config, model, params = _setup()
  # An output layer that never prefers EOS: every hypothesis runs to its limit.
  params = jax.tree_util.tree_map(lambda x: x, params)
  bias = params['decoder']['output']['bias']
  params['decoder']['output']['bias'] = bias.at[EOS].set(-1e4)
  source = _sources(seed=5, batch=4)
  ratio, offset = 1.0, 2
  result = (
      _greedy(model, params, source, ratio=ratio, offset=offset)
      if k == 1
      else _beam(model, params, source, k, 0.6, ratio=ratio, offset=offset)
  )
  lengths = np.sum(source != PAD, axis=1)
  for row in range(source.shape[0]):
    hyp = _strip(result.tokens[row])
    assert len(hyp) == int(np.floor(ratio * lengths[row])) + offset
    assert (
        hyp[-1] == EOS
        and EOS not in hyp[:-1]
        and PAD not in hyp
        and BOS not in hyp
    )
    assert np.all(np.asarray(result.tokens[row][len(hyp) :]) == PAD)


def test_a_row_filling_its_width_gets_the_last_step():
  """The loop bound (per padded width) and each row's limit round alike.

  They did not for ratios such as 1.4 (x 45: 63 in float64, 64 in float32).
  """
  lengths = np.arange(1, 301)
  source = np.where(np.arange(300)[None, :] < lengths[:, None], 5, PAD)
  for ratio in (1.3, 1.4, 1.5, 2.1, 2.3, 0.58):
    limits = np.asarray(loop.length_limits(source, ratio, 2))
    bounds = [loop.max_steps(n, ratio, 2) for n in lengths]
    np.testing.assert_array_equal(limits, bounds, err_msg=str(ratio))


def test_window_statistics_count_live_steps():
  _, model, params = _setup()
  source = _sources(seed=6, batch=4)
  result = _greedy(model, params, source)
  lengths = np.sum(source != PAD, axis=1)
  steps = np.array([len(_strip(t)) for t in result.tokens])
  np.testing.assert_array_equal(result.windows.steps, steps)
  # global attention attends to the sentence and scores all padded positions
  np.testing.assert_allclose(result.windows.window, steps * lengths)
  np.testing.assert_allclose(result.windows.computed, steps * source.shape[1])


def test_diagnostics_follow_the_best_hypothesis():
  _, model, params = _setup()
  source = _sources(seed=7, batch=2)
  fn = jax.jit(
      functools.partial(
          beam.beam_search,
          model,
          beam_size=3,
          alpha=0.0,
          ratio=1.5,
          offset=2,
          with_diagnostics=True,
      )
  )
  result = fn(params, source)
  weights = np.asarray(result.diagnostics['weights'])  # [B, T, S]
  # Recompute the attention of the returned hypotheses by teacher forcing
  # (one batch, PAD after each; a step reads only the steps before it).
  hyps = [_strip(tokens) for tokens in result.tokens]
  target_in = np.full((len(hyps), max(map(len, hyps))), PAD, np.int32)
  for row, hyp in enumerate(hyps):
    target_in[row, : len(hyp)] = [BOS] + list(hyp[:-1])
  _, diagnostics = jax.jit(
      lambda p, s, t: model.apply({'params': p}, s, t, with_weights=True)
  )(params, source, target_in)
  for row, hyp in enumerate(hyps):
    np.testing.assert_allclose(
        weights[row, : len(hyp)],
        diagnostics['weights'][row, : len(hyp)],
        atol=1e-5,
    )


def _copy_split(sources):
  """A Split whose targets are its sources, without texts."""
  return dataset.Split(
      source=sources,
      target=sources,
      source_text=[''] * len(sources),
      target_text=[''] * len(sources),
  )


def _greedy_fn(model):
  return jax.jit(
      functools.partial(search.greedy_search, model, ratio=1.5, offset=2)
  )


def test_decode_split_matches_direct_decoding_and_times_the_fastest_pass():
  _, model, params = _setup()
  rng = np.random.default_rng(8)
  sources = [
      np.append(rng.integers(4, 12, size=n), EOS).astype(np.int32)
      for n in (3, 7, 5, 2, 6)
  ]
  split = _copy_split(sources)
  decode_fn = _greedy_fn(model)
  nbest, stats = evaluation.decode_split(
      decode_fn,
      params,
      split,
      batch_size=2,
      boundaries=[4, 8],
      timing_repeats=3,
  )
  assert len(stats['decode_seconds_all']) == 3
  assert stats['decode_seconds'] == min(stats['decode_seconds_all'])
  for source, (hyp,) in zip(
      sources, nbest
  ):  # batching, padding and sorting change nothing
    alone = _strip(_greedy(model, params, source[None]).tokens[0])
    expected = alone[:-1] if alone and alone[-1] == EOS else alone
    assert tuple(hyp.ids) == expected


def test_the_profiled_decoding_pass_is_not_a_timed_one(monkeypatch, tmp_path):
  # Tracing slowed the pass x2-3, and with one timing repeat its time was
  # the decode_ms_per_sentence reported.
  _, model, params = _setup()
  sources = [np.asarray([5, 6, 7, EOS], np.int32)] * 3
  split = _copy_split(sources)
  tracing, timed_while_tracing, traces = [False], [], []

  @contextlib.contextmanager
  def trace(directory, **kwargs):
    del kwargs
    traces.append(directory)
    tracing[0] = True
    yield
    tracing[0] = False

  timed = evaluation.timing.timed_with_cpu

  def timed_with_cpu(fn):
    timed_while_tracing.append(tracing[0])
    return timed(fn)

  monkeypatch.setattr(evaluation.jax.profiler, 'trace', trace)
  monkeypatch.setattr(evaluation.timing, 'timed_with_cpu', timed_with_cpu)
  decode_fn = _greedy_fn(model)
  _, stats = evaluation.decode_split(
      decode_fn,
      params,
      split,
      batch_size=2,
      boundaries=[8],
      profile_dir=str(tmp_path),
  )
  assert traces == [str(tmp_path)]
  assert timed_while_tracing == [False]
  assert len(stats['decode_seconds_all']) == 1


# Every kind once and every score once: a score reads a grouped cache alike
# over all positions (global) and over a window (flexible, local).
@pytest.mark.parametrize(
    'kind, score, attention_fields',
    [
        ('global', 'general', {}),
        ('global', 'location', {}),
        ('memory', 'general', {}),
        ('flexible', 'concat', {'tau': 1.0, 'sigma': 1.0}),
        ('local_m', 'general', {'window': 2}),
        ('local_p', 'location', {'window': 2}),
    ],
)
def test_beam_search_reads_a_grouped_cache_as_the_repeated_one(
    kind, score, attention_fields, monkeypatch
):
  # GROUPED_CACHE kinds get one cache row per sentence for its K hypotheses.
  _, model, params = _setup(kind=kind, score=score, **attention_fields)
  source = _sources(batch=5, length=7)
  single = scorers.Single(model)

  def run():
    # The beam cache's shapes (traced, not run).
    beam_cache = jax.eval_shape(
        lambda p, s: single.beam_cache(single.encode(p, s)[0], 3),
        params,
        source,
    )
    rows = {x.shape[0] for x in jax.tree_util.tree_leaves(beam_cache)}
    return rows, _beam(model, params, source, 3, 0.6, with_diagnostics=True)

  rows, grouped = run()
  assert rows == {5}
  monkeypatch.setattr(attention.get(kind), 'GROUPED_CACHE', False)
  rows, repeated = run()
  assert rows == {15}
  np.testing.assert_array_equal(grouped.nbest_tokens, repeated.nbest_tokens)
  np.testing.assert_allclose(
      grouped.nbest_scores, repeated.nbest_scores, rtol=1e-5
  )
  for name, value in repeated.nbest_diagnostics.items():
    if name == 'computed':
      # Windowed kinds score the union of a sentence's windows, which holds
      # each hypothesis's own.
      computed = grouped.nbest_diagnostics[name]
      assert np.all(computed >= repeated.nbest_diagnostics['window'])
      continue
    np.testing.assert_allclose(
        grouped.nbest_diagnostics[name], value, rtol=1e-5, atol=1e-6
    )
  assert 'weights' in repeated.nbest_diagnostics


def _count_in_loops(jaxpr, primitive, inside=False):
  """How many `primitive` equations the while-loop bodies of a jaxpr hold."""
  count = 0
  for eqn in jaxpr.eqns:
    count += inside and eqn.primitive.name == primitive
    loop = eqn.primitive.name == 'while'
    for sub in jax.extend.core.jaxprs_in_params(eqn.params):
      count += _count_in_loops(sub, primitive, inside or loop)
  return count


@pytest.mark.parametrize('k', [1, 3])
def test_unrolled_search_loops_decode_as_the_plain_ones(k):
  # 12 steps at most (7 source positions, ratio 1.5, offset 2), 5 per
  # iteration: sentences stop inside an iteration and the last is partial.
  _, model, params = _setup()
  source = _sources(batch=5, length=7)
  run = lambda unroll: (
      _greedy(model, params, source, with_diagnostics=True, unroll=unroll)
      if k == 1
      else _beam(
          model, params, source, k, 0.6, with_diagnostics=True, unroll=unroll
      )
  )
  plain, unrolled = run(1), run(5)
  for name in ('tokens', 'nbest_tokens'):
    np.testing.assert_array_equal(getattr(unrolled, name), getattr(plain, name))
  np.testing.assert_allclose(unrolled.scores, plain.scores, rtol=1e-6)
  for got, want in zip(unrolled.windows, plain.windows):
    np.testing.assert_allclose(got, want, rtol=1e-6)
  for name, value in plain.diagnostics.items():
    np.testing.assert_allclose(
        unrolled.diagnostics[name], value, rtol=1e-5, atol=1e-6, err_msg=name
    )
  # The loop body runs 5 decoder steps (each has one output softmax).
  decode_fn = search.greedy_search if k == 1 else beam.beam_search
  kwargs = {} if k == 1 else dict(beam_size=k, alpha=0.6)
  jaxprs = [
      jax.make_jaxpr(
          functools.partial(
              decode_fn, model, ratio=1.5, offset=2, unroll=unroll, **kwargs
          )
      )(params, source).jaxpr
      for unroll in (1, 5)
  ]
  # Greedy picks with loop.argmax (a reduce_min over indices a step).
  steps = [
      _count_in_loops(j, 'reduce_min' if k == 1 else 'top_k') for j in jaxprs
  ]
  assert steps[1] == 5 * steps[0] > 0, steps


def test_an_unrolled_loop_stops_where_the_plain_one_does():
  # Steps past the condition are discarded, not only harmless ones.
  cond = lambda c: c[0] < 7
  body = lambda c: (c[0] + 1, c[1] * 2.0)
  for unroll in (1, 2, 3, 7, 8):
    i, x = jax.lax.while_loop(cond, loop.unrolled(cond, body, unroll), (0, 1.0))
    assert (int(i), float(x)) == (7, 128.0), unroll


def test_argmax_is_jnps_first_maximum():
  rng = np.random.default_rng(0)
  # Few distinct values: many ties, which both must break to the first.
  x = rng.integers(0, 4, (50, 37)).astype(np.float32)
  x[3] = -np.inf  # a row with nothing allowed
  x[4, [5, 9]] = np.inf
  np.testing.assert_array_equal(loop.argmax(x), jnp.argmax(x, -1))
  assert loop.argmax(x).dtype == jnp.int32
  x[7, 2] = np.nan  # a broken row still gives a token of the vocabulary
  assert 0 <= int(loop.argmax(x)[7]) < 37
