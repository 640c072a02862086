"""Default hyperparameters shared by every file in `configs/`.

A config file calls `get_config(arg)` and changes what its experiment needs:

    from nmt_jax import default_config
    def get_config(arg=None):
      config = default_config.get_config(arg)
      config.model.attention.kind = 'memory'
      return config

`arg` is the text after ':' in `--config=configs/x.py:ARG`. It names a preset:

  ''/None      CPU-sized copy task (L = 20, 128 units): trains in minutes on a laptop.
  'copyN'      Britz et al. 2017 §4.1 copy setup at L = N (2-layer bi-LSTM encoder, 2-layer
               decoder, 256 units, batch 128, Adam 1e-4, dropout 0.2, beam 10, up to 200k steps).
  'chunk'      the chunk_reverse reordering task instead of copy.
  'wmt17_de_en' Britz et al. 2017 §4.2 WMT'17 setup (512 units, BPE 16k, batch 128, beam 10).
  'shu_de_en'  Shu & Nakayama 2017 WMT'15 De-En setup (Bahdanau base model, 50k words, beam 20).
  'tiny'       test-sized model (16 units, few steps) for the test suite.
Presets compose with commas: `copy100,tiny`. The two real-corpus presets read
TFDS data: run them once with --mode=prepare (downloads the corpus).
"""

import math

import ml_collections
from ml_collections import config_dict

PRESETS = ('copyN', 'chunk', 'wmt17_de_en', 'shu_de_en', 'tiny')


