"""Data parallelism: batches sharded along 'data', state replicated.

Two ways to run the same train step, selected by config.parallel.mode
(`data_parallel_step`):
  jit   one program over a Mesh; the batch is a global array sharded along
        'data' and XLA inserts the gradient all-reduce (default).
  pmap  the step mapped over the local devices, gradients summed with psum;
        the state carries a leading device axis inside the loop only
        (checkpoints and evaluation always see the global, jit form).

Multi-host: every process derives the same global batch order from the step
and materialises only its own rows (`process_rows`). The mesh lists devices
process by process, so the global batch, and hence the result, is the same
for any number of processes.
"""

import functools
import itertools
import os
import sys
import threading
from typing import Any, Callable, Dict, Optional, Sequence

from absl import logging
import flax.jax_utils
import jax
from jax.experimental import multihost_utils
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np
from orbax.checkpoint import multihost as ocp_multihost

from nmt_jax.system.errors import ConfigError
from nmt_jax.system.errors import UserError

AXIS = 'data'


class DistributedError(UserError):
  """The processes of a multi-host run could not join."""


# ----------------------------------------------------------------- processes


def initialize_distributed(
    coordinator_address: Optional[str] = None,
    num_processes: Optional[int] = None,
    process_id: Optional[int] = None,
    timeout_seconds: int = 300,
    local_device_ids: Optional[Sequence[int]] = None,
):
  """Joins a multi-process run through jax.distributed.

  With no arguments JAX detects the cluster (Cloud TPU VMs, SLURM, ...).
  If the processes have not all joined after `timeout_seconds` (coordinator
  unreachable, a process missing), this process exits with a one-line error.
  """
  explicit = [coordinator_address, num_processes, process_id]
  if any(v is not None for v in explicit) and not all(
      v is not None for v in explicit
  ):
    raise ConfigError(
        '--coordinator_address, --num_processes and --process_id go together; '
        'give all three, or none on a TPU VM / under SLURM'
    )
  if num_processes is not None:
    if num_processes < 1 or not 0 <= process_id < num_processes:
      raise ConfigError(
          f'--process_id={process_id} is outside [0, --num_processes='
          f'{num_processes}); number the processes 0..N-1'
      )
    host, _, port = coordinator_address.rpartition(':')
    if not host or not port.isdigit():
      raise ConfigError(
          f'--coordinator_address={coordinator_address!r} is not host:port; '
          'e.g. --coordinator_address=10.0.0.2:1234'
      )
  where = coordinator_address or 'the auto-detected coordinator'

  def give_up():
    # JAX's own timeout aborts the process with a C++ stack trace; say why
    # first, and exit.
    print(
        f'error: the distributed run at {where} did not form within'
        f' {timeout_seconds}s (coordinator unreachable or a process missing);'
        ' start all processes with the same --coordinator_address and'
        ' --num_processes, and check the host, port and firewall',
        file=sys.stderr,
        flush=True,
    )
    os._exit(3)  # pylint: disable=protected-access

  watchdog = threading.Timer(timeout_seconds, give_up)
  watchdog.daemon = True
  watchdog.start()
  try:
    jax.distributed.initialize(
        coordinator_address,
        num_processes,
        process_id,
        local_device_ids=local_device_ids,
        initialization_timeout=timeout_seconds + 60,
    )
  except (RuntimeError, ValueError) as e:
    raise DistributedError(
        f'could not join the distributed run at {where} ({_first_line(e)}); '
        'check --coordinator_address, --num_processes and --process_id'
    ) from None
  finally:
    watchdog.cancel()
  logging.info(
      'process %d of %d; %d local and %d global devices',
      jax.process_index(),
      jax.process_count(),
      jax.local_device_count(),
      jax.device_count(),
  )


# How long the other processes wait for process 0's part of process_0_first:
# a corpus download and a SentencePiece build can take hours.
PROCESS_0_FIRST_WAIT_S = 24 * 3600
_process_0_first_calls = itertools.count()


