"""Config checks: `resolve` once at every entry point, before anything is built.

`resolve(config)` returns a resolved copy (derived fields filled, every value
checked); `validate(config)` only checks. Neither touches devices or files:
what depends on the devices is checked where the mesh is made
(train.make_mesh).
"""

import importlib.util

from nmt_jax import attention
from nmt_jax.config import compiler_options
from nmt_jax.data import batching
from nmt_jax.data import segmentation
from nmt_jax.system import errors

# Fields that must be > 0, and fields that must be >= 0 (besides the attention
# kinds' own fields, which nmt_jax/attention/ checks).
POSITIVE = (
    'model.embed_size',
    'model.hidden_size',
    'model.num_encoder_layers',
    'model.num_decoder_layers',
    'model.scan_unroll',
    'train.num_steps',
    'train.batch_size',
    'train.accumulate_steps',
    'train.learning_rate',
    'train.log_every',
    'train.eval_every',
    'train.checkpoint_every',
    'train.keep_checkpoints',
    'train.eval_beam_size',
    'train.eval_num_sentences',
    'train.sigterm_grace_seconds',
    'train.plateau_patience',
    'train.halve_from_epoch',  # 1-based: 0 halved from the first step
    'train.divergence_steps',
    'decode.beam_size',
    'decode.max_length_ratio',
    'decode.max_length_offset',
    'decode.max_input_length',
    'decode.batch_size',
    'decode.unroll',
    'decode.timing_repeats',
    'decode.temperature',
    'decode.top_p',
    'decode.num_samples',
    'data.max_length',
    'data.min_length',
    'data.num_symbols',
    'data.num_train',
    'data.num_eval',
    'data.chunk_size',
    'data.vocab.min_count',
)
NON_NEGATIVE = (
    'data.num_buckets',
    'train.clip_norm',
    'train.label_smoothing',
    'train.weight_decay',
    'train.ema_decay',
    'train.beta',
    'train.num_epochs',
    'train.divergence_factor',
    'train.warmup_steps',
    'train.plateau_decay',
    'train.plateau_min_delta',
    'train.early_stopping_patience',
    'train.keep_every',
    'train.profile_steps',
    'train.loss_chunk',
    'train.profile_from_step',
    'train.attention_images',
    'decode.nbest',
    'decode.top_k',
    'decode.length_penalty',
    'decode.coverage_penalty',
    'model.output_hidden_size',
    'model.readout_size',
    'model.dropout',
    'model.recurrent_dropout',
    'model.word_dropout',
    'model.residual',
    'model.init_uniform',
    'data.batch_tokens',
    'data.vocab.target_size',
)
FINITE = ('model.forget_bias',)
# Fractions that must be below 1 (and are >= 0 above): field -> (why, fix).
BELOW_ONE = {
    'model.dropout': ('', 'use e.g. 0.2'),
    'model.recurrent_dropout': ('', 'use e.g. 0.2, or 0 for none'),
    'model.word_dropout': ('', 'use e.g. 0.1, or 0 for none'),
    'train.label_smoothing': ('', 'use e.g. 0.1'),
    'train.plateau_decay': (
        ' (it multiplies the learning rate)',
        'use e.g. 0.5, or 0 for no decay',
    ),
    'train.ema_decay': (
        ' (the average would never move)',
        'use e.g. 0.999, or 0 for none',
    ),
}
SEEDS = ('seed', 'decode.sample_seed')
# Logits of ~100 divided by less overflow float32 (3.4e38) on the way to
# the softmax.
MIN_TEMPERATURE = 1e-6
# Sampling's fields (decode.method='sample') and their values that leave
# sampling as it is: another value under search would go unused.
SAMPLING = {
    'decode.temperature': 1.0,
    'decode.top_k': 0,
    'decode.top_p': 1.0,
    'decode.num_samples': 1,
}
CHOICES = {
    'model.query': ('current', 'previous'),
    'model.readout': ('luong', 'bahdanau_maxout'),
    'model.bridge': ('dense', 'copy', 'zero'),
    'model.bidirectional': ('bottom', 'all', 'none'),
    'model.dtype': ('float32', 'bfloat16'),
    'decode.gate_table': ('auto', 'on', 'off'),
    'model.gate_table': ('auto', 'on', 'off'),
    'train.schedule': ('constant', 'halve', 'warmup_rsqrt'),
    'train.beta_normalization': ('sentence', 'token'),
    'train.optimizer': ('adam', 'sgd'),
    'train.dropout_rng': ('threefry2x32', 'philox2x32'),
    'train.plateau_metric': ('bleu', 'loss'),
    'decode.alignments': ('', 'pharaoh', 'soft'),
    'decode.method': ('search', 'sample'),
    'decode.ensemble_average': ('log_probs', 'probs'),
    'parallel.mode': ('jit', 'pmap'),
    'data.vocab.kind': ('sentencepiece', 'word', 'char'),
    'data.bucketing': ('auto', 'even', 'fitted'),
    'data.vocab.model_type': ('bpe', 'unigram'),
    'data.segmentation': segmentation.KINDS,
}


