"""Config presets: the names after ':' in `--config=configs/<name>.py:ARG`.

Each changes a default config in place; nmt_jax/config/defaults.py lists them.
"""

import re


def copy(config, length: int):
  """Britz, Guan & Luong 2017 4.1.1: the copy task at L = length.

  Their "2-layer bidirectional encoder" (google/seq2seq) runs one 2-layer
  stack per direction; here the bottom layer is bidirectional (GNMT's
  encoder), model.bidirectional = 'all' makes both layers bidirectional.
  """
  config.data.name = 'copy'
  config.data.max_length = length
  config.model.embed_size = config.model.hidden_size = 256
  config.model.num_encoder_layers = config.model.num_decoder_layers = 2
  config.model.bidirectional = 'bottom'
  config.model.dropout = 0.2
  config.train.batch_size = 128
  config.train.learning_rate = 1e-4
  config.train.num_steps = 200_000
  config.train.eval_every = config.train.checkpoint_every = 5_000
  config.train.log_every = 200
  config.decode.beam_size = 10


def chunk(config):
  """The chunk_reverse reordering task instead of copy."""
  config.data.name = 'chunk_reverse'


def wmt17_de_en(config):
  """Britz, Guan & Luong 2017 4.2.

  They translate en->de: swap the languages for that.
  """
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


def rnnsearch(config):
  """Shu & Nakayama's base model (RNNsearch, Bahdanau) at any size.

  The query is h_{t-1}, the context and the previous word feed the decoder
  LSTM (no input feeding), the concat (additive) score, one readout layer
  before the softmax.
  """
  config.model.query = 'previous'
  config.model.input_feeding = False
  config.model.attention.score = 'concat'
  config.model.readout = 'luong'
  config.model.output_hidden_size = 0


def shu_de_en(config):
  """Shu & Nakayama 2017 5.1: RNNsearch (Bahdanau) base model on WMT'15 De-En.

  One 600-unit layer before the softmax (the readout, tanh(W_c [c_t; h_t])).
  Their encoder has 1000 units per direction; ours splits hidden_size between
  the two directions (a documented deviation).
  """
  rnnsearch(config)
  config.data.name = 'tfds:wmt15_translate/de-en'
  config.data.source_lang, config.data.target_lang = 'de', 'en'
  config.data.max_length = 50
  config.model.embed_size = config.model.hidden_size = 1000
  config.model.num_encoder_layers = config.model.num_decoder_layers = 1
  config.model.readout_size = 600
  # 50k-word vocabularies per side, the rest <unk>; pairs over 50 words dropped.
  config.data.vocab.kind = 'word'
  config.data.vocab.size = 50_000
  config.data.vocab.shared = False
  config.model.attention.sigma = 1.5
  config.model.dropout = 0.0
  config.train.batch_size = 64
  config.train.learning_rate = 1e-4
  config.train.schedule = 'halve'
  config.train.halve_from_epoch = 4
  config.train.clip_norm = 3.0
  config.train.num_steps = 360_000  # ~6 epochs of 3.8M pairs at batch 64
  config.train.eval_every = config.train.checkpoint_every = 10_000
  config.decode.beam_size = 20


def luong_sgd(config):
  """Luong, Pham & Manning 2015's training recipe on top of any model.

  Plain SGD at learning rate 1.0, halved every epoch after epoch 5, 10
  epochs, gradient norm clipped at 5, batch 128. (Their uniform [-0.1, 0.1]
  initialisation is not reproduced: parameters keep the model's initialisers.)
  """
  config.train.optimizer = 'sgd'
  config.train.learning_rate = 1.0
  config.train.schedule = 'halve'
  config.train.halve_from_epoch = 6
  config.train.num_epochs = 10.0
  config.train.clip_norm = 5.0
  config.train.batch_size = 128
  config.train.warmup_steps = 0


def tiny(config):
  """A test-sized model (16 units, 4 steps) for the test suite."""
  config.data.max_length = 8
  config.data.num_symbols = 6
  config.data.num_train = 512
  config.data.num_eval = 32
  config.data.num_buckets = 2
  config.model.embed_size = config.model.hidden_size = 16
  config.model.num_encoder_layers = config.model.num_decoder_layers = 1
  config.model.dropout = 0.0
  config.model.attention.num_memory = 4
  config.model.attention.window = 2
  config.train.num_steps = 4
  config.train.batch_size = 8
  config.train.log_every = config.train.eval_every = 2
  config.train.checkpoint_every = 2
  config.train.eval_num_sentences = 32
  config.decode.beam_size = 2
  config.decode.batch_size = 16


# name -> preset(config); 'copyN' passes N as a second argument.
PRESETS = {
    'copyN': copy,
    'chunk': chunk,
    'wmt17_de_en': wmt17_de_en,
    'rnnsearch': rnnsearch,
    'shu_de_en': shu_de_en,
    'luong_sgd': luong_sgd,
    'tiny': tiny,
}


# The presets that choose the data: a second one would silently undo the
# first, except chunk after copyN (the chunk task at copyN's length).
DATA_PRESETS = ('copyN', 'chunk', 'wmt17_de_en', 'shu_de_en')


def apply_presets(config, arg):
  """Applies the comma-separated presets of `arg` in order.

  Two that choose the data (DATA_PRESETS) are refused, but for chunk after
  copyN: 'chunk,copy50' would be the copy task, 'copy100,copy50' L = 50.
  """
  chosen_by = None  # (name, preset) that chose the data
  for name in (arg or '').split(','):
    name = name.strip()
    numbered = re.fullmatch(r'([a-z_]+?)(\d+)', name)
    if not name:
      continue
    if name in PRESETS:
      preset = name
      PRESETS[name](config)
    elif numbered and f'{numbered.group(1)}N' in PRESETS:
      preset = f'{numbered.group(1)}N'
      if int(numbered.group(2)) < 1:
        raise ValueError(
            f'config preset {name!r}: N is a sequence length, at least 1'
            f' (e.g. {numbered.group(1)}50)'
        )
      PRESETS[preset](config, int(numbered.group(2)))
    else:
      raise ValueError(
          f'unknown config preset {name!r}: use one of {", ".join(PRESETS)} '
          '(e.g. --config=configs/global_general.py:copy100)'
      )
    if preset not in DATA_PRESETS:
      continue
    if chosen_by and (preset, chosen_by[1]) != ('chunk', 'copyN'):
      raise ValueError(
          f'config presets {chosen_by[0]!r} and {name!r} both choose the data'
          ' (the later would undo the earlier); keep one (copy50,chunk is'
          ' the chunk task at L = 50)'
      )
    chosen_by = (name, preset)