def process_0_first(fn: Callable[[], Any], what: str) -> Any:
  """fn() on process 0, then on the others once it has returned.

  For work the processes must not do at once, such as downloading a corpus
  or building the vocabularies into the shared workdir (every process would
  train the same one and write the same files at once): the others then
  read what process 0 wrote. If it fails
  there, every process stops, the others with one line. The others wait on
  the coordination service's key-value store, not in a collective, whose
  first call on a CPU gives up after 30 s.
  """
  if jax.process_count() == 1:
    return fn()
  # Every process calls in the same order, so the n-th call has one key.
  key = f'nmt_jax/process_0_first/{next(_process_0_first_calls)}'
  client = ocp_multihost.get_jax_distributed_client()
  if jax.process_index() == 0:
    try:
      result = fn()
    except BaseException:
      client.key_value_set(key, 'failed')
      raise
    client.key_value_set(key, 'done')
    return result
  try:
    status = client.blocking_key_value_get(key, PROCESS_0_FIRST_WAIT_S * 1000)
  except jax.errors.JaxRuntimeError as e:
    raise UserError(
        f'process 0 did not finish {what} ({_first_line(e)}); its log says why'
    ) from None
  if status != 'done':
    raise UserError(f'process 0 failed {what}; its log says why')
  return fn()


_same_calls = itertools.count()


def check_same_everywhere(
    value: Optional[str], name: str, fix: str, failed: str
):
  """Stops every process with one line unless all read the same `value`.

  `value` is a digest of what this process read (the same on every process
  for the same input), or None when it failed to read it (it then raises its
  own error after this returns). Without this check one process's mistake
  stops only that one and the others die in a collective, with a traceback
  (or gloo aborts: 'Received data size doesn't match expected size'). The
  processes meet on the coordination service's key-value store, not in a
  collective, which on a CPU gives up after 30 s.
  """
  if jax.process_count() == 1:
    return
  key = f'nmt_jax/same/{next(_same_calls)}'
  client = ocp_multihost.get_jax_distributed_client()
  client.key_value_set(f'{key}/{jax.process_index()}', value or 'failed')
  values = []
  for i in range(jax.process_count()):
    try:
      values.append(
          client.blocking_key_value_get(
              f'{key}/{i}', PROCESS_0_FIRST_WAIT_S * 1000
          )
      )
    except jax.errors.JaxRuntimeError as e:
      raise UserError(
          f'process {i} did not report its {name} ({_first_line(e)}); its'
          ' log says why'
      ) from None
  if value is None:
    return
  for i, other in enumerate(values):
    if other == 'failed':
      raise UserError(f'process {i} {failed}; its log says why')
  if len(set(values)) > 1:
    seen = ', '.join(f'process {i}: {v}' for i, v in enumerate(values))
    raise UserError(f'the processes read different {name} ({seen}); {fix}')


def _first_line(error: BaseException) -> str:
  return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


# ----------------------------------------------------------------- the mesh


