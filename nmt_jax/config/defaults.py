"""Default hyperparameters shared by every file in `configs/`.

A config file calls `get_config(arg)` and changes what its experiment needs:

    from nmt_jax.config import defaults
    def get_config(arg=None):
      config = defaults.get_config(arg)
      config.model.attention.kind = 'memory'
      return config

`arg` is the text after ':' in `--config=configs/<name>.py:ARG`. It names a
preset:

  ''/None      CPU-sized copy task (L = 20, 128 units): trains in minutes
               on a laptop.
  'copyN'      Britz et al. 2017 §4.1 copy setup at L = N (2-layer encoder,
               bidirectional bottom layer, 2-layer decoder, 256 units, batch
               128, Adam 1e-4, dropout 0.2, beam 10, up to 200k steps).
  'chunk'      the chunk_reverse reordering task instead of copy.
  'wmt17_de_en' Britz et al. 2017 §4.2 WMT'17 setup (512 units, BPE 16k,
               batch 128, beam 10).
  'shu_de_en'  Shu & Nakayama 2017 WMT'15 De-En setup (Bahdanau base model,
               50k words, beam 20).
  'luong_sgd'  Luong et al. 2015's recipe: SGD, lr 1.0 halved every epoch
               after epoch 5, 10 epochs, clip 5, batch 128.
  'tiny'       test-sized model (16 units, few steps) for the test suite.
Presets compose with commas: `copy100,tiny`; only one of copyN, chunk,
wmt17_de_en and shu_de_en chooses the data (copy50,chunk: the chunk task at
L = 50). They change the defaults; the
config file's own settings come after them and win (global_general.py:rnnsearch
keeps the general score, memory_k64.py:tiny its 64 slots). The two real-corpus
presets read TFDS data: run them once with --mode=prepare (downloads the
corpus).
"""

import importlib.util
import os

import ml_collections

from nmt_jax import attention
from nmt_jax.config import presets

# XLA's command buffers, loops included: on a GPU a search loop runs as one
# CUDA graph instead of one kernel launch per op per step. Decoding x2.6 on an
# H100, x2.8 greedy and x2.4 beam 10 on an H200 with the same texts; the
# training step x0.5-0.7, so only the decoders get it. XLA:CPU ignores it.
CUDA_GRAPHS = (
    '--xla_gpu_enable_command_buffer='
    'FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE'
)


def get_config(arg=None):
  """Returns the default config, with the presets named in `arg` applied."""
  config = ml_collections.ConfigDict()
  # One seed for parameters, dropout and data order.
  config.seed = 0
  # XLA options for every compiled step (training, scoring, decoding), written
  # as in XLA_FLAGS: '--xla_name=value ...'
  # (nmt_jax/config/compiler_options.py).
  config.compiler_options = ''

  config.data = _data()
  config.model = _model()
  # The attention kind and the fields of every kind (each kind's module in
  # nmt_jax/attention/ declares its fields, defaults and checks).
  config.model.attention = attention.default_config()
  config.train = _train()
  config.decode = _decode()
  config.parallel = _parallel()
  presets.apply_presets(config, arg)
  return config


def _data():
  """config.data: the task, its lengths and batching."""
  data = ml_collections.ConfigDict()
  # 'copy', 'chunk_reverse', 'tfds:<builder>/<config>' or 'text:<path prefix>'.
  data.name = 'copy'
  # Translation direction for real corpora (unused by the embedded tasks).
  data.source_lang = 'de'
  data.target_lang = 'en'
  # Embedded tasks: longest sequence L; lengths are uniform in min_length..L.
  # Real corpora: pairs with more tokens on a side are skipped (and counted).
  data.max_length = 20
  data.min_length = 1
  # Number of distinct symbols of the embedded tasks (Britz: 20).
  data.num_symbols = 20
  # chunk_reverse: longest chunk (chunks have 1..chunk_size tokens).
  data.chunk_size = 5
  # Sizes of the embedded tasks' splits (Britz: 100,000 and 1,000).
  data.num_train = 100_000
  data.num_eval = 1_000
  # Batches are padded to one of this many bucket lengths, so jit compiles
  # one step per bucket instead of one per batch. 0: 16 for training on a
  # text or TFDS corpus, 4 on the embedded tasks and for decoding.
  data.num_buckets = 0
  # Training bucket lengths: 'even' (evenly spaced up to the longest),
  # 'fitted' (the num_buckets lengths that pad the training split least,
  # from its length histogram) or 'auto' (fitted on a text or TFDS corpus,
  # even on the embedded tasks; data/batching.py says why).
  data.bucketing = 'auto'
  # Batch by tokens: each bucket's batches hold as many sentences as fit in
  # this many padded tokens (a multiple of the device count).
  # 0 = train.batch_size sentences.
  data.batch_tokens = 0
  # tfds: corpora: TFDS data_dir ('' = TFDS default) and manual_dir (files
  # placed by hand).
  data.tfds_data_dir = ''
  data.tfds_manual_dir = ''
  # Real corpora: vocabularies, built from the training split into
  # <workdir>/vocab/.
  data.vocab = _vocab()
  # A corpus segmented by another tool, read as words (vocab.kind='word'):
  # 'sentencepiece' ('▁' starts a word) or 'bpe' ('@@ ' joins); hypotheses
  # and references are joined back into text for BLEU, chrF and the output
  # (nmt_jax/data/segmentation.py). 'none' = the words are words.
  data.segmentation = 'none'
  # Feed the source tokens in reverse order (Sutskever et al. 2014); EOS stays
  # last. Alignments and attention maps are reported in the original order.
  data.reverse_source = False
  return data


