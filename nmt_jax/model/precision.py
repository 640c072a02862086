"""Mixed precision: the parameters a model computes with.

Parameters, their gradients and the optimizer state are stored in float32;
with model.dtype = 'bfloat16' a model computes with a bfloat16 copy.
"""

import jax
import jax.numpy as jnp


def compute_params(model_config, params):
  """params with their float32 leaves in model.dtype (as is for float32).

  Leaves already in model.dtype stay, so casting once before a loop (the
  decoders' scorers.Single.prepare) leaves nothing for `apply` to redo per
  step.
  """
  dtype = jnp.dtype(model_config.dtype)
  if dtype == jnp.float32:
    return params
  cast = lambda x: x.astype(dtype) if x.dtype == jnp.float32 else x
  return jax.tree_util.tree_map(cast, params)
