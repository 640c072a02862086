"""LSTM encoder-decoder with one attention kind of `nmt_jax.attention`.

Encoder (nmt_jax/model/encoder.py): embeddings, a stack of LSTM layers (the
bottom one, or all, bidirectional), dropout between layers; its top-layer
states hbar_s are the memory the attention kinds read. Decoder: embeddings, a
stack of LSTM layers (nmt_jax/model/decoder_cell.py) initialised from the
encoder (bridge), optional input feeding of htilde_{t-1}, a readout htilde_t,
an optional extra hidden layer, and p(y_t) = softmax(W_s htilde_t). The query
is h_t (Luong, model.query='current') or h_{t-1} (Bahdanau, 'previous': the
context then also feeds the LSTM input). The readout (model.readout) is
Luong's attentional state htilde_t = tanh(W_c [c_t; h_t]) ('luong') or
Bahdanau's deep output ('bahdanau_maxout'): htilde_t = maxout_2(U_o q_t +
V_o E y_{t-1} + C_o c_t), q_t the query state (Bahdanau: s_{t-1}). Both have
model.readout_size units (0 = hidden_size).

One `Decoder.step` serves teacher forcing (scanned over the target by
`nn.scan`) and decoding (called once per step by the search loops through
`Seq2Seq.decode_step`, nmt_jax/decoding/scorers.py), so training and
inference share every line.
"""

import functools
from typing import Any, Tuple

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from nmt_jax import attention as attention_lib
from nmt_jax.data import dataset
from nmt_jax.data.vocab import PAD
from nmt_jax.model import decoder_cell
from nmt_jax.model import encoder as encoder_lib
from nmt_jax.model import hoisting
from nmt_jax.model import lstm
from nmt_jax.model import precision


def bridged_layer(layer: int, num_encoder: int, num_decoder: int) -> int:
  """The encoder layer whose final state starts decoder layer `layer`.

  The top layers line up (the decoder's top layer starts from the encoder's
  top layer); a decoder deeper than the encoder starts its extra bottom
  layers from the encoder's bottom layer.
  """
  return max(0, num_encoder - num_decoder + layer)


@flax.struct.dataclass
class DecoderState:
  """The recurrent state of a decoder hypothesis; every leaf is [B, ...]."""

  lstm: Tuple[lstm.Carry, ...]  # per layer (c, h), each [B, H]
  # [B, R] attentional state htilde_{t-1} (input feeding), R = readout_width()
  feed: jax.Array
  attention: Any  # the attention kind's state (dict)
  t: jax.Array  # [B] int32 index of the next target token


