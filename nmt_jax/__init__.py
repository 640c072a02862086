"""JAX/Flax experiments on the cost of attention in LSTM translation models."""

from nmt_jax import allocator

# Before JAX starts (opt-in; nmt_jax/allocator.py says why).
allocator.configure_from_environment()
