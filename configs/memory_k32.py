"""Britz, Guan & Luong 2017 memory attention with K = 32 slots (memory_k64.py with K = 32).

python -m nmt_jax.main --config=configs/memory_k32.py --workdir=runs/memory_k32
python -m nmt_jax.main --config=configs/memory_k32.py:copy200 --workdir=runs/memory_k32_copy200
"""

from nmt_jax.config import defaults


def get_config(arg=None):
  config = defaults.sibling_config(__file__, 'memory_k64', arg)
  config.model.attention.num_memory = 32
  return config
