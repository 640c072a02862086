"""The RNN regularisers and coverage on `chunk_reverse`: one switch at a time.

Global (general) attention at the default CPU size (2-layer encoder and
decoder, 128 units), the same seed and steps for every run; each run turns
one switch on over the baseline: layer-normalised LSTMs, residual
connections from layer 1, variational recurrent dropout, word dropout and
Tu et al.'s coverage vector in the score (general and concat scores). The
argument is L (default 50: at L = 20 global attention reaches 100 BLEU,
leaving nothing to compare):

  python -m nmt_jax.sweep run --sweep=configs/sweeps/rnn_options.py:50 \
      --root=runs/rnn_options --set=train.num_steps=1000
  python -m nmt_jax.sweep aggregate --root=runs/rnn_options \
      --markdown=runs/rnn_options/results.md

GNMT's coverage penalty is a decoding option: evaluate a copy of the baseline
with it (an evaluation writes into the workdir it evaluates),

  cp -r runs/rnn_options/L50/baseline runs/rnn_options/L50_baseline_cp0.2
  python -m nmt_jax.main --config=configs/global_general.py:chunk \
      --config.data.max_length=50 --workdir=runs/rnn_options/L50_baseline_cp0.2 \
      --mode=eval --config.decode.coverage_penalty=0.2
"""

SWITCHES = {
    'baseline': {},
    'layer_norm': {'model.layer_norm': True},
    'residual': {'model.residual': 1},
    'recurrent_dropout': {'model.recurrent_dropout': 0.2},
    'word_dropout': {'model.word_dropout': 0.1},
    'coverage': {'model.attention.coverage': True},
}


def get_sweep(arg=None):
  length = int(arg or 50)
  common = {'data.max_length': length, 'train.eval_every': 500}
  runs = [
      {
          'name': f'L{length}/{name}',
          'config': '../global_general.py:chunk',
          'overrides': {**common, **switch},
      }
      for name, switch in SWITCHES.items()
  ]
  for name, switch in (
      ('concat', {}),
      ('concat_coverage', SWITCHES['coverage']),
  ):
    runs.append({
        'name': f'L{length}/{name}',
        'config': '../global_concat.py:chunk',
        'overrides': {**common, **switch},
    })
  return runs
