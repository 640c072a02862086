"""benchmarks.op_times: a training step's or decoding call's time by op."""

import json

import pytest

from benchmarks import op_times
from tests import conftest

HLO = """HloModule m

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]{0}) parameter(0)
  %x = f32[4]{0} get-tuple-element(%p), index=1
  %ynn_fusion.1 = f32[4]{0} fusion(%x), kind=kCustom, calls=%f, metadata={op_name="jit(step)/transpose(jvp(M.apply))/M/decoder/transpose(jvp(decoder.loop))/decoder.loop/while/body/closed_call/decoder.step/cell/dot_general"}
  %copy.3 = f32[4]{0} copy(%ynn_fusion.1)
  ROOT %t = (s32[], f32[4]{0}) tuple(%x, %copy.3)
}

ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  %tanh_fusion = f32[4]{0} fusion(%a), kind=kLoop, calls=%g, metadata={op_name="jit(step)/jvp(M.apply)/M/encoder/tanh"}
  %w = (s32[], f32[4]{0}) while(%init), condition=%cond, body=%body
  ROOT %r = f32[4]{0} get-tuple-element(%w), index=1
}
"""


def test_attribute_names_the_innermost_loop_and_the_pass():
  where, what = op_times.attribute(
      'jit(train_step)/transpose(jvp(Seq2Seq.apply))/Seq2Seq/Seq2Seq.encode/'
      'encoder/layer_0/forward/while/body/mul'
  )
  assert (where, what) == ('encoder/layer_0/forward backward', 'mul')
  assert op_times.attribute('jit(step)/jvp(M.apply)/M/embed/gather') == (
      'outside loops',
      'M/embed/gather',
  )


def test_breakdown_sums_op_events_and_skips_loops_and_other_spans():
  # Two steps: the loop ran 3 iterations per step; the `while` span and
  # Python's frames enclose the ops and must not count twice, and another
  # program's op of the same name is not this one's.
  events = [('m', 'w', 500.0), ('', '$train.py:10 step', 900.0)] * 2
  events += [('m', 'ynn_fusion.1', 40.0), ('m', 'copy.3', 10.0)] * 6
  events += [('m', 'tanh_fusion', 100.0), ('jit_init', 'tanh_fusion', 7.0)] * 2
  result = op_times.breakdown(events, HLO, steps=2)
  assert result['traced_ms_per_step'] == pytest.approx(0.25)
  loops = {loop['where']: loop for loop in result['loops']}
  assert set(loops) == {'M/decoder/decoder.loop backward', 'outside loops'}
  backward = loops['M/decoder/decoder.loop backward']
  assert backward['ms_per_step'] == pytest.approx(0.15)
  assert backward['share'] == pytest.approx(0.6)
  # The copy has no metadata: it runs where its loop body's ops run.
  assert backward['matrix_product_share'] == pytest.approx(0.8)
  assert backward['ops'] == 2
  ops = {op['op']: op for op in result['ops']}
  assert ops['ynn_fusion.1']['calls_per_step'] == 3
  assert ops['ynn_fusion.1']['what'] == 'decoder.step/cell/dot_general'
  assert ops['copy.3']['where'] == 'M/decoder/decoder.loop backward'
  assert not ops['tanh_fusion']['matrix_product']
  assert ops['tanh_fusion']['calls_per_step'] == 1
  assert sum(op['share'] for op in result['ops']) == pytest.approx(1.0)


def test_breakdown_says_when_no_event_is_an_op():
  with pytest.raises(RuntimeError, match='no trace event matched'):
    op_times.breakdown([('', '$main.py:1', 5.0)], HLO, steps=1)


def _meta(pid, name):
  return {'ph': 'M', 'pid': pid, 'name': 'process_name', 'args': {'name': name}}


def _op(pid, name, dur, hlo_op=None):
  args = {'hlo_module': 'm', 'hlo_op': hlo_op} if hlo_op else {}
  return {'ph': 'X', 'pid': pid, 'name': name, 'dur': dur, 'args': args}


