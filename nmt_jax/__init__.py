"""JAX/Flax experiments on the cost of attention in LSTM translation models."""

from nmt_jax.system import allocator

# Before JAX starts (opt-in; nmt_jax/system/allocator.py says why).
allocator.configure_from_environment()
