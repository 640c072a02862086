"""nmt_jax.system.allocator: XLA:CPU's freed buffers are reused, not faulted in anew."""

import os
import subprocess
import sys

import pytest

# A jitted function with a 16 MB temporary ([2048, 2048] float32, a matmul's
# operand), called 25 times; prints the page faults of all calls after the
# first (which compiles).
SCRIPT = """
import resource
from nmt_jax.system import allocator
import jax
import jax.numpy as jnp
step = jax.jit(lambda x: (jnp.sin(x) @ x)[:, 0])
x = jnp.ones((2048, 2048))
step(x).block_until_ready()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(24):
  step(x).block_until_ready()
print(allocator.describe())
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(keep: str):
  """(the malloc allocator.describe() names, page faults of the 24 calls)."""
  env = dict(os.environ, NMT_JAX_KEEP_FREED_MEMORY=keep, JAX_PLATFORMS='cpu')
  env.pop('LD_PRELOAD', None)
  out = subprocess.run(
      [sys.executable, '-c', SCRIPT],
      env=env,
      capture_output=True,
      text=True,
      check=True,
  )
  malloc, faults = out.stdout.strip().splitlines()[-2:]
  return malloc, int(faults)


@pytest.mark.skipif(
    not sys.platform.startswith('linux'), reason='glibc malloc only'
)
def test_a_step_reuses_its_temporary_buffers_when_kept():
  # glibc's defaults: every call maps its buffers afresh (8,192 page faults a
  # call here). Kept: the heap grows a few times while threads interleave
  # their allocations differently (up to 10 calls here), then no call faults.
  (default, fresh), (kept, reused) = page_faults('0'), page_faults('1')
  assert (default, kept) == ('system', 'glibc (kept)')
  assert fresh >= 24 * 4096
  assert reused < fresh / 2