def test_op_events_take_the_device_ops_where_there_is_a_device():
  # A GPU trace: the host launches each op (a short event naming it), the
  # device runs it under its kernel's name; only the device's time counts.
  gpu = {
      'traceEvents': [
          _meta(1, '/host:CPU'),
          _meta(2, '/device:GPU:0'),
          _op(1, 'ynn_fusion.1', 3.0, hlo_op='ynn_fusion.1'),
          _op(2, 'sm90_xmma_gemm_f32f32', 40.0, hlo_op='ynn_fusion.1'),
          _op(2, 'sm90_xmma_gemm_f32f32', 41.0, hlo_op='ynn_fusion.1'),
          _op(1, '$train.py:10 step', 900.0),
          {'ph': 'M', 'pid': 2, 'name': 'thread_name', 'args': {'name': 's'}},
      ]
  }
  assert op_times.op_events(gpu) == [
      ('m', 'ynn_fusion.1', 40.0),
      ('m', 'ynn_fusion.1', 41.0),
  ]
  # XLA:CPU: the ops are the host's thunks, named after their instruction;
  # events without one keep their own name (and match no instruction).
  cpu = [
      _meta(1, '/host:CPU'),
      _op(1, 'tanh_fusion', 100.0, hlo_op='tanh_fusion'),
      _op(1, 'end: tanh_fusion', 0.5),
  ]
  assert op_times.op_events(cpu) == [
      ('m', 'tanh_fusion', 100.0),
      ('', 'end: tanh_fusion', 0.5),
  ]
  result = op_times.breakdown(op_times.op_events(gpu), HLO, steps=1)
  assert result['traced_ms_per_step'] == pytest.approx(0.081)


def test_bench_ops_needs_a_step():
  result = conftest.run_module(
      'benchmarks.bench',
      'ops',
      '--config=configs/global_general.py:tiny',
      '--steps=0',
      check=False,
  )
  # absl's flag check, before any work: one line, exit 2 (as main).
  assert result.returncode == 2
  (line,) = result.stderr.strip().splitlines()
  assert '--steps=0: 0 is not a positive integer' in line


@pytest.mark.slow
def test_bench_ops_runs_each_decoder_op_once_per_target_position(tmp_path):
  out = tmp_path / 'ops.json'
  printed = conftest.run_module(
      'benchmarks.bench',
      'ops',
      '--config=configs/global_general.py:tiny',
      '--config.model.num_decoder_layers=2',
      '--steps=2',
      '--top=1000',
      f'--json={out}',
  ).stdout
  assert 'ms/step' in printed and 'where: what' in printed
  result = json.loads(out.read_text())['this']
  assert len(result['ops']) > 100  # all of them
  assert result['step_ms'] > 0 and result['traced_ms_per_step'] > 0
  assert sum(loop['share'] for loop in result['loops']) == pytest.approx(1.0)
  wheres = {loop['where'] for loop in result['loops']}
  forward = [w for w in wheres if 'decoder.loop' in w and 'backward' not in w]
  backward = [w for w in wheres if 'decoder.loop' in w and 'backward' in w]
  assert len(forward) == 1 and len(backward) == 1, wheres
  # The decoder's loops step once per target position of the bucket: every
  # op in them ran target_length times per training step.
  in_loops = [op for op in result['ops'] if op['where'] in forward + backward]
  assert in_loops and all(
      op['calls_per_step'] == result['target_length'] for op in in_loops
  )
  # The two stacked layers' gate products: matrix products in the loop.
  cells = [
      op
      for op in in_loops
      if op['where'] == forward[0] and op['what'].endswith('cell/dot_general')
  ]
  assert len(cells) >= 2 and all(op['matrix_product'] for op in cells)


@pytest.mark.slow
@pytest.mark.parametrize(
    'mode, flags, rows',
    # decode.batch_size = 16 hypotheses, or 3 sentences in every mode.
    [('greedy', [], 16), ('beam', ['--sentences_per_batch=3'], 3)],
)
def test_bench_ops_traces_a_search_step_per_source_position(
    tmp_path, mode, flags, rows
):
  out = tmp_path / 'ops.json'
  conftest.run_module(
      'benchmarks.bench',
      'ops',
      '--config=configs/global_general.py:tiny',
      f'--trace={mode}',
      '--steps=2',
      '--top=1000',
      f'--json={out}',
      *flags,
  )
  result = json.loads(out.read_text())['this']
  assert result['trace'].startswith(mode)
  # The longest of the batches with the most real sentences (the copy
  # task's sources fill every batch); the time per sentence is per real one.
  assert result['rows'] == rows and result['sentences'] == rows
  assert result['ms_per_sentence'] == pytest.approx(
      result['step_ms'] / result['sentences']
  )
  assert sum(loop['share'] for loop in result['loops']) == pytest.approx(1.0)
  # EOS is held back until the reference length, which on the copy task is
  # the source's: the search steps once per source position of the batch's
  # longest sentence, so each op of its decoder step ran that many times (or
  # once: a loop-invariant op XLA moved out of the loop keeps its name).
  steps = [
      op
      for op in result['ops']
      if op['where'] == f'{mode}_search' and op['what'].startswith('decoder.')
  ]
  length = result['longest_source']
  assert length <= result['source_length']
  assert steps and all(op['calls_per_step'] in (1, length) for op in steps)
  products = [op for op in steps if op['matrix_product']]
  assert products and all(op['calls_per_step'] == length for op in products)
