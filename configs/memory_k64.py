"""Britz, Guan & Luong 2017 memory attention with K = 64 slots (no position encodings).

  python -m nmt_jax.main --config=configs/memory_k64.py --workdir=runs/memory_k64
  python -m nmt_jax.main --config=configs/memory_k64.py:copy200 --workdir=runs/memory_k64_copy200
"""

from nmt_jax import default_config


def get_config(arg=None):
  config = default_config.get_config(arg)
  config.model.attention.kind = 'memory'
  config.model.attention.num_memory = 64
  return config
