"""Britz, Guan & Luong 2017 Table 1 on the copy task, at CPU scale.

No attention, memory attention with K in {1, 4, 16, 32, 64} with and without
position encodings (plus K = 64 with mean-1 and with unnormalised encodings, ablations), and global
(concat) attention, at each L given as the argument (default 20), evaluated with
beam 10 on the 1,000 validation sentences.
The model is the default CPU size (128 units, 2000 steps of batch 64), not the
paper's 256 units and up to 200k steps:

  python -m nmt_jax.sweep run --sweep=configs/sweeps/britz_copy.py:20,50 --root=runs/britz
  python -m nmt_jax.sweep aggregate --root=runs/britz --markdown=runs/britz/results.md

Add --set=field=value to change every run (e.g. --set=train.num_steps=5000), and
--only=PATTERN,... to run a subset (e.g. --only='L100/no_attention,L100/memory_k64*').
"""

NUM_MEMORY = (1, 4, 16, 32, 64)


def get_sweep(arg=None):
  runs = []
  for length in (int(x) for x in (arg or '20').split(',')):
    common = {'data.max_length': length, 'decode.beam_size': 10}
    runs.append({
        'name': f'L{length}/no_attention',
        'config': '../no_attention.py',
        'overrides': common,
    })
    for k in NUM_MEMORY:
      for pe, suffix in (('none', ''), ('renorm', '_pe')):
        runs.append({
            'name': f'L{length}/memory_k{k}{suffix}',
            'config': '../memory_k64.py',
            'overrides': {
                **common,
                'model.attention.num_memory': k,
                'model.attention.position_encoding': pe,
            },
        })
    # Not in the paper: its position encodings renormalised to mean 1 instead of sum 1
    # (the paper's version shrinks the encoder logits about |S|-fold), and not
    # renormalised at all (as neulab/xnmt does).
    for pe, suffix in (
        ('renorm_mean1', '_pe_mean1'),
        ('unnormalized', '_pe_unnormalized'),
    ):
      runs.append({
          'name': f'L{length}/memory_k64{suffix}',
          'config': '../memory_k64.py',
          'overrides': {
              **common,
              'model.attention.num_memory': 64,
              'model.attention.position_encoding': pe,
          },
      })
    runs.append({
        'name': f'L{length}/global_concat',
        'config': '../global_concat.py',
        'overrides': common,
    })
  return runs