class Decoder(nn.Module):
  """Stacked LSTM decoder with input feeding and one attention kind.

  Shapes: H the LSTM units, R = readout_width() the units of htilde_t.
  """

  config: Any  # model
  vocab_size: int

  def setup(self):
    cfg = self.config
    h_size = cfg.hidden_size
    self.embed = nn.Embed(self.vocab_size, cfg.embed_size)
    # Layer 0's embedding-to-gates projection, applied to all steps at once.
    # With layer normalisation the bias comes after LN, in the cell.
    self.input_proj = hoisting.Projection(
        4 * h_size,
        cfg.explicit_weight_grads,
        bias_init=None
        if cfg.layer_norm
        else lstm.forget_bias_init(h_size, cfg.forget_bias),
    )
    self.cell = decoder_cell.StackedLSTMCell(
        h_size,
        cfg.num_decoder_layers,
        cfg.dropout,
        cfg.forget_bias,
        cfg.explicit_weight_grads,
        layer_norm=cfg.layer_norm,
        recurrent_dropout=cfg.recurrent_dropout,
        residual=cfg.residual,
    )
    self.attention = attention_lib.make(
        cfg.attention, h_size, cfg.project_query
    )
    readout_size = cfg.readout_size or h_size
    if cfg.readout == 'bahdanau_maxout':
      # Two pre-activations per unit, max-pooled.
      self.readout_state = nn.Dense(2 * readout_size, use_bias=False)  # U_o
      self.readout_input = nn.Dense(2 * readout_size, use_bias=False)  # V_o
      if self.attention.HAS_CONTEXT:
        self.readout_context = nn.Dense(2 * readout_size, use_bias=False)
    elif self.attention.HAS_CONTEXT:
      self.combine = hoisting.Projection(  # W_c
          readout_size, cfg.explicit_weight_grads
      )
    if cfg.bridge == 'dense':
      self.bridge_c = [nn.Dense(h_size) for _ in range(cfg.num_decoder_layers)]
      self.bridge_h = [nn.Dense(h_size) for _ in range(cfg.num_decoder_layers)]
    if cfg.output_hidden_size:
      self.output_hidden = nn.Dense(cfg.output_hidden_size)
    if cfg.tie_embeddings:
      # W_s is the target embedding matrix (Press & Wolf 2017): E^T.
      self.output_bias = self.param(
          'output_bias', nn.initializers.zeros_init(), (self.vocab_size,)
      )
    else:
      self.output = nn.Dense(self.vocab_size)
    self.dropout = nn.Dropout(cfg.dropout)

  def initial(self, memory, lengths, encoder_finals):
    """Attention cache and initial DecoderState from the encoder's outputs."""
    cfg = self.config
    batch = memory.shape[0]
    cache = self.attention.prepare(memory, lengths)
    attention_state = self.attention.initial_state(cache)
    zeros = jnp.zeros((batch, cfg.hidden_size), memory.dtype)
    feed = jnp.zeros((batch, self.readout_width()), memory.dtype)
    carries = []
    for layer in range(cfg.num_decoder_layers):
      top = bridged_layer(layer, len(encoder_finals), cfg.num_decoder_layers)
      c, h = encoder_finals[top]
      if cfg.bridge == 'dense':
        carries.append(
            (self.bridge_c[layer](c), jnp.tanh(self.bridge_h[layer](h)))
        )
      elif cfg.bridge == 'copy':
        carries.append((c, h))
      else:
        carries.append((zeros, zeros))
    state = DecoderState(
        lstm=tuple(carries),
        feed=feed,
        attention=attention_state,
        t=jnp.zeros((batch,), jnp.int32),
    )
    return cache, state

  def step(
      self,
      state: DecoderState,
      cache,
      emb,
      words,
      train=False,
      with_weights=False,
      keep=None,
      probes=hoisting.NO_PROBES,
  ):
    """One target step.

    emb [B, E], words: its `token_features` ([B, ...] each) -> state,
    htilde [B, R], diagnostics. `keep`: this step's dropout masks (see
    `dropout_masks`; None: no dropout). `probes`: the loop's
    `hoisting.Probes` of this step (the kernels of `hoisted_widths`).
    """
    cfg = self.config
    prev_h = state.lstm[-1][1]
    step_inputs = attention_lib.StepInputs(
        prev_query=prev_h,
        inputs=emb,
        t=state.t,
        token_features=words.get('attention'),
    )
    attention_state = state.attention
    extra = []
    query = prev_h
    if cfg.query == 'previous':
      # Bahdanau: attend from h_{t-1}; the context feeds this step's LSTM.
      context, attention_state, diagnostics = self.attention(
          prev_h, cache, attention_state, step_inputs, with_weights, train
      )
      extra.append(context)
    if cfg.input_feeding and self.attention.HAS_CONTEXT:
      extra.append(state.feed)
    # h: the top layer's output (its h_t, plus its input with a residual
    # connection); the 'previous' query above reads the top layer's state.
    carries, h = self.cell(state.lstm, words['gates'], extra, keep, probes)
    if cfg.query == 'current':
      # Luong: attend from h_t.
      query = h
      context, attention_state, diagnostics = self.attention(
          h, cache, attention_state, step_inputs, with_weights, train
      )
    htilde = self.readout(context, h, query, words, probes)
    htilde = lstm.dropout(
        htilde, None if keep is None else keep.get('htilde'), cfg.dropout
    )
    state = DecoderState(
        lstm=carries, feed=htilde, attention=attention_state, t=state.t + 1
    )
    return state, htilde, diagnostics

  def readout_width(self) -> int:
    """Units of htilde_t."""
    cfg = self.config
    if cfg.readout == 'luong' and not self.attention.HAS_CONTEXT:
      return cfg.hidden_size
    return cfg.readout_size or cfg.hidden_size

  def hoisted_widths(self):
    """Kernels used once per step whose gradients can be hoisted -> out width.

    The LSTM stack's and W_c's, keyed by parameter path (see hoisting.py).
    """
    cfg = self.config
    # Layer 0's per-step inputs, as `step` gathers them.
    has_inputs = cfg.query == 'previous' or (
        cfg.input_feeding and self.attention.HAS_CONTEXT
    )
    widths = {
        hoisting.key(self.cell.name, name): width
        for name, width in self.cell.kernel_widths(has_inputs).items()
    }
    if cfg.readout == 'luong' and self.attention.HAS_CONTEXT:
      widths[hoisting.key(self.combine.name, self.combine.KERNEL)] = (
          self.readout_width()
      )
    return widths

  def readout(self, context, h, query, words, probes=hoisting.NO_PROBES):
    """htilde_t [B, readout_width] from c_t, h_t, the query state, E y_{t-1}.

    words: the step's `token_features` ('readout': V_o E y_{t-1}); probes:
    the step's `hoisting.Probes` (W_c's).

    'luong': tanh(W_c [c_t; h_t]) (h_t for a kind without context);
    'bahdanau_maxout': max over unit pairs of U_o query + V_o emb + C_o c_t.
    """
    if self.config.readout == 'bahdanau_maxout':
      pre = self.readout_state(query) + words['readout']
      if self.attention.HAS_CONTEXT:
        pre = pre + self.readout_context(context)
      return pre.reshape(pre.shape[:-1] + (-1, 2)).max(-1)
    if not self.attention.HAS_CONTEXT:
      return h
    return jnp.tanh(self.combine(jnp.concatenate([context, h], -1), probes))

  def logits(self, htilde):
    """htilde [..., R] -> float32 logits [..., V] (softmax, loss in float32)."""
    if self.config.output_hidden_size:
      htilde = jnp.tanh(self.output_hidden(htilde))
    if self.config.tie_embeddings:
      logits = self.embed.attend(htilde) + self.output_bias
    else:
      logits = self.output(htilde)
    return attention_lib.at_least_float32(logits)

  def softmax_layer(self, htilde):
    """htilde [..., R] -> (x [..., R'], kernel [R', V], bias [V]).

    logits = x kernel + bias (as `logits` makes them): what
    training's fused softmax and loss (training/fused_softmax.py) take.
    """
    if self.config.output_hidden_size:
      htilde = jnp.tanh(self.output_hidden(htilde))
    if self.config.tie_embeddings:
      return htilde, self.embed.embedding.T, self.output_bias
    params = self.output.variables['params']
    return htilde, params['kernel'], params['bias']

  def __call__(self, cache, state, target_in, train=False, with_weights=False):
    """Teacher forcing: target_in [B, T] -> logits [B, T, V], diagnostics.

    The diagnostics are [B, T, ...].
    """
    htilde, diagnostics = self.features(
        cache, state, target_in, train, with_weights
    )
    return self.logits(htilde), diagnostics

  def features(self, cache, state, target_in, train=False, with_weights=False):
    """Teacher forcing: target_in [B, T] -> htilde [B, T, R], diagnostics.

    htilde is the softmax layer's input (`logits` maps it to [B, T, V]).
    """
    # Time-major inside (see encoder.py); only htilde [T, B, R] goes back.
    # [T, B, E]
    emb = self.dropout(self.embed(target_in.T), deterministic=not train)
    if train and self.config.word_dropout:
      emb = lstm.drop_words(
          self.make_rng('dropout'), emb, self.config.word_dropout
      )
    if lstm.uses_gate_table(
        self.config, self.vocab_size, target_in.size, train
    ):
      words = jax.tree_util.tree_map(
          lambda v: jnp.take(v, target_in.T, axis=0), self.token_table()
      )
    else:
      words = self.token_features(emb)  # [T, B, ...] each
    length, batch = target_in.shape[::-1]
    keep = self.dropout_masks(length, batch, train)
    loop = functools.partial(
        Decoder.loop, train=train, with_weights=with_weights
    )
    if self.config.hoist_weight_grads:
      loop = hoisting.hoisted_weight_grads(
          loop,
          {k: (length, batch, w) for k, w in self.hoisted_widths().items()},
          emb.dtype,
          self.config.explicit_weight_grads,
      )
      htildes, diagnostics = loop(self, cache, state, emb, words, keep)
    else:
      (htildes, diagnostics), _ = loop(
          self, cache, state, emb, words, keep, None
      )
    batch_major = lambda x: jnp.swapaxes(x, 0, 1)
    return batch_major(htildes), jax.tree_util.tree_map(
        batch_major, diagnostics
    )

  def loop(self, cache, state, emb, words, keep, probes, train, with_weights):
    """`step` over time-major emb [T, B, E] and its words [T, B, ...].

    keep: None or the dropout masks [T, B, ...] of `dropout_masks`.
    -> (htilde [T, B, R], diagnostics [T, B, ...]), the hoisted kernels'
    inputs [T, B, in] ({} when `probes`, [T, B, out] each, is None).
    """

    def body(mdl, carry, xs):
      emb_t, words_t, keep_t, probes_t = xs
      probes = hoisting.Probes(probes_t)
      carry, htilde, diagnostics = mdl.step(
          carry, cache, emb_t, words_t, train, with_weights, keep_t, probes
      )
      return carry, (htilde, diagnostics, probes.records)

    scan = nn.scan(
        body,
        variable_broadcast='params',
        split_rngs={'params': False, 'dropout': True},
        unroll=self.config.scan_unroll,
    )
    _, (htildes, diagnostics, records) = scan(
        self, state, (emb, words, keep, probes)
    )
    return (htildes, diagnostics), records

  def dropout_masks(self, length, batch, train):
    """Keep masks [T, B, width] of the dropout inside the loop, or None
    (outside training or without dropout).

    Between the LSTM layers ('layer_1', ...) and on htilde ('htilde'), drawn
    before the loop: random bits inside it would add RNG kernels per step.
    Recurrent dropout's ('recurrent_0', ...): one [B, H] mask per layer,
    the same at every step.
    """
    cfg = self.config
    if not train or not (cfg.dropout or cfg.recurrent_dropout):
      return None
    masks = {}
    if cfg.dropout:
      widths = {'htilde': self.readout_width()}
      for layer in range(1, cfg.num_decoder_layers):
        widths[f'layer_{layer}'] = cfg.hidden_size
      keys = jax.random.split(self.make_rng('dropout'), len(widths))
      masks = {
          name: jax.random.bernoulli(key, 1.0 - cfg.dropout, (length, batch, w))
          for key, (name, w) in zip(keys, sorted(widths.items()))
      }
    if cfg.recurrent_dropout:
      keys = jax.random.split(self.make_rng('dropout'), cfg.num_decoder_layers)
      shape = (batch, cfg.hidden_size)
      for layer, key in enumerate(keys):
        keep = jax.random.bernoulli(key, 1.0 - cfg.recurrent_dropout, shape)
        masks[f'recurrent_{layer}'] = jnp.broadcast_to(keep, (length,) + shape)
    return masks

  def token_features(self, emb):
    """What a step needs of the fed-back word alone, computed outside the loop.

    emb [..., E] -> {'gates': layer 0's input gates E y W_x + b [..., 4H],
    'attention': the attention kind's token_features (if any), 'readout':
    V_o E y of the maxout readout (if it is used)}.
    """
    words = {'gates': self.input_proj(emb)}
    attention_features = self.attention.token_features(emb)
    if attention_features is not None:
      words['attention'] = attention_features
    if self.config.readout == 'bahdanau_maxout':
      words['readout'] = self.readout_input(emb)
    return words

  def token_table(self):
    """`token_features` of every target word: {name: [V, ...]}."""
    return self.token_features(self.embed.embedding)

  def decode_step(self, state, cache, tokens, with_weights=False, table=None):
    """tokens [B] int -> state, logits [B, V], diagnostics.

    With `table` (from `token_table()`) a gather replaces the step's GEMMs.
    """
    emb = self.embed(tokens)
    if table is None:
      words = self.token_features(emb)
    else:
      words = {k: jnp.take(v, tokens, axis=0) for k, v in table.items()}
    state, htilde, diagnostics = self.step(
        state, cache, emb, words, with_weights=with_weights
    )
    return state, self.logits(htilde), diagnostics