def _vocab():
  """config.data.vocab: a real corpus's vocabularies."""
  vocab = ml_collections.ConfigDict()
  # 'sentencepiece', 'word' (whitespace tokens, <unk> for the rest) or 'char'.
  vocab.kind = 'sentencepiece'
  # SentencePiece: pieces (Britz: 16k shared BPE);
  # word/char: most frequent kept (0 = all).
  vocab.size = 16_000
  # Target side size when not shared (0 = data.vocab.size);
  # Shu: 80k source, 40k target words.
  vocab.target_size = 0
  # One vocabulary for both sides, or one per side.
  vocab.shared = True
  # SentencePiece model: 'bpe' or 'unigram'.
  vocab.model_type = 'bpe'
  # An existing SentencePiece model file to use instead of training one (one
  # model for both sides: vocab.shared; size and model_type then unused). Its
  # own <unk>/<s>/</s> ids are mapped to nmt_jax's (nmt_jax/data/vocab.py).
  vocab.sentencepiece_model = ''
  # word/char: tokens seen fewer times become <unk>.
  vocab.min_count = 1
  return vocab


def _model():
  """config.model: the network, its regularisers and speed switches."""
  model = ml_collections.ConfigDict()
  model.embed_size = 128
  model.hidden_size = 128
  model.num_encoder_layers = 2
  model.num_decoder_layers = 2
  # Which encoder layers are bidirectional: 'bottom', 'all' or 'none'. A
  # bidirectional layer has hidden_size // 2 units per direction (OpenNMT's
  # brnn), so every encoder layer outputs hidden_size features.
  model.bidirectional = 'bottom'
  # Dropout on every LSTM layer's input and on the attentional state.
  model.dropout = 0.2
  # Regularisers of Sockeye, Marian and Nematus, in the encoder and the
  # decoder, all off by default (docs/options.md, "Model switches"):
  # Layer-normalised LSTMs (Ba et al. 2016): LN(x W_x) + LN(h W_h) + b and
  # h = o * tanh(LN(c)), over each product's whole 4H (Marian's). New
  # parameters: part of the model's identity.
  model.layer_norm = False
  # Variational recurrent dropout (Gal & Ghahramani 2016): h is dropped before
  # W_h with one mask per sequence and layer at this rate; training only.
  model.recurrent_dropout = 0.0
  # Residual connections (GNMT, Sockeye): from this LSTM layer index on
  # (>= 1), a layer's output is its output plus its input; 0 = none.
  model.residual = 0
  # Word dropout (Sennrich et al. 2016): whole source and target embeddings
  # zeroed at this rate in training, not rescaled (as Nematus).
  model.word_dropout = 0.0
  # Compute dtype: 'float32' or 'bfloat16' (mixed precision: parameters and
  # optimizer state stay float32, the softmaxes and the loss run in float32).
  model.dtype = 'float32'
  # Speed switches, not part of the model's identity (docs/performance.md):
  # Weight gradients of the LSTM kernels and W_c as a plain GEMM on an
  # explicitly transposed input (XLA:CPU's fast path; same values).
  model.explicit_weight_grads = True
  # The decoder's per-step kernel gradients (LSTM stack, W_c) as one GEMM
  # after its backward loop instead of one per step (nmt_jax/model/hoisting.py).
  model.hoist_weight_grads = True
  # General attention with one query per sentence (training, greedy search)
  # scores (W_a^T h_t)^T hbar_s: each step reads the encoder states only,
  # not the keys W_a hbar_s as well (nmt_jax/attention/content.py).
  model.project_query = True
  # The first LSTM layers' input gates E x W_x + b (the encoder's; the
  # decoder's in teacher-forced passes) as rows of a per-word table [V, 4H]
  # computed once per batch instead of a GEMM over every position. 'auto':
  # when the vocabulary has fewer words than the batch has positions, never
  # with dropout in training (it drops embeddings before W_x).
  model.gate_table = 'auto'
  # Time steps per iteration of the training loops (the encoder LSTMs' and
  # the decoder's scans): fewer iterations, each with a fixed cost.
  model.scan_unroll = 1
  # Luong input feeding: htilde_{t-1} is concatenated to the decoder input.
  model.input_feeding = True
  # Attention query: 'current' (Luong, h_t) or 'previous' (Bahdanau, h_{t-1};
  # the context then also feeds the LSTM input).
  model.query = 'current'
  # Decoder initial state: 'dense' (a linear map of the encoder's final
  # states, tanh on h), 'copy' (same layer counts required) or 'zero'. The
  # top layers line up: with fewer decoder than encoder layers the decoder
  # starts from the encoder's top ones.
  model.bridge = 'dense'
  # The readout htilde_t before the softmax: 'luong' (tanh(W_c [c_t; h_t]),
  # Luong's attentional state) or 'bahdanau_maxout' (Bahdanau's deep output:
  # maxout over pairs of U_o q_t + V_o E y_{t-1} + C_o c_t, q_t the attention
  # query); readout_size units (0 = hidden_size).
  model.readout = 'luong'
  model.readout_size = 0
  # Optional extra tanh layer between htilde_t and the softmax. 0 = none.
  model.output_hidden_size = 0
  # The softmax layer reuses the target embeddings (W_s = E^T, one parameter);
  # the layer before it must then have embed_size units.
  model.tie_embeddings = False
  # Initial forget-gate bias (flax's cells start at 0; 1 trains better).
  model.forget_bias = 1.0
  # Parameter initialisation: 0 = Flax's defaults (LeCun-normal kernels,
  # orthogonal recurrent kernels, N(0, 1/E) embeddings, zero biases); s > 0 =
  # every parameter uniform in (-s, s), OpenNMT-py's `param_init s` (0.1), the
  # biases on top of their Flax value (so model.forget_bias still adds to the
  # forget gate; 0 there is OpenNMT-py's init exactly).
  model.init_uniform = 0.0
  return model