def resolve(config):
  """A checked copy of `config` with its derived fields filled.

  model.attention.max_source_length (None) becomes data.max_length + 1.
  Raises ConfigError on the first value that cannot work.
  """
  config = config.copy_and_resolve_references()
  # The fields the derived ones come from first: their errors name them.
  errors.positive('data.max_length', config.data.max_length)
  if config.model.attention.max_source_length is None:
    config.model.attention.max_source_length = config.data.max_length + 1
  if config.decode.max_input_length is None:
    config.decode.max_input_length = 4 * config.data.max_length
  errors.positive(
      'model.attention.max_source_length',
      config.model.attention.max_source_length,
  )
  validate(config)
  return config


def validate(config):
  """Raises ConfigError on a resolved config's first value that cannot work."""
  for field in POSITIVE:
    errors.positive(field, _get(config, field))
  for field in NON_NEGATIVE:
    errors.non_negative(field, _get(config, field))
  for field in FINITE:
    errors.finite(field, _get(config, field))
  for field, choices in CHOICES.items():
    errors.one_of(*choices)(field, _get(config, field))
  for field, (why, fix) in BELOW_ONE.items():
    if _get(config, field) >= 1:
      raise errors.config_error(
          field, _get(config, field), f'must be below 1{why}', fix
      )
  for field in SEEDS:
    seed = _get(config, field)
    if not (isinstance(seed, int) and 0 <= seed < 2**32) or isinstance(
        seed, bool
    ):
      raise errors.config_error(
          field, seed, 'must be an integer in [0, 2**32)', 'use e.g. 0'
      )
  vocab = config.data.vocab
  if vocab.kind == 'sentencepiece':
    errors.positive('data.vocab.size', vocab.size)
  else:
    errors.non_negative('data.vocab.size', vocab.size)
  if compiler_options.parse(config.compiler_options) and (
      config.parallel.mode == 'pmap'
  ):
    raise errors.config_error(
        'compiler_options',
        config.compiler_options,
        'needs parallel.mode=jit (jax.pmap takes no compiler options)',
        "set --config.parallel.mode=jit, or --config.compiler_options=''",
    )
  t = config.train
  if not config.data.batch_tokens and t.batch_size % t.accumulate_steps:
    raise errors.config_error(
        'train.accumulate_steps',
        t.accumulate_steps,
        f'does not divide train.batch_size={t.batch_size} into'
        ' micro-batches of equal size',
        'use a divisor of train.batch_size',
    )
  if config.decode.step is not None:
    errors.non_negative('decode.step', config.decode.step)
  if t.keep_every and t.keep_every % t.checkpoint_every:
    raise errors.config_error(
        'train.keep_every',
        t.keep_every,
        f'is not a multiple of train.checkpoint_every={t.checkpoint_every},'
        ' so no step it keeps would be saved',
        f'use a multiple of {t.checkpoint_every}',
    )
  _check_model(config.model)
  _check_data(config.data)
  _check_decode(config)
  _check_attention_images(config)
  # data.batch_tokens holds a sentence of the longest bucket (train.make_mesh
  # checks a multiple of the device count).
  batching.training_batch_sizes(config)
  attention.validate(config)
  kind = attention.get(config.model.attention.kind)
  if config.train.beta and not kind.HAS_STRENGTH:
    raise errors.config_error(
        'train.beta',
        config.train.beta,
        "rewards flexible attention's g(t), but kind is "
        f'{config.model.attention.kind!r}',
        'set --config.train.beta=0',
    )
  if config.train.init_from_learning_rate and not config.train.init_from:
    raise errors.config_error(
        'train.init_from_learning_rate',
        True,
        'takes the learning rate of the run train.init_from names, but that'
        ' is empty',
        'give train.init_from, or set train.init_from_learning_rate=False',
    )
  if config.train.weight_decay and config.train.optimizer != 'adam':
    raise errors.config_error(
        'train.weight_decay',
        config.train.weight_decay,
        "is AdamW's decoupled decay, but train.optimizer is"
        f' {config.train.optimizer!r}',
        'set --config.train.optimizer=adam, or train.weight_decay=0',
    )


