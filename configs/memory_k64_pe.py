"""Britz, Guan & Luong 2017 memory attention, K = 64, with position encodings.

Position encodings as in the paper: masked past each sentence and
renormalised over time ('renorm'); see nmt_jax/attention/memory.py for the variants.
At CPU scale this literal reading shrinks the encoder logits ~|S|-fold and costs BLEU
on the copy task (L = 50, 2k steps: 57 vs 98 without PE); 'renorm_mean1' and
'unnormalized' are neutral, as the paper reports PE to be. See docs/results.md (a).

  python -m nmt_jax.main --config=configs/memory_k64_pe.py --workdir=runs/memory_k64_pe
  python -m nmt_jax.main --config=configs/memory_k64_pe.py:copy200 --workdir=runs/memory_k64_pe_copy200
"""

from nmt_jax.config import defaults


def get_config(arg=None):
  config = defaults.sibling_config(__file__, 'memory_k64', arg)
  config.model.attention.position_encoding = 'renorm'
  return config