def _train():
  """config.train: optimisation, validation, checkpoints and stopping."""
  train = ml_collections.ConfigDict()
  train.num_steps = 2_000
  train.batch_size = 64
  # Gradient accumulation: each batch's gradient is summed over this many
  # micro-batches of batch_size / N sentences, computed one after another
  # (activations of one micro-batch in memory at a time); the update is the
  # whole batch's. batch_size stays the batch an update sees.
  train.accumulate_steps = 1
  # 'adam' or 'sgd' (plain SGD, as Luong et al. 2015; the luong_sgd preset).
  train.optimizer = 'adam'
  train.learning_rate = 3e-3
  # Adam's decoupled weight decay (AdamW): every parameter shrinks by
  # learning_rate * weight_decay per step. 0 = plain Adam.
  train.weight_decay = 0.0
  # Keep an exponential moving average of the parameters, ema = d * ema +
  # (1 - d) * params after every update; validation, eval, translate, score
  # and averaging then read it (training goes on from the raw parameters).
  # 0 = off; e.g. 0.999.
  train.ema_decay = 0.0
  # 'constant', 'halve' (halve every epoch from epoch halve_from_epoch, as Shu)
  # or 'warmup_rsqrt' (linear warmup, then lr * sqrt(warmup / step)).
  train.schedule = 'constant'
  train.halve_from_epoch = 4
  train.warmup_steps = 0
  # Global gradient-norm clipping (Luong 5, Shu 3).
  train.clip_norm = 5.0
  train.label_smoothing = 0.0
  # Softmax and loss this many target positions at a time, never holding the
  # [batch, length, vocabulary] logits at once (0 = all positions at once).
  train.loss_chunk = 0
  # The dropout masks' generator (parameter init always uses JAX's default).
  train.dropout_rng = 'threefry2x32'
  # Every N steps: log, validate (loss and BLEU), checkpoint (and a
  # validation with a better BLEU than every saved checkpoint is saved too).
  train.log_every = 50
  train.eval_every = 500
  train.checkpoint_every = 500
  # Checkpoints to keep besides the best one (by validation BLEU).
  train.keep_checkpoints = 2
  # Also keep every checkpoint whose step is a multiple of this, for
  # evaluating a learning curve later (decode.step); a multiple of
  # checkpoint_every. 0 = off.
  train.keep_every = 0
  # Validation BLEU during training decodes with this beam (1 = greedy) and
  # on at most this many sentences (the final evaluation uses all of them).
  train.eval_beam_size = 1
  train.eval_num_sentences = 1_000
  # At each validation, the attention of the first N validation sentences
  # (greedy decoding, the same sentences every time) drawn as TensorBoard
  # images, tags valid/attention/<i>; needs matplotlib. 0 = off; e.g. 3.
  train.attention_images = 0
  # Flexible attention fine-tuning rewards strong position penalties g(t):
  # 'sentence' (Shu & Nakayama eq. 9): J = sum over sentences of
  # (NLL - beta * mean_t g(t)), divided by the batch's target tokens like the
  # NLL; 'token': J = mean-token NLL - beta * mean-token g(t) (beta then
  # weighs ~mean target length times more). 0 = off.
  train.beta = 0.0
  train.beta_normalization = 'sentence'
  # Train for this many epochs of the training split instead of num_steps
  # (0 = use num_steps); fine-tuning sets 1.
  train.num_epochs = 0.0
  # Stop when the loss exceeds this multiple of its running mean and
  # log(target vocabulary size), the loss of a uniform guess, for
  # divergence_steps steps in a row (divergence; a NaN or inf loss always
  # stops). 0 = only non-finite.
  train.divergence_factor = 10.0
  train.divergence_steps = 20
  # On SIGTERM (preemption), save a checkpoint after the current step and stop
  # within this many seconds (GCE/TPU preemption and SLURM's default KillWait
  # allow 30 s).
  train.sigterm_grace_seconds = 25.0
  # Learning-rate decay on a validation plateau: after plateau_patience
  # validations without a better plateau_metric ('bleu' or 'loss'), multiply
  # the learning rate by plateau_decay (0 = off; e.g. 0.5), on top of the
  # schedule.
  train.plateau_decay = 0.0
  train.plateau_patience = 2
  train.plateau_metric = 'bleu'
  # What counts as better, for both: a gain over the best counted value of
  # more than this, in the metric's units (BLEU points, or nats of
  # cross-entropy). 0: any gain. With a small rate late in training, gains of
  # 1e-4 nats would otherwise restart the counts again and again.
  train.plateau_min_delta = 0.0
  # Early stopping: stop after this many validations without a better
  # plateau_metric (0 = off); the best checkpoint is then evaluated.
  train.early_stopping_patience = 0
  # Profile training steps profile_from_step + 1 .. + profile_steps into
  # <workdir>/profile (a jax.profiler trace: TensorBoard's profile tab or
  # ui.perfetto.dev). 0 = off.
  train.profile_steps = 0
  train.profile_from_step = 10
  # Start from the best checkpoint of another workdir (fine-tuning).
  train.init_from = ''
  # True: train.learning_rate becomes the rate the init_from run trained at
  # just before that checkpoint (its schedule and plateau decays applied), so
  # fine-tuning a converged run does not restart at its first, larger rate.
  train.init_from_learning_rate = False
  return train