def get_config(arg=None):
  """Returns the default config, with the presets named in `arg` applied."""
  config = ml_collections.ConfigDict()
  # One seed for parameters, dropout and data order.
  config.seed = 0

  # ---------------------------------------------------------------- data
  config.data = ml_collections.ConfigDict()
  # 'copy', 'chunk_reverse', 'tfds:<builder>/<config>' or 'text:<path prefix>'.
  config.data.name = 'copy'
  # Translation direction for real corpora (unused by the embedded tasks).
  config.data.source_lang = 'de'
  config.data.target_lang = 'en'
  # Embedded tasks: longest sequence L; lengths are uniform in min_length..L.
  # Real corpora: pairs with more tokens on either side are skipped (and counted).
  config.data.max_length = 20
  config.data.min_length = 1
  # Number of distinct symbols of the embedded tasks (Britz: 20).
  config.data.num_symbols = 20
  # chunk_reverse: longest chunk (chunks have 1..chunk_size tokens).
  config.data.chunk_size = 5
  # Sizes of the embedded tasks' splits (Britz: 100,000 and 1,000).
  config.data.num_train = 100_000
  config.data.num_eval = 1_000
  # Batches are padded to one of this many bucket lengths, so jit compiles
  # one train step per bucket instead of one per batch.
  config.data.num_buckets = 4
  # Batch by tokens: each bucket's batches hold as many sentences as fit in this
  # many padded tokens (a multiple of the device count). 0 = train.batch_size sentences.
  config.data.batch_tokens = 0
  # tfds: corpora: TFDS data_dir ('' = TFDS default) and manual_dir (files placed by hand).
  config.data.tfds_data_dir = ''
  config.data.tfds_manual_dir = ''
  # Real corpora: vocabularies, built from the training split into <workdir>/vocab/.
  config.data.vocab = ml_collections.ConfigDict()
  # 'sentencepiece', 'word' (whitespace tokens, <unk> for the rest) or 'char'.
  config.data.vocab.kind = 'sentencepiece'
  # SentencePiece: pieces (Britz: 16k shared BPE); word/char: most frequent kept (0 = all).
  config.data.vocab.size = 16_000
  # Target side size when not shared (0 = data.vocab.size); Shu: 80k source, 40k target words.
  config.data.vocab.target_size = 0
  # One vocabulary for both sides, or one per side.
  config.data.vocab.shared = True
  # SentencePiece model: 'bpe' or 'unigram'.
  config.data.vocab.model_type = 'bpe'
  # word/char: tokens seen fewer times become <unk>.
  config.data.vocab.min_count = 1

  # ---------------------------------------------------------------- model
  config.model = ml_collections.ConfigDict()
  config.model.embed_size = 128
  config.model.hidden_size = 128
  config.model.num_encoder_layers = 2
  config.model.num_decoder_layers = 2
  # Which encoder layers are bidirectional: 'bottom', 'all' or 'none'. A
  # bidirectional layer has hidden_size // 2 units per direction (OpenNMT's
  # brnn), so every encoder layer outputs hidden_size features.
  config.model.bidirectional = 'bottom'
  # Dropout on every LSTM layer's input and on the attentional state.
  config.model.dropout = 0.2
  # Luong input feeding: htilde_{t-1} is concatenated to the decoder input.
  config.model.input_feeding = True
  # Attention query: 'current' (Luong, h_t) or 'previous' (Bahdanau, h_{t-1};
  # the context then also feeds the LSTM input).
  config.model.query = 'current'
  # Decoder initial state: 'dense' (tanh projection of the encoder's final
  # states), 'copy' (same layer counts required) or 'zero'.
  config.model.bridge = 'dense'
  # Optional extra tanh layer between htilde_t and the softmax (Shu: 600). 0 = none.
  config.model.output_hidden_size = 0
  # Initial forget-gate bias (flax's cells start at 0; 1 trains better).
  config.model.forget_bias = 1.0

  config.model.attention = ml_collections.ConfigDict()
  # 'none', 'global', 'local_m', 'local_p', 'flexible' or 'memory'.
  config.model.attention.kind = 'global'
  # Score of global/local/flexible attention: 'dot', 'general', 'concat', 'location'.
  config.model.attention.score = 'general'
  # Local attention: half window D (window 2D+1).
  config.model.attention.window = 10
  # Flexible attention: penalty width sigma and test-time threshold tau.
  config.model.attention.sigma = 1.5
  config.model.attention.tau = math.inf
  # Memory attention: number of slots K, scoring functions and position encodings.
  config.model.attention.num_memory = 64
  config.model.attention.encoder_scoring = 'softmax_slots'
  config.model.attention.decoder_scoring = 'softmax'
  # Memory attention position encodings: 'none', 'renorm' (paper: masked and
  # renormalised over time), 'renorm_mean1' (mean 1 instead of sum 1, a labelled
  # deviation) or 'unnormalized' (xnmt).
  config.model.attention.position_encoding = 'none'
  # Longest source (incl. EOS) for 'location' scores and position encodings.
  # None: derived from the data (max_length + 1).
  config.model.attention.max_source_length = config_dict.placeholder(int)

  # ---------------------------------------------------------------- training
  config.train = ml_collections.ConfigDict()
  config.train.num_steps = 2_000
  config.train.batch_size = 64
  config.train.learning_rate = 3e-3
  # 'constant', 'halve' (halve every epoch from epoch halve_from_epoch, as Shu)
  # or 'warmup_rsqrt' (linear warmup, then lr * sqrt(warmup / step)).
  config.train.schedule = 'constant'
  config.train.halve_from_epoch = 4
  config.train.warmup_steps = 0
  # Global gradient-norm clipping (Luong 5, Shu 3).
  config.train.clip_norm = 5.0
  config.train.label_smoothing = 0.0
  # Every N steps: log, validate (loss and BLEU), checkpoint.
  config.train.log_every = 50
  config.train.eval_every = 500
  config.train.checkpoint_every = 500
  # Checkpoints to keep besides the best one (by validation BLEU).
  config.train.keep_checkpoints = 2
  # Validation BLEU during training decodes with this beam (1 = greedy) and
  # on at most this many sentences (the final evaluation uses all of them).
  config.train.eval_beam_size = 1
  config.train.eval_num_sentences = 1_000
  # Flexible attention fine-tuning: loss -= beta * mean_t g(t).
  config.train.beta = 0.0
  # Start from the best checkpoint of another workdir (fine-tuning).
  config.train.init_from = ''

  # ---------------------------------------------------------------- decoding
  config.decode = ml_collections.ConfigDict()
  config.decode.beam_size = 5
  # GNMT length penalty ((5 + len) / 6) ** alpha; 0 = raw log-probability.
  config.decode.length_penalty = 0.6
  # A hypothesis has at most ratio * source_length + offset tokens (incl. EOS).
  config.decode.max_length_ratio = 2.0
  config.decode.max_length_offset = 10
  # Sentences per decoding batch (beam search uses batch_size // beam_size).
  config.decode.batch_size = 256
  # Decode each split this many times and report the fastest pass as decoding time
  # (min over repeats filters out other work on the machine; 1 = decode once).
  config.decode.timing_repeats = 1

  # ---------------------------------------------------------------- parallelism
  config.parallel = ml_collections.ConfigDict()
  # 'jit' (one program over a device mesh) or 'pmap' (the same step mapped over
  # devices). Both shard the batch along 'data' and replicate the state.
  config.parallel.mode = 'jit'
  # Devices on the 'data' axis: (-1,) = all of them, or (N,) with N = the device count.
  config.parallel.mesh_shape = (-1,)

  for preset in (arg or '').split(','):
    _apply_preset(config, preset.strip())
  return config


