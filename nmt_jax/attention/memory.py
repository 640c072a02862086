"""Britz, Guan & Luong 2017: K memory slots, an O(K D) lookup per step.

The slots are computed once (encoding), then looked up at each step (decoding):

  encoding: alpha = f_enc(W_alpha hbar_s [* l_s])  [B, S, K],
            C_k = sum_s alpha_{s,k} hbar_s          [B, K, D]
  decoding: beta_t = f_dec(W_beta h_t)              [B, K],
            c_t = sum_k beta_{t,k} C_k

f_enc: 'softmax_slots' (over the K slots of each position, the paper's
equation), 'softmax_time' (over the positions of each slot, xnmt's reading)
or 'sigmoid'; f_dec: 'softmax' or 'sigmoid'. Padding never enters C: its rows
of alpha are zero (masked after the position-encoding product). The cache
holds C and alpha only; a decoder step never touches the encoder states.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from nmt_jax.attention import base
from nmt_jax.system import errors

ENCODER_SCORINGS = ('softmax_slots', 'softmax_time', 'sigmoid')
DECODER_SCORINGS = ('softmax', 'sigmoid')
POSITION_ENCODINGS = ('none', 'renorm', 'renorm_mean1', 'unnormalized')


def position_encoding(
    lengths, length: int, num_slots: int, max_length: int, mode: str
):
  """Britz et al. 3.2: L[s, k] = (1 - k/K)(1 - s/S) + (k/K)(s/S).

  1-based k and s; S = max_length (positions past it, only in a test
  split kept whole, take position S's encoding). 'renorm' (paper): entries
  past each
  sentence's length masked, the rest of each slot's column renormalised to
  sum to 1 over time; 'renorm_mean1': renormalised to mean 1 instead (a
  labelled deviation: the paper's version shrinks logits ~|S|-fold);
  'unnormalized': L as is (neulab/xnmt). Returns [B, length, K].
  """
  k = jnp.arange(1, num_slots + 1) / num_slots  # [K]
  s = jnp.minimum(jnp.arange(1, length + 1), max_length) / max_length  # [S]
  table = (1 - k)[None, :] * (1 - s)[:, None] + k[None, :] * s[:, None]
  table = jnp.broadcast_to(table, (lengths.shape[0], length, num_slots))
  if mode == 'unnormalized':
    return table
  # [B, S, 1]
  mask = base.length_mask(lengths, length)[..., None]
  table = jnp.where(mask, table, 0.0)
  table = table / jnp.maximum(table.sum(1, keepdims=True), 1e-9)
  if mode == 'renorm_mean1':
    table = table * lengths[:, None, None]
  return table


@base.register('memory')
class MemoryAttention(base.Attention):
  """Fixed-size memory attention."""

  FIELDS = {
      # Number of memory slots K.
      'num_memory': (64, errors.positive),
      # f_enc, the encoder scoring (see the module docstring).
      'encoder_scoring': ('softmax_slots', errors.one_of(*ENCODER_SCORINGS)),
      # f_dec, the decoder scoring.
      'decoder_scoring': ('softmax', errors.one_of(*DECODER_SCORINGS)),
      # Position encodings: 'none', 'renorm' (paper: masked and renormalised
      # over time), 'renorm_mean1' (mean 1 instead of sum 1, a labelled
      # deviation) or 'unnormalized' (xnmt).
      'position_encoding': ('none', errors.one_of(*POSITION_ENCODINGS)),
  }
  RANK = 10
  PLOT = 'memory_maps'
  GROUPED_CACHE = True

  def setup(self):
    slots = self.config.num_memory
    self.encoder_scores = nn.Dense(slots, use_bias=False)  # W_alpha
    self.decoder_scores = nn.Dense(slots, use_bias=False)  # W_beta

  def prepare(self, memory, lengths) -> base.Cache:
    cfg = self.config
    length = memory.shape[1]
    # [B, S, 1]
    mask = base.length_mask(lengths, length)[..., None]
    logits = self.encoder_scores(memory)  # [B, S, K]
    if cfg.position_encoding != 'none':
      logits = logits * position_encoding(
          lengths,
          length,
          cfg.num_memory,
          cfg.max_source_length,
          cfg.position_encoding,
      )
    if cfg.encoder_scoring == 'softmax_slots':
      alpha = jnp.where(mask, base.softmax(logits), 0.0)
    elif cfg.encoder_scoring == 'softmax_time':
      alpha = base.masked_softmax(logits, mask, axis=1)
    else:
      alpha = jnp.where(mask, jax.nn.sigmoid(logits), 0.0)
    alpha = alpha.astype(memory.dtype)  # position encodings are float32
    slots = jnp.einsum('bsk,bsd->bkd', alpha, memory)  # [B, K, D]
    return {'slots': slots, 'alpha': alpha, 'lengths': lengths}

  def __call__(
      self, query, cache, state, step, with_weights=False, train=False
  ):
    del step, train
    logits = self.decoder_scores(query)  # [N, K], N = B * G
    if self.config.decoder_scoring == 'softmax':
      beta = base.softmax(logits)
    else:
      beta = jax.nn.sigmoid(logits)
    context = base.grouped_matmul(beta, cache['slots'])  # [N, D]
    window = jnp.full(query.shape[:1], float(self.config.num_memory))
    diagnostics = {'window': window, 'computed': window}
    if with_weights:
      diagnostics['weights'] = beta
      # What the step attends to in the source: beta alpha^T.
      diagnostics['source_weights'] = base.grouped_matmul(
          beta, jnp.swapaxes(cache['alpha'], 1, 2)
      )
    return context, state, diagnostics

  @classmethod
  def identity(cls, attention_config):
    fields = super().identity(attention_config)
    if attention_config.position_encoding != 'none':
      fields.add('max_source_length')  # S of the encodings
    return fields

  @classmethod
  def validate(cls, config):
    # W_beta h_t scores K slots: there is no score per source position for
    # a coverage C_t(s) to enter (beta_t alpha^T is an output, not a score).
    base.refuse_coverage(config, 'scores memory slots, not source positions')
    attention = config.model.attention
    longest = config.data.max_length + 1
    if (
        attention.position_encoding != 'none'
        and attention.max_source_length < longest
    ):
      raise errors.config_error(
          'model.attention.max_source_length',
          attention.max_source_length,
          'is shorter than the longest source (data.max_length + 1 = '
          f'{longest}) and position encodings cover only that many positions',
          'raise it or leave it unset',
      )

  @classmethod
  def cost(cls, model_config, source_length):
    hidden, slots = model_config.hidden_size, model_config.attention.num_memory
    sentence = 2.0 * hidden * slots * source_length * 2  # alpha, then C
    return base.Cost(sentence, 2.0 * hidden * slots * 2, float(slots))

  @classmethod
  def source_attention(cls, weights, cache, row, length):
    """beta [T, K] -> beta alpha^T [T, S]: the attention over the source."""
    alpha = cache['alpha'][row, :length]  # [S, K]
    return weights @ alpha.T, {'alpha': alpha, 'beta': weights}