def _decode():
  """config.decode: search, sampling and their outputs."""
  decode = ml_collections.ConfigDict()
  # eval/translate decode with 'search' (greedy at beam_size 1, else beam
  # search) or 'sample': num_samples random translations of each sentence
  # (back-translation, diversity). Validation during training always searches.
  decode.method = 'search'
  decode.beam_size = 5
  # Sampling (method='sample'; beam_size and length_penalty then unused): each
  # word drawn from softmax(log-probabilities / temperature) cut to the top_k
  # most probable words (0 = all), then to the nucleus, the fewest most
  # probable words whose probability reaches top_p (1.0 = all). num_samples
  # per sentence, in order, the first in the hypotheses file; their scores
  # are the model's untempered log-probabilities. A sample's key comes from
  # sample_seed and the sentence's tokens, not its batch: identical source
  # lines get identical samples.
  decode.temperature = 1.0
  decode.top_k = 0
  decode.top_p = 1.0
  decode.num_samples = 1
  decode.sample_seed = 0
  # GNMT length penalty ((5 + len) / 6) ** alpha; 0 = raw log-probability.
  decode.length_penalty = 0.6
  # GNMT coverage penalty beta (Wu et al. 2016): beam search adds
  # beta * sum_i log(min(sum_t a_t(i), 1)) over the source positions i to a
  # finished hypothesis' score, penalising sources left unattended. 0 = off;
  # beam search only (greedy search ranks nothing).
  decode.coverage_penalty = 0.0
  # A hypothesis has at most ratio * source_length + offset tokens (incl. EOS).
  decode.max_length_ratio = 2.0
  decode.max_length_offset = 10
  # translate/score refuse a line of more pieces than this (its line number
  # named): a 100,000-word line would decode for minutes. None = 4 x
  # data.max_length, the training length.
  decode.max_input_length = ml_collections.config_dict.placeholder(int)
  # eval/translate/score restore this kept step (of every ensemble member)
  # instead of the best one; eval then writes into <workdir>/eval_step_<N>/.
  # None = the best.
  decode.step = ml_collections.config_dict.placeholder(int)
  # Hypotheses per decoding batch: greedy search decodes batch_size
  # sentences at a time, beam search batch_size // beam_size, sampling
  # batch_size // num_samples.
  decode.batch_size = 256
  # Decode each split this many times and report the fastest pass as
  # decoding time (min over repeats filters out other work on the machine;
  # 1 = decode once).
  decode.timing_repeats = 1
  # translate/eval write the N best hypotheses of each sentence in Moses
  # n-best format, 'i ||| hypothesis ||| F0= score ||| score' (0 = off; at
  # most beam_size; sampling: the first N samples, at most num_samples, and
  # 0 with num_samples > 1 writes all of them).
  decode.nbest = 0
  # 'pharaoh': translate/eval also write hard alignments 'i-j' (source token i,
  # target token j) from the argmax of the attention (memory attention:
  # beta alpha^T). 'soft': the attention matrices themselves, one [target
  # tokens + EOS, source tokens + EOS] float32 array per sentence, keyed by
  # its 0-based line, in a NumPy .npz file (eval: eval_alignments.npz;
  # translate: alignments_file below). '' = off.
  decode.alignments = ''
  # translate with alignments='soft': the .npz file of the matrices. '' =
  # beside --output (<output>.alignments.npz); needed when writing to stdout.
  decode.alignments_file = ''
  # Word vocabularies: each <unk> of a hypothesis becomes the source word it is
  # aligned to (Luong et al. 2015).
  decode.replace_unk = False
  # Ensembles (--workdir=A,B): average the members' 'log_probs' per step
  # (OpenNMT-py, Marian) or their 'probs' (fairseq).
  decode.ensemble_average = 'log_probs'
  # --mode=eval traces one extra decoding pass (compiled already; not timed:
  # tracing slows it) into <output>/profile_decode (jax.profiler, as
  # train.profile_steps).
  decode.profile = False
  # What the decoder computes from the fed-back word alone (layer 0's
  # embedding-to-gates projection; flexible attention's W_g^i i_t; the maxout
  # readout's V_o E y) for every target word, once per decoding call, so each
  # step looks rows up instead of running GEMMs: 'on', 'off' or 'auto' (when
  # the vocabulary has fewer words than the loop's rows x steps). Same
  # results either way (float rounding aside).
  decode.gate_table = 'auto'
  # Decoding steps per iteration of the search loop: the same output in
  # fewer iterations (see model.scan_unroll); a step past the end of the
  # search is computed and discarded.
  decode.unroll = 1
  # XLA options for the decoders alone, on top of config.compiler_options
  # (a name set in both takes this value): by default the search loops as
  # CUDA graphs on a GPU (CUDA_GRAPHS above); '' launches kernel by kernel.
  decode.compiler_options = CUDA_GRAPHS
  return decode


def _parallel():
  """config.parallel: how a step spreads over devices."""
  parallel = ml_collections.ConfigDict()
  # 'jit' (one program over a device mesh) or 'pmap' (the same step mapped over
  # devices). Both shard the batch along 'data' and replicate the state.
  parallel.mode = 'jit'
  # Devices on the 'data' axis: (-1,) = all of them,
  # or (N,) with N = the device count.
  parallel.mesh_shape = (-1,)
  return parallel


def sibling_config(config_file: str, name: str, arg=None):
  """get_config(arg) of configs/<name>.py next to `config_file`.

  Config files build on each other (memory_k32.py is memory_k64.py with K = 32).
  """
  path = os.path.join(
      os.path.dirname(os.path.abspath(config_file)), f'{name}.py'
  )
  spec = importlib.util.spec_from_file_location(f'nmt_jax_config_{name}', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)
