"""OpenNMT-py figures for `bench --peer`: its benchmark scripts' JSON files.

The peer is timed by two wrappers around OpenNMT-py's own entry points
(`train_bench.py`, `translate_bench.py`; docs/performance.md says how they
run). Each writes one JSON file per run: training `{'summary': {...}}` with
`tgt_tok_per_s` (non-PAD target tokens, `</s>` included, over a window of
steps after warm-up), `cpu_util_window` (process CPU seconds per wall second
in that window) and `padding_fraction`; decoding `{'timing': {...}, 'args':
[...]}` with `translate_s`, `translate_cpu_s`, `n_sent` and the command line
(`-beam_size`). Several runs of one setting are summarised by their median.
"""

import json
import statistics
from typing import Any, Dict, List, Sequence


def _load(paths: Sequence[str]) -> List[Dict[str, Any]]:
  runs = []
  for path in paths:
    with open(path) as f:
      runs.append(json.load(f))
  return runs


def train_figures(paths: Sequence[str]) -> Dict[str, Any]:
  """Median target tokens/s (wall and per CPU second) of training runs."""
  summaries = [r['summary'] for r in _load(paths)]
  complete = [s for s in summaries if s.get('tgt_tok_per_s')]
  if not complete:
    raise ValueError(f'no complete training window in {list(paths)}')
  wall = [s['tgt_tok_per_s'] for s in complete]
  cpu = [s['tgt_tok_per_s'] / s['cpu_util_window'] for s in complete]
  return {
      'tokens_per_sec': statistics.median(wall),
      'tokens_per_cpu_sec': statistics.median(cpu),
      'tokens_per_sec_runs': wall,
      'tokens_per_cpu_sec_runs': cpu,
      'padding_fraction': statistics.median(
          s['padding_fraction'] for s in complete
      ),
      'peak_rss_mb': max(s['peak_rss_mib'] for s in complete),
      'threads': complete[0]['threads'],
  }


def _beam_size(args: Sequence[str]) -> int:
  return int(args[list(args).index('-beam_size') + 1])


def decode_figures(paths: Sequence[str]) -> Dict[str, Dict[str, Any]]:
  """Per beam size ('greedy', 'beam10', ...): median sentences/s and output
  tokens/s (wall, CPU).

  With EOS blocked (-min_length) every hypothesis runs to the longest
  source of its batch + 5: the peer's outputs are longer than nmt_jax's
  (each sentence to its own length), so the two compare per output token.
  """
  by_beam: Dict[str, List[Dict[str, Any]]] = {}
  for run in _load(paths):
    beam = _beam_size(run['args'])
    label = 'greedy' if beam == 1 else f'beam{beam}'
    by_beam.setdefault(label, []).append(run['timing'])
  figures = {}
  for label, timings in by_beam.items():
    wall = [t['n_sent'] / t['translate_s'] for t in timings]
    cpu = [t['n_sent'] / t['translate_cpu_s'] for t in timings]
    tokens = [t['hyp_tokens'] / t['n_sent'] for t in timings]
    figures[label] = {
        'sentences_per_sec': statistics.median(wall),
        'sentences_per_cpu_sec': statistics.median(cpu),
        'sentences_per_sec_runs': wall,
        'sentences_per_cpu_sec_runs': cpu,
        'output_tokens_per_sentence': statistics.median(tokens),
        'output_tokens_per_sec': statistics.median(
            n * r for n, r in zip(tokens, wall)
        ),
        'output_tokens_per_cpu_sec': statistics.median(
            n * r for n, r in zip(tokens, cpu)
        ),
        'peak_rss_mb': max(t['peak_rss_mib'] for t in timings),
        'threads': timings[0]['threads'],
    }
  return figures


def with_output_tokens(figures):
  """nmt_jax's figures of a decoding mode with its output tokens per second.

  Files written before `bench decode` counted them: its random-weight
  decoding with global attention outputs each sentence's source tokens
  (`avg_window` less the source's EOS).
  """
  if 'output_tokens_per_sec' in figures:
    return figures
  tokens = figures['avg_window'] - 1
  return dict(
      figures,
      output_tokens_per_sentence=tokens,
      output_tokens_per_sec=tokens * figures['sentences_per_sec'],
      output_tokens_per_cpu_sec=tokens * figures['sentences_per_cpu_sec'],
  )


def ratios(this: Dict[str, Any], peer: Dict[str, Any]) -> Dict[str, float]:
  """this / peer for each rate both report (above 1: nmt_jax is faster)."""
  return {
      key: this[key] / peer[key]
      for key in (
          'tokens_per_sec',
          'tokens_per_cpu_sec',
          'sentences_per_sec',
          'sentences_per_cpu_sec',
          'output_tokens_per_sec',
          'output_tokens_per_cpu_sec',
      )
      if this.get(key) and peer.get(key)
  }


def matched_model_yaml(
    run: str, train: Sequence[str], valid: Sequence[str]
) -> str:
  """OpenNMT-py 3.5.1 config lines of the model nmt_jax's matched runs train.

  nmt_jax's configs/global_general.py with bidirectional=all, bridge=copy:
  1 + 1 LSTM layers of 256, embeddings 256, general attention, input
  feeding, dropout 0.2, Adam 1e-3 with the gradient norm clipped at 5,
  batches of 64 sentences, the loss a mean over target tokens; the
  vocabularies (`run`/vocab.src, vocab.tgt) hold every training piece.
  `train` and `valid` are (source, target) paths. Callers add save_data,
  steps, checkpoints and the seed.
  """
  return f"""\
src_vocab: {run}/vocab.src
tgt_vocab: {run}/vocab.tgt
share_vocab: false
src_words_min_frequency: 1
tgt_words_min_frequency: 1
vocab_size_multiple: 1          # the default 8 adds filler entries
src_vocab_size: 1000000
tgt_vocab_size: 1000000
overwrite: true
data:
  corpus_1:
    path_src: {train[0]}
    path_tgt: {train[1]}
  valid:
    path_src: {valid[0]}
    path_tgt: {valid[1]}
model_task: seq2seq
encoder_type: brnn              # hidden_size split: half per direction
decoder_type: rnn
rnn_type: LSTM
enc_layers: 1
dec_layers: 1
hidden_size: 256
word_vec_size: 256
global_attention: general
global_attention_function: softmax
input_feed: 1
bridge: false                   # final (fwd;bwd) states start the decoder
dropout: [0.2]
param_init: 0.1                 # uniform(-0.1, 0.1) everywhere
optim: adam
learning_rate: 0.001
adam_beta1: 0.9
adam_beta2: 0.999
decay_method: none
learning_rate_decay: 1.0
start_decay_steps: 1000000
max_grad_norm: 5
label_smoothing: 0.0
batch_type: sents
batch_size: 64
normalization: tokens           # a mean over target tokens, as nmt_jax
accum_count: [1]
"""
