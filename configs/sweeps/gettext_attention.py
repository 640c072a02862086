"""The papers' attention kinds on real language: the gettext corpus at a 4k BPE.

No attention, global (general, concat), local-p, memory K = 32/64 (and 64 with
position encodings, summing to 1 or averaging 1 over the sentence) on Luong's
decoder (input feeding), and flexible attention on the Bahdanau-style decoder
it builds on, before and after its beta fine-tuning; each trains until
validation cross-entropy stops improving (every 1,000 steps of 64 sentences;
the learning rate halves at each validation without a gain, training stops
after three in a row, at most 30,000 steps) and is evaluated on the whole test
split with beam 5, no length penalty, BLEU and chrF on detokenized text. The
model is the one of experiments/peer_parity/parity.py: a 1-layer bidirectional
encoder (128 units per direction) copied into a 1-layer decoder of 256,
embeddings 256, dropout 0.2, Adam 1e-3, clipping 5.

The argument is the folder `real_corpus_parity prepare` wrote (its
pieces.{train,dev,test}.{en,de}). `bash experiments/gettext_attention/run.sh ROOT`
runs all of the below; by hand:

  python -m experiments.corpora.gettext_catalogues --output=/tmp/gt_corpus --lang=de
  python -m experiments.peer_parity.parity prepare --corpus=/tmp/gt_corpus/corpus \
      --work=/tmp/parity
  python -m nmt_jax.sweep run --sweep=configs/sweeps/gettext_attention.py:/tmp/parity/data \
      --root=runs/gettext --shard=0/2      # and --shard=1/2 on the other core
  python -m nmt_jax.sweep tau --workdir=runs/gettext/flexible --beam_size=5
  python -m benchmarks.trained_decode --root=runs/gettext --threads=1 \
      --json=runs/gettext/decode.json    # decoding time against global general
  python -m nmt_jax.sweep aggregate --root=runs/gettext --markdown=runs/gettext/results.md

A run takes about 4-7 minutes of one core per 1,000 steps; an interrupted sweep
resumes where it stopped.
"""


def common_overrides(data: str):
  """The data, the model and the training of every run: `data` holds pieces.*."""
  return {
      'data.name': f'text:{data}/pieces',
      'data.source_lang': 'en',
      'data.target_lang': 'de',
      'data.max_length': 50,
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
      # To a plateau of validation cross-entropy: the learning rate halves
      # after each validation that does not improve it, and training stops
      # after three in a row (Adam at 1e-3 alone still gains 2% a 1,000 steps
      # at 10,000).
      'train.num_steps': 30_000,
      'train.eval_every': 1_000,
      'train.checkpoint_every': 1_000,
      'train.plateau_metric': 'loss',
      'train.plateau_decay': 0.5,
      'train.plateau_patience': 1,
      'train.early_stopping_patience': 3,
      'decode.beam_size': 5,
      'decode.length_penalty': 0.0,
      # The test split is kept whole (no pair dropped for its length).
      'decode.max_input_length': 1_000,
  }


def get_sweep(arg=None):
  if not arg:
    raise ValueError(
        'gettext_attention.py needs the prepared data folder: '
        '--sweep=configs/sweeps/gettext_attention.py:/tmp/parity/data'
    )
  common = common_overrides(arg)
  luong = [
      ('no_attention', '../no_attention.py', {}),
      ('global_general', '../global_general.py', {}),
      ('global_concat', '../global_concat.py', {}),
      ('local_p', '../local_p.py', {}),
      ('memory_k32', '../memory_k32.py', {}),
      ('memory_k64', '../memory_k64.py', {}),
      # With position encodings: the configuration Britz et al. found on par
      # with attention on WMT.
      ('memory_k64_pe', '../memory_k64_pe.py', {}),
      # The encodings renormalised to mean 1 over the sentence, not sum 1:
      # on the copy task as good as no encodings, where the literal sum-1
      # reading shrank the encoder's logits with the source length.
      (
          'memory_k64_pe_mean1',
          '../memory_k64_pe.py',
          {'model.attention.position_encoding': 'renorm_mean1'},
      ),
  ]
  runs = [
      {'name': name, 'config': config, 'overrides': {**common, **extra}}
      for name, config, extra in luong
  ]
  runs += [
      {
          'name': 'flexible',
          'config': '../flexible.py',
          'overrides': common,
      },
      # One epoch with beta = 0.1 from the flexible run's best checkpoint, at
      # the rate it trained at there: fresh Adam moments at the first rate
      # (1e-3) undid the converged model (-3.3 BLEU in the epoch).
      {
          'name': 'flexible_finetune',
          'config': '../flexible_finetune.py',
          'overrides': {
              **common,
              'train.init_from': '{root}/flexible',
              'train.init_from_learning_rate': True,
              'train.plateau_decay': 0.0,
              'train.early_stopping_patience': 0,
          },
      },
  ]
  return runs