class Seq2Seq(nn.Module):
  """The encoder-decoder; `source`/`target` are padded with PAD = 0.

  It computes in `model.dtype`: `apply` casts the float parameters to it on
  the way in, so activations follow (the embeddings are the first), while the
  stored parameters, their gradients and the optimizer state stay float32.
  The softmaxes and the loss are computed in float32.
  """

  config: Any  # model (model.attention.max_source_length resolved)
  source_vocab_size: int
  target_vocab_size: int

  def apply(self, variables, *args, **kwargs):
    params = precision.compute_params(self.config, variables['params'])
    return super().apply(dict(variables, params=params), *args, **kwargs)

  def setup(self):
    self.encoder = encoder_lib.Encoder(self.config, self.source_vocab_size)
    self.decoder = Decoder(self.config, self.target_vocab_size)

  def encode(self, source, train=False):
    """source [B, S] -> (attention cache, initial DecoderState)."""
    lengths = jnp.sum(source != PAD, axis=-1).astype(jnp.int32)
    memory, finals = self.encoder(source, lengths, train)
    return self.decoder.initial(memory, lengths, finals)

  def __call__(self, source, target_in, train=False, with_weights=False):
    """source [B, S], target_in [B, T] -> logits [B, T, V], diagnostics.

    The diagnostics are [B, T, ...].
    """
    cache, state = self.encode(source, train)
    return self.decoder(cache, state, target_in, train, with_weights)

  def features(self, source, target_in, train=False, with_weights=False):
    """As __call__, up to the softmax layer's input htilde [B, T, R]."""
    cache, state = self.encode(source, train)
    return self.decoder.features(cache, state, target_in, train, with_weights)

  def output_logits(self, htilde):
    """htilde [..., R] -> logits [..., V] (the softmax layer)."""
    return self.decoder.logits(htilde)

  def softmax_layer(self, htilde):
    """htilde [..., R] -> (x, kernel, bias): see Decoder.softmax_layer."""
    return self.decoder.softmax_layer(htilde)

  def token_table(self):
    """{name: [V, ...]}: see Decoder.token_table."""
    return self.decoder.token_table()

  def decode_step(self, state, cache, tokens, with_weights=False, table=None):
    return self.decoder.decode_step(state, cache, tokens, with_weights, table)


def create_model(config, task: dataset.Task) -> Seq2Seq:
  """The Seq2Seq of a resolved config, sized to the task's vocabularies."""
  return Seq2Seq(config.model, len(task.source_vocab), len(task.target_vocab))