def make_mesh(mesh_shape: Sequence[int] = (-1,)) -> Mesh:
  """A 1-D ('data',) mesh over all devices, process by process.

  mesh_shape (config.parallel.mesh_shape) is (-1,) for all devices or (N,)
  where N must be the device count.
  """
  devices = jax.devices()
  shape = (
      tuple(mesh_shape) if not isinstance(mesh_shape, str) else (mesh_shape,)
  )
  if (
      len(shape) != 1
      or not isinstance(shape[0], int)
      or isinstance(shape[0], bool)
      or not (shape[0] == -1 or shape[0] > 0)
  ):
    raise ConfigError(
        f'config: parallel.mesh_shape={shape} must be one axis, (N,) or (-1,) '
        'for all devices (--config.parallel.mesh_shape="(-1,)")'
    )
  if shape[0] not in (-1, len(devices)):
    raise ConfigError(
        f'config: parallel.mesh_shape={shape} does not match the {len(devices)}'
        f' devices ({jax.process_count()} process(es)); use ({len(devices)},)'
        ' or (-1,)'
    )
  ordered = sorted(devices, key=lambda d: (d.process_index, d.id))
  # Mesh(...) has Auto axes; jax.make_mesh defaults to Explicit axes, under
  # which nn.Embed's gather on batch-sharded ids fails to shard.
  return Mesh(np.asarray(ordered), (AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P(AXIS))


def check_divisible(batch_size: int, mesh: Mesh, field: str):
  devices = mesh.devices.size
  if batch_size % devices:
    raise ConfigError(
        f'config: {field}={batch_size} is not divisible by the {devices}'
        f' devices; use a multiple of {devices} (--config.{field}=...)'
    )


def process_rows(batch_size: int, mesh: Mesh) -> slice:
  """The rows of a global batch of `batch_size` that this process feeds."""
  indices = (
      batch_sharding(mesh)
      .addressable_devices_indices_map((batch_size,))
      .values()
  )
  starts = [index[0].start or 0 for index in indices]
  stops = [
      batch_size if index[0].stop is None else index[0].stop
      for index in indices
  ]
  return slice(min(starts), max(stops))


def local_part(
    batch: Dict[str, np.ndarray], mesh: Mesh
) -> Dict[str, np.ndarray]:
  """This process's rows of a global host batch."""
  rows = process_rows(len(next(iter(batch.values()))), mesh)
  return {k: v[rows] for k, v in batch.items()}


def shard_batch(
    local_batch: Dict[str, np.ndarray], mesh: Mesh
) -> Dict[str, jax.Array]:
  """This process's rows -> global arrays sharded along 'data'."""
  sharding = batch_sharding(mesh)
  return {
      k: jax.make_array_from_process_local_data(sharding, v)
      for k, v in local_batch.items()
  }


def shard_global_batch(
    batch: Dict[str, np.ndarray], mesh: Mesh
) -> Dict[str, jax.Array]:
  """A global host batch -> global arrays sharded along 'data'.

  Every process holds all rows of the host batch.
  """
  return shard_batch(local_part(batch, mesh), mesh)


def to_host(tree) -> Any:
  """Global arrays (maybe spread over processes) -> NumPy on every process."""
  if jax.process_count() == 1:
    return jax.device_get(tree)
  return multihost_utils.process_allgather(tree, tiled=True)


# ----------------------------------------------------------------- pmap


def pmap_batch(local_batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """[rows, ...] -> [local devices, rows / local devices, ...] for pmap."""
  devices = jax.local_device_count()
  return {
      k: v.reshape((devices, -1) + v.shape[1:]) for k, v in local_batch.items()
  }


def to_pmap(tree):
  """Replicated global arrays -> per-local-device copies.

  The copies have a leading device axis.
  """
  host = jax.tree_util.tree_map(
      lambda x: np.asarray(x.addressable_shards[0].data), tree
  )
  return flax.jax_utils.replicate(host, devices=jax.local_devices())


def from_pmap(tree, mesh: Mesh):
  """pmap-replicated arrays -> replicated global arrays on `mesh`.

  No copy goes through the host.
  """
  sharding = replicated(mesh)

  def merge(x):
    # Take each device's own copy: indexing x[0] would gather across devices.
    copies = [shard.data[0] for shard in x.addressable_shards]
    return jax.make_array_from_single_device_arrays(
        x.shape[1:], sharding, copies
    )

  return jax.tree_util.tree_map(merge, tree)


def first_replica(tree):
  """Host value of per-device results that are equal on every device.

  E.g. psum'd metrics.
  """
  return jax.tree_util.tree_map(
      lambda x: np.asarray(x.addressable_shards[0].data)[0], tree
  )


# --------------------------------------------------------------- the train step


class JitStep:
  """parallel.mode='jit': the step jitted over the mesh.

  The loop keeps the global state.
  """

  def __init__(self, step_fn: Callable, mesh: Mesh, compiler_options=None):
    self._step = jax.jit(
        step_fn, donate_argnums=0, compiler_options=compiler_options
    )
    self._mesh = mesh

  def __call__(self, state, rows: Dict[str, np.ndarray]):
    """(loop state, batch rows) -> (loop state, device metrics).

    The batch rows are this process's.
    """
    return self._step(state, shard_batch(rows, self._mesh))

  def to_loop(self, state):
    """Global state (replicated on the mesh) -> the state the loop carries."""
    return state

  def to_global(self, state):
    """Loop state -> global state, for evaluation and checkpoints."""
    return state

  def metrics(self, device_metrics):
    """Device metrics -> host values."""
    return jax.device_get(device_metrics)


class PmapStep(JitStep):
  """parallel.mode='pmap': the step mapped over local devices.

  The state carries a device axis.
  """

  def __init__(self, step_fn: Callable, mesh: Mesh):
    step_fn = functools.partial(step_fn, axis_name=AXIS)
    self._step = jax.pmap(step_fn, axis_name=AXIS, donate_argnums=0)
    self._mesh = mesh

  def __call__(self, state, rows):
    return self._step(state, pmap_batch(rows))

  def to_loop(self, state):
    return to_pmap(state)

  def to_global(self, state):
    return from_pmap(state, self._mesh)

  def metrics(self, device_metrics):
    return first_replica(device_metrics)


def data_parallel_step(
    step_fn: Callable, mode: str, mesh: Mesh, compiler_options=None
) -> JitStep:
  """The train step `step_fn` run as parallel.mode says.

  Its signature is step_fn(state, batch, axis_name=None). `compiler_options`
  (XLA's, for jax.jit) need mode 'jit': jax.pmap takes none.
  """
  if mode == 'pmap':
    return PmapStep(step_fn, mesh)
  return JitStep(step_fn, mesh, compiler_options)