def _check_model(model):
  kind = attention.get(model.attention.kind)
  if model.readout == 'luong' and not kind.HAS_CONTEXT and model.readout_size:
    raise errors.config_error(
        'model.readout_size',
        model.readout_size,
        'sizes tanh(W_c [c_t; h_t]), which attention kind'
        f' {model.attention.kind!r} does not have (htilde_t = h_t)',
        'set model.readout_size=0, or model.output_hidden_size='
        f'{model.readout_size} for a tanh layer before the softmax',
    )
  if model.tie_embeddings:
    readout = model.readout_size or model.hidden_size
    width = model.output_hidden_size or readout
    if width != model.embed_size:
      raise errors.config_error(
          'model.tie_embeddings',
          True,
          f'needs the layer before the softmax ({width} units) to have'
          f' model.embed_size={model.embed_size} units',
          f'set model.readout_size={model.embed_size} (or output_hidden_size),'
          ' or tie_embeddings=False',
      )
  for field in ('dropout', 'word_dropout'):
    if model.gate_table == 'on' and model[field]:
      raise errors.config_error(
          'model.gate_table',
          'on',
          f'cannot train with model.{field}={model[field]} (the table holds'
          ' the gates of undropped embeddings)',
          f"use 'auto' (a table wherever it applies) or model.{field}=0",
      )
  deepest = max(model.num_encoder_layers, model.num_decoder_layers)
  if not isinstance(model.residual, int) or isinstance(model.residual, bool):
    raise errors.config_error(
        'model.residual', model.residual, 'must be a layer index', 'use e.g. 1'
    )
  if model.residual >= deepest:
    raise errors.config_error(
        'model.residual',
        model.residual,
        f'is no layer of a stack (at most {deepest} layers, counted from 0)',
        f'use 1 to {deepest - 1}, or 0 for none',
    )
  if model.bidirectional != 'none' and model.hidden_size % 2:
    raise errors.config_error(
        'model.hidden_size',
        model.hidden_size,
        'must be even with a bidirectional encoder (hidden_size // 2 units '
        'per direction)',
        'use an even size',
    )
  if model.bridge == 'copy' and (
      model.num_encoder_layers != model.num_decoder_layers
  ):
    raise errors.config_error(
        'model.bridge',
        model.bridge,
        'needs as many encoder as decoder layers',
        'use --config.model.bridge=dense',
    )
  if (
      model.bridge == 'zero'
      and not attention.get(model.attention.kind).HAS_CONTEXT
  ):
    raise errors.config_error(
        'model.bridge',
        model.bridge,
        f'with attention kind {model.attention.kind!r} never lets the'
        ' decoder read the source (no initial state, no context)',
        'use --config.model.bridge=dense or copy',
    )


