"""The three papers' comparisons on a real corpus, three seeds a comparison.

One sweep per corpus; the argument is the folder of prepared pieces
(`python -m experiments.peer_parity.parity prepare` writes
pieces.{train,dev,test}.{en,de}), then optional key=value settings:

  python -m nmt_jax.sweep run \\
      --sweep=configs/sweeps/paper_protocols.py:/work/data/gettext_parity/data \\
      --root=/work/runs/gettext_protocols
  # the second corpus, its longer segments kept whole
  ...:/work/data/help_parity/data,max_length=120
  # seeds 2 and 3 of the memory combination chosen on validation (seed 1)
  ...:DATA,memory=sigmoid/softmax/none

`bash experiments/paper_protocols/run.sh` runs it on two cores, resumable.

The comparisons (experiments/paper_protocols/README.md states each claim and
the verdict rule):
  Luong et al. 2015: local-p (general) and local-m against global general,
    dot and location, on their decoder (input feeding, attention on h_t).
  Britz et al. 2017: memory K = 64 with each of its four scoring
    combinations (softmax over time or sigmoid at the encoder, softmax or
    sigmoid at the decoder), with and without position encodings, seed 1; the
    best on validation BLEU then gets seeds 2 and 3 (memory=...). Baselines:
    global concat (the paper's additive attention) and global location
    (a query-independent lookup over positions, what a memory read by
    softmax(W_beta h_t) becomes when K >= |S|).
  Shu & Nakayama 2017: flexible and global concat on the same RNNsearch
    decoder (attention on h_{t-1}, no input feeding), flexible then fine-tuned
    one epoch with beta = 0.1; tau is chosen on dev afterwards (`sweep tau
    --select_on_dev`).

Training, the same for every run: Adam at 1e-3 for 16 epochs, then halved at
the start of each of 8 more (Luong et al.'s shape, a constant rate and then
halvings every epoch, at the length these corpora need: with their 12 epochs,
halved from the 9th, validation loss stopped at 1.74 on gettext where a
constant rate reaches 1.55; experiments/paper_protocols/README.md);
validation every 500 steps, and the checkpoint with the best
validation BLEU is evaluated on the whole test split, beam 5, no length
penalty. The model is the one of experiments/peer_parity/parity.py: a
1-layer bidirectional encoder (128 units per direction) copied into a 1-layer
decoder of 256, embeddings 256, dropout 0.2, clipping 5.
"""

SEEDS = (1, 2, 3)
MEMORY_ENCODER = ('softmax_time', 'sigmoid')
MEMORY_DECODER = ('softmax', 'sigmoid')
POSITION_ENCODINGS = ('none', 'renorm')


def common_overrides(data: str, max_length: int):
  """The data, the model and the training of every run."""
  return {
      'data.name': f'text:{data}/pieces',
      'data.source_lang': 'en',
      'data.target_lang': 'de',
      'data.max_length': max_length,
      'data.vocab.kind': 'word',
      'data.vocab.size': 0,
      'data.vocab.min_count': 1,
      'data.vocab.shared': False,
      # The pieces are SentencePiece's: BLEU and chrF on the joined text.
      'data.segmentation': 'sentencepiece',
      'model.bidirectional': 'all',
      'model.bridge': 'copy',
      'model.num_encoder_layers': 1,
      'model.num_decoder_layers': 1,
      'model.hidden_size': 256,
      'model.embed_size': 256,
      'model.dropout': 0.2,
      'train.learning_rate': 1e-3,
      'train.clip_norm': 5.0,
      'train.batch_size': 64,
      'train.label_smoothing': 0.0,
      'train.num_epochs': 24.0,
      'train.schedule': 'halve',
      'train.halve_from_epoch': 17,
      'train.eval_every': 500,
      'train.checkpoint_every': 500,
      'decode.beam_size': 5,
      'decode.length_penalty': 0.0,
      # The test split is kept whole (no pair dropped for its length).
      'decode.max_input_length': 1_000,
  }


