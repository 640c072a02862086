"""Data parallelism over a 1-D device mesh: batches sharded on 'data', state replicated."""

from typing import Dict

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from nmt_jax.errors import ConfigError


def make_mesh() -> Mesh:
  # Mesh(...) has Auto axes; jax.make_mesh defaults to Explicit, which breaks
  # nn.Embed on batch-sharded ids (API_NOTES §3).
  return Mesh(np.asarray(jax.devices()), ('data',))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P('data'))


def check_divisible(batch_size: int, mesh: Mesh, field: str):
  devices = mesh.devices.size
  if batch_size % devices:
    raise ConfigError(
        f'config: {field}={batch_size} is not divisible by the {devices} devices; '
        f'use a multiple of {devices} (--config.{field}=...)')


def shard_batch(batch: Dict[str, np.ndarray], mesh: Mesh) -> Dict[str, jax.Array]:
  """Host batch (this process's rows) -> global arrays sharded along 'data'."""
  sharding = batch_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}
