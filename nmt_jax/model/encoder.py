"""The encoder: embeddings and a stack of LSTM layers.

The bottom layer, or all of them (model.bidirectional), are bidirectional;
dropout runs between layers. Its top-layer states hbar_s are the memory the
attention kinds read (nmt_jax/model/seq2seq.py's Decoder).
"""

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from nmt_jax.model import lstm


class Encoder(nn.Module):
  """Embeddings and a stack of (bi)LSTM layers with dropout between layers.

  Word dropout (model.word_dropout) zeroes whole embeddings; from layer
  model.residual on (0 = none) a layer's output is its output plus its
  (dropped-out) input, as Sockeye's residual cells.
  """

  config: Any  # model
  vocab_size: int

  @nn.compact
  def __call__(self, source, lengths, train=False):
    """source [B, S] int -> memory [B, S, H], per-layer final (c, h) [B, H]."""
    cfg = self.config
    # Time-major inside: the LSTM scans need [S, B, ...], and transposing the
    # ids is cheaper than transposing every layer's activations.
    embed = nn.Embed(self.vocab_size, cfg.embed_size, name='embed')
    x, vocabulary = source.T, None  # [S, B] ids
    if lstm.uses_gate_table(cfg, self.vocab_size, source.size, train):
      vocabulary = embed.embedding  # layer 0 looks its input gates up
    else:
      x = embed(x)  # [S, B, E]
      if train and cfg.word_dropout:
        x = lstm.drop_words(self.make_rng('dropout'), x, cfg.word_dropout)
    finals = []
    for layer in range(cfg.num_encoder_layers):
      if vocabulary is None:
        x = nn.Dropout(cfg.dropout)(x, deterministic=not train)
      bidirectional = cfg.bidirectional == 'all' or (
          cfg.bidirectional == 'bottom' and layer == 0
      )
      layer_class = lstm.BiLSTM if bidirectional else lstm.LSTM
      out, final = layer_class(
          cfg.hidden_size,
          cfg.forget_bias,
          explicit_weight_grads=cfg.explicit_weight_grads,
          unroll=cfg.scan_unroll,
          layer_norm=cfg.layer_norm,
          recurrent_dropout=cfg.recurrent_dropout,
          name=f'layer_{layer}',
      )(x, lengths, vocabulary, train)
      x = out + x if is_residual(cfg, layer) else out
      vocabulary = None
      finals.append(final)
    return jnp.swapaxes(x, 0, 1), finals  # [B, S, H]


def is_residual(config, layer: int) -> bool:
  """Whether LSTM layer `layer` (of either stack) adds its input to its
  output: from layer model.residual (>= 1) on."""
  return bool(config.residual) and layer >= config.residual