def _check_decode(config):
  decode = config.decode
  compiler_options.parse(
      decode.get('compiler_options', ''), compiler_options.DECODE_FIELD
  )
  if decode.top_p > 1:
    raise errors.config_error(
        'decode.top_p',
        decode.top_p,
        'must be in (0, 1] (a probability mass)',
        'use e.g. 0.9, or 1.0 for every word',
    )
  if decode.method == 'sample':
    if decode.temperature < MIN_TEMPERATURE:
      raise errors.config_error(
          'decode.temperature',
          decode.temperature,
          f'is below {MIN_TEMPERATURE:g}: the logits divided by it leave'
          " float32's range",
          'use greedy search (decode.method=search) for the limit of 0, or'
          ' e.g. 0.1',
      )
    if decode.coverage_penalty:
      raise errors.config_error(
          'decode.coverage_penalty',
          decode.coverage_penalty,
          'rescores the finished hypotheses of beam search, but'
          " decode.method='sample' draws samples, which it would ignore",
          'use decode.method=search with decode.beam_size > 1, or set it to 0',
      )
    if decode.nbest > decode.num_samples:
      raise errors.config_error(
          'decode.nbest',
          decode.nbest,
          f'exceeds decode.num_samples={decode.num_samples}',
          'draw more samples or lower nbest',
      )
  else:
    for field, value in SAMPLING.items():
      if _get(config, field) != value:
        raise errors.config_error(
            field,
            _get(config, field),
            f'is a sampling setting, but decode.method is {decode.method!r}',
            f'add --config.decode.method=sample, or leave it at {value}',
        )
    if decode.nbest > decode.beam_size:
      raise errors.config_error(
          'decode.nbest',
          decode.nbest,
          f'exceeds decode.beam_size={decode.beam_size}',
          'raise the beam or lower nbest',
      )
  if decode.alignments_file and decode.alignments != 'soft':
    raise errors.config_error(
        'decode.alignments_file',
        decode.alignments_file,
        "is where translate writes decode.alignments='soft', but"
        f' decode.alignments is {decode.alignments!r}',
        'set --config.decode.alignments=soft, or drop the file',
    )
  if decode.coverage_penalty and decode.beam_size == 1:
    raise errors.config_error(
        'decode.coverage_penalty',
        decode.coverage_penalty,
        'rescores the finished hypotheses of beam search, but'
        ' decode.beam_size=1 is greedy search, which has one',
        'raise decode.beam_size, or set it to 0',
    )
  if decode.alignments or decode.replace_unk or decode.coverage_penalty:
    kind = attention.get(config.model.attention.kind)
    if not kind.HAS_CONTEXT:
      field = next(
          f
          for f in ('alignments', 'replace_unk', 'coverage_penalty')
          if decode[f]
      )
      raise errors.config_error(
          f'decode.{field}',
          decode[field],
          f'needs attention weights; kind {config.model.attention.kind!r} has'
          ' none',
          f'turn decode.{field} off',
      )
  if decode.replace_unk and (
      config.data.vocab.kind != 'word' or ':' not in config.data.name
  ):
    raise errors.config_error(
        'decode.replace_unk',
        True,
        'copies source words for <unk>, so it needs a word vocabulary of a'
        ' real corpus (data.vocab.kind=word, data.name=text:... or tfds:...)',
        'turn it off',
    )


def _check_attention_images(config):
  images = config.train.attention_images
  if not images:
    return
  if not attention.get(config.model.attention.kind).HAS_CONTEXT:
    raise errors.config_error(
        'train.attention_images',
        images,
        f'draws attention weights; kind {config.model.attention.kind!r} has'
        ' none',
        'set --config.train.attention_images=0',
    )
  if importlib.util.find_spec('matplotlib') is None:
    raise errors.config_error(
        'train.attention_images',
        images,
        'draws with matplotlib, which is not installed',
        'pip install -e ".[notebooks]", or set it to 0',
    )


def _check_data(data):
  if data.vocab.sentencepiece_model and (
      data.vocab.kind != 'sentencepiece' or not data.vocab.shared
  ):
    raise errors.config_error(
        'data.vocab.sentencepiece_model',
        data.vocab.sentencepiece_model,
        'is one SentencePiece model for both sides, but data.vocab.kind is'
        f' {data.vocab.kind!r} and data.vocab.shared {data.vocab.shared}',
        'set --config.data.vocab.kind=sentencepiece'
        ' --config.data.vocab.shared=true',
    )
  if data.segmentation != 'none' and data.vocab.kind != 'word':
    raise errors.config_error(
        'data.segmentation',
        data.segmentation,
        'joins the pieces of a word vocabulary, but data.vocab.kind is'
        f' {data.vocab.kind!r}',
        "set --config.data.vocab.kind=word (the corpus's pieces are its"
        " words), or data.segmentation='none'",
    )
  if data.min_length > data.max_length:
    raise errors.config_error(
        'data.min_length',
        data.min_length,
        f'exceeds data.max_length={data.max_length}',
        'lower it',
    )
  if data.name == 'chunk_reverse' and data.num_symbols < 2:
    raise errors.config_error(
        'data.num_symbols',
        data.num_symbols,
        'must be >= 2 for chunk_reverse',
        'use e.g. 20',
    )


def _get(config, field):
  for part in field.split('.'):
    config = config[part]
  return config