def _memory(encoder: str, decoder: str, position: str):
  name = f'memory_{encoder}_{decoder}' + ('_pe' if position != 'none' else '')
  overrides = {
      'model.attention.encoder_scoring': encoder,
      'model.attention.decoder_scoring': decoder,
      'model.attention.position_encoding': position,
  }
  return name, '../memory_k64.py', overrides


# RNNsearch: the attention reads h_{t-1}, the context is not fed back.
_RNNSEARCH = {'model.query': 'previous', 'model.input_feeding': False}


def _parse(arg: str):
  if not arg:
    raise ValueError(
        'paper_protocols.py needs the prepared data folder: '
        '--sweep=configs/sweeps/paper_protocols.py:/work/data/gettext_parity/data'
    )
  data, *settings = arg.split(',')
  options = {'max_length': '50', 'memory': ''}
  for setting in settings:
    key, sep, value = setting.partition('=')
    if not sep or key not in options:
      raise ValueError(
          f'paper_protocols.py: {setting!r} is not one of '
          'max_length=N or memory=ENCODER/DECODER/POSITION'
      )
    options[key] = value
  memory = None
  if options['memory']:
    parts = options['memory'].split('/')
    if (
        len(parts) != 3
        or parts[0] not in MEMORY_ENCODER
        or parts[1] not in MEMORY_DECODER
        or parts[2] not in POSITION_ENCODINGS
    ):
      raise ValueError(
          f'paper_protocols.py: memory={options["memory"]!r}; give '
          f'ENCODER/DECODER/POSITION from {MEMORY_ENCODER}, '
          f'{MEMORY_DECODER}, {POSITION_ENCODINGS}'
      )
    memory = tuple(parts)
  return data, int(options['max_length']), memory


def _finetune(name: str, common, extra, seed: int):
  """One epoch with beta = 0.1 from the flexible run's best checkpoint, at
  the rate it trained at there (fresh Adam moments at 1e-3 undo a converged
  model)."""
  return {
      'name': f'{name}_finetune/seed{seed}',
      'config': '../flexible_finetune.py',
      'overrides': {
          **common,
          **extra,
          'seed': seed,
          'train.init_from': f'{{root}}/{name}/seed{seed}',
          'train.init_from_learning_rate': True,
          'train.schedule': 'constant',
          'train.num_epochs': 1.0,
      },
  }


def get_sweep(arg=None):
  data, max_length, memory = _parse(arg)
  common = common_overrides(data, max_length)
  # In the order the verdicts complete: Luong's pair, Shu & Nakayama's pair,
  # Britz et al.'s choice on validation (every combination, seed 1) and its
  # baselines, then the winner's seeds 2 and 3, then Luong's other kinds.
  luong = [
      ('global_general', '../global_general.py', {}),
      ('local_p', '../local_p.py', {}),
  ]
  shu = [
      ('global_concat_rnnsearch', '../global_concat.py', _RNNSEARCH),
      ('flexible_rnnsearch', '../flexible.py', _RNNSEARCH),
  ]
  britz = [
      ('global_concat', '../global_concat.py', {}),
      ('global_location', '../global_location.py', {}),
  ]
  combinations = [
      _memory(encoder, decoder, position)
      for position in POSITION_ENCODINGS
      for encoder in MEMORY_ENCODER
      for decoder in MEMORY_DECODER
  ]
  luong_others = [
      ('local_m', '../local_m.py', {}),
      ('global_dot', '../global_dot.py', {}),
  ]
  runs = []

  def add(group, seeds):
    for seed in seeds:
      for name, config, extra in group:
        runs.append({
            'name': f'{name}/seed{seed}',
            'config': config,
            'overrides': {**common, **extra, 'seed': seed},
        })
        if name == 'flexible_rnnsearch':
          runs.append(_finetune(name, common, extra, seed))

  add(luong, SEEDS)
  add(shu, SEEDS)
  add(britz + combinations, SEEDS[:1])
  add(britz + ([_memory(*memory)] if memory else []), SEEDS[1:])
  add(luong_others, SEEDS)
  # The memory winner is among the combinations at seed 1: kept once.
  unique = {}
  for run in runs:
    unique.setdefault(run['name'], run)
  return list(unique.values())
