"""Britz, Guan & Luong 2017 memory attention, K = 64, with position encodings (paper: masked, renormalised over time).

  python -m nmt_jax.main --config=configs/memory_k64_pe.py --workdir=runs/memory_k64_pe
  python -m nmt_jax.main --config=configs/memory_k64_pe.py:copy200 --workdir=runs/memory_k64_pe_copy200
"""

from nmt_jax import default_config


def get_config(arg=None):
  config = default_config.get_config(arg)
  config.model.attention.kind = 'memory'
  config.model.attention.num_memory = 64
  config.model.attention.position_encoding = 'renorm'
  return config