def sibling_config(config_file: str, name: str, arg=None):
  """get_config(arg) of configs/<name>.py next to `config_file` (configs build on each other)."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(os.path.abspath(config_file)), f'{name}.py')
  spec = importlib.util.spec_from_file_location(f'nmt_jax_config_{name}', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def _apply_preset(config, preset):
  if not preset:
    return
  if preset.startswith('copy') and preset[4:].isdigit():
    # Britz, Guan & Luong 2017 §4.1.1.
    config.data.name = 'copy'
    config.data.max_length = int(preset[4:])
    config.model.embed_size = 256
    config.model.hidden_size = 256
    config.model.num_encoder_layers = 2
    config.model.num_decoder_layers = 2
    config.model.bidirectional = 'bottom'
    config.model.dropout = 0.2
    config.train.batch_size = 128
    config.train.learning_rate = 1e-4
    config.train.num_steps = 200_000
    config.train.eval_every = 5_000
    config.train.checkpoint_every = 5_000
    config.train.log_every = 200
    config.decode.beam_size = 10
  elif preset == 'chunk':
    config.data.name = 'chunk_reverse'
  elif preset == 'wmt17_de_en':
    # Britz, Guan & Luong 2017 §4.2 (they translate en->de: swap the languages for that).
    config.data.name = 'tfds:wmt17_translate/de-en'
    config.data.source_lang, config.data.target_lang = 'de', 'en'
    config.data.max_length = 50
    config.model.embed_size = config.model.hidden_size = 512
    config.model.num_encoder_layers = config.model.num_decoder_layers = 2
    config.model.dropout = 0.2
    config.train.batch_size = 128
    config.train.learning_rate = 1e-4
    config.train.num_steps = 1_000_000
    config.train.eval_every = config.train.checkpoint_every = 10_000
    config.decode.beam_size = 10
  elif preset == 'shu_de_en':
    # Shu & Nakayama 2017 §5.1: RNNsearch (Bahdanau) base model on WMT'15 De-En.
    # Their encoder has 1000 units per direction; ours splits hidden_size between
    # the two directions (a documented deviation).
    config.data.name = 'tfds:wmt15_translate/de-en'
    config.data.source_lang, config.data.target_lang = 'de', 'en'
    config.data.max_length = 50
    config.model.embed_size = config.model.hidden_size = 1000
    config.model.num_encoder_layers = config.model.num_decoder_layers = 1
    config.model.query = 'previous'
    config.model.input_feeding = False
    config.model.output_hidden_size = 600
    # Word vocabularies of 50k per side, the rest <unk>; pairs over 50 words dropped.
    config.data.vocab.kind = 'word'
    config.data.vocab.size = 50_000
    config.data.vocab.shared = False
    config.model.attention.score = 'concat'
    config.model.attention.sigma = 1.5
    config.model.dropout = 0.0
    config.train.batch_size = 64
    config.train.learning_rate = 1e-4
    config.train.schedule = 'halve'
    config.train.halve_from_epoch = 4
    config.train.clip_norm = 3.0
    config.train.num_steps = 360_000          # ~6 epochs of 3.8M pairs at batch 64
    config.train.eval_every = config.train.checkpoint_every = 10_000
    config.decode.beam_size = 20
  elif preset == 'tiny':
    config.data.max_length = 8
    config.data.num_symbols = 6
    config.data.num_train = 512
    config.data.num_eval = 32
    config.data.num_buckets = 2
    config.model.embed_size = 16
    config.model.hidden_size = 16
    config.model.num_encoder_layers = 1
    config.model.num_decoder_layers = 1
    config.model.dropout = 0.0
    config.model.attention.num_memory = 4
    config.model.attention.window = 2
    config.train.num_steps = 4
    config.train.batch_size = 8
    config.train.log_every = 2
    config.train.eval_every = 2
    config.train.checkpoint_every = 2
    config.train.eval_num_sentences = 32
    config.decode.beam_size = 2
    config.decode.batch_size = 16
  else:
    raise ValueError(
        f'unknown config preset {preset!r}: use one of {", ".join(PRESETS)} '
        '(e.g. --config=configs/global_general.py:copy100)')


# ---------------------------------------------------------------- validation

ATTENTION_KINDS = ('none', 'global', 'local_m', 'local_p', 'flexible', 'memory')
SCORES = ('dot', 'general', 'concat', 'location')
ENCODER_SCORINGS = ('softmax_slots', 'softmax_time', 'sigmoid')
DECODER_SCORINGS = ('softmax', 'sigmoid')
SCHEDULES = ('constant', 'halve', 'warmup_rsqrt')
POSITION_ENCODINGS = ('none', 'renorm', 'renorm_mean1', 'unnormalized')


def _fail(field, value, why, fix):
  from nmt_jax.errors import ConfigError  # pylint: disable=g-import-not-at-top
  raise ConfigError(f'config: {field}={value!r} {why}; {fix} (--config.{field}=...)')


def _choice(config, field, choices):
  value = _get(config, field)
  if value not in choices:
    _fail(field, value, 'is not one of the known values', f'use one of {", ".join(choices)}')


def _positive(config, field, allow_zero=False):
  value = _get(config, field)
  if not isinstance(value, (int, float)) or (value < 0 if allow_zero else value <= 0):
    _fail(field, value, 'must be ' + ('>= 0' if allow_zero else '> 0'), 'give a positive value')


def _get(config, field):
  for part in field.split('.'):
    config = config[part]
  return config


def validate(config):
  """Raises ConfigError on the first value that cannot work; fills derived fields.

  Returns the config, with model.attention.max_source_length set from the
  data when it was left at None.
  """
  for field in ('model.embed_size', 'model.hidden_size', 'model.num_encoder_layers',
                'model.num_decoder_layers', 'train.num_steps', 'train.batch_size',
                'train.learning_rate', 'train.log_every', 'train.eval_every',
                'train.checkpoint_every', 'train.keep_checkpoints', 'train.eval_beam_size',
                'train.eval_num_sentences', 'decode.beam_size', 'decode.max_length_ratio',
                'decode.max_length_offset', 'decode.batch_size', 'decode.timing_repeats', 'data.max_length',
                'data.min_length', 'data.num_symbols', 'data.num_train', 'data.num_eval', 'data.num_buckets',
                'data.chunk_size', 'model.attention.num_memory', 'model.attention.sigma'):
    _positive(config, field)
  for field in ('model.attention.window', 'model.attention.tau', 'train.clip_norm',
                'train.label_smoothing', 'train.beta', 'train.warmup_steps',
                'decode.length_penalty', 'model.output_hidden_size', 'model.dropout',
                'data.batch_tokens'):
    _positive(config, field, allow_zero=True)
  _choice(config, 'model.attention.kind', ATTENTION_KINDS)
  _choice(config, 'model.attention.score', SCORES)
  _choice(config, 'model.attention.encoder_scoring', ENCODER_SCORINGS)
  _choice(config, 'model.attention.decoder_scoring', DECODER_SCORINGS)
  _choice(config, 'model.attention.position_encoding', POSITION_ENCODINGS)
  _choice(config, 'model.query', ('current', 'previous'))
  _choice(config, 'model.bridge', ('dense', 'copy', 'zero'))
  _choice(config, 'model.bidirectional', ('bottom', 'all', 'none'))
  _choice(config, 'train.schedule', SCHEDULES)
  _choice(config, 'parallel.mode', ('jit', 'pmap'))
  _choice(config, 'data.vocab.kind', ('sentencepiece', 'word', 'char'))
  _choice(config, 'data.vocab.model_type', ('bpe', 'unigram'))
  _positive(config, 'data.vocab.min_count')
  _positive(config, 'data.vocab.size', allow_zero=config.data.vocab.kind != 'sentencepiece')
  _positive(config, 'data.vocab.target_size', allow_zero=True)
  model = config.model
  if model.dropout >= 1:
    _fail('model.dropout', model.dropout, 'must be below 1', 'use e.g. 0.2')
  if config.train.label_smoothing >= 1:
    _fail('train.label_smoothing', config.train.label_smoothing, 'must be below 1', 'use e.g. 0.1')
  if model.bidirectional != 'none' and model.hidden_size % 2:
    _fail('model.hidden_size', model.hidden_size,
          'must be even with a bidirectional encoder (hidden_size // 2 units per direction)',
          'use an even size')
  if model.bridge == 'copy' and model.num_encoder_layers != model.num_decoder_layers:
    _fail('model.bridge', model.bridge, 'needs as many encoder as decoder layers',
          "use --config.model.bridge=dense")
  if config.data.min_length > config.data.max_length:
    _fail('data.min_length', config.data.min_length,
          f'exceeds data.max_length={config.data.max_length}', 'lower it')
  if config.data.name == 'chunk_reverse' and config.data.num_symbols < 2:
    _fail('data.num_symbols', config.data.num_symbols, 'must be >= 2 for chunk_reverse',
          'use e.g. 20')
  attention = model.attention
  if attention.kind == 'local_p' and attention.window < 1:
    _fail('model.attention.window', attention.window, 'must be >= 1 for local_p (sigma = D / 2)',
          'use e.g. 10')
  if config.train.beta and attention.kind != 'flexible':
    _fail('train.beta', config.train.beta, f'rewards flexible attention\'s g(t), but kind is '
          f'{attention.kind!r}', 'set --config.train.beta=0')
  if attention.max_source_length is None:
    attention.max_source_length = config.data.max_length + 1
  if attention.kind == 'memory' and attention.position_encoding != 'none' and \
      attention.max_source_length < config.data.max_length + 1:
    _fail('model.attention.max_source_length', attention.max_source_length,
          f'is shorter than the longest source (data.max_length + 1 = {config.data.max_length + 1}) '
          'and position encodings cover only that many positions', 'raise it or leave it unset')
  _check_devices(config)
  return config


def _check_devices(config):
  """The mesh fits the devices, and the training batch splits evenly over them."""
  from nmt_jax import parallel  # pylint: disable=g-import-not-at-top  (imports JAX)
  from nmt_jax import data  # pylint: disable=g-import-not-at-top
  mesh = parallel.make_mesh(config.parallel.mesh_shape)
  parallel.check_divisible(config.train.batch_size, mesh, 'train.batch_size')
  if config.data.batch_tokens:
    boundaries = data.bucket_boundaries(config.data.max_length + 1, config.data.num_buckets)
    data.batch_sizes(boundaries, config.train.batch_size, config.data.batch_tokens,
                     mesh.devices.size)
