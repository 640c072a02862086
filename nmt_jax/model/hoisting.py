"""Kernel gradients of a recurrent loop as one GEMM after its backward pass.

Differentiating a scanned decoder step adds every step's kernel gradient
x_t^T dz_t inside the backward loop: T small GEMMs ([B, in]^T [B, out]) and
T accumulations of the [in, out] kernel gradient. Summed over steps it is
X^T DZ with X [T*B, in], DZ [T*B, out]: one large GEMM, which runs much
closer to peak.

`hoisted_weight_grads` gets there with probes. The loop is written as
`loop(module, *args, probes) -> (outputs, records)`. Each hoisted product is
`lstm.project(x_t, kernel, ..., probe_t)` = x_t @ stop_gradient(kernel) +
probe_t, with probe_t a zero [B, out] input scanned over time. The kernel
then receives no gradient inside the loop, while the probe's cotangent is
exactly dz_t, which the backward loop writes out as one stacked [T, B, out]
array instead of folding it into the kernel. The loop returns every x_t (its
`records`), and the custom VJP adds X^T DZ to the kernel's gradient after
the loop. Values and gradients equal plain autodiff's up to float rounding
(tests/model/test_hoisting.py). The decoding loops never see probes: without
a gradient the plain loop runs.

`Probes` carries one step's probes to the kernels and their inputs back to
the loop, so the step's equations only pass it on.
"""

from typing import Callable, Dict, Optional

from flax import traverse_util
import flax.linen as nn
import jax.numpy as jnp

from nmt_jax.model import lstm

# A probe's key is its kernel's parameter path under the looped module, in
# flax.traverse_util.flatten_dict's spelling: 'cell/kernel_0'.
SEPARATOR = '/'


def key(*path: str) -> str:
  """A parameter path's probe key: ('cell', 'kernel_0') -> 'cell/kernel_0'."""
  return SEPARATOR.join(path)


class Probes:
  """One step's probes of the hoisted kernels, and the inputs they record.

  The loop body builds it from its step's probes ({key: [B, out]}, or None:
  nothing hoisted) and returns `records`. A module owning hoisted kernels
  looks them up in its own view, `probes.scope(self.name)`, so the keys are
  the kernels' parameter paths by construction; `take` gives a kernel its
  probe and keeps its input.
  """

  def __init__(self, probes=None, _prefix='', _records=None):
    self._probes = probes or {}
    self._prefix = _prefix
    # {key: x [B, in]}: the inputs of the kernels whose probes were taken.
    self.records = {} if _records is None else _records

  def scope(self, name: Optional[str]) -> 'Probes':
    """The view of submodule `name` (None: a top-level module, no prefix)."""
    if name is None:
      return self
    return Probes(self._probes, self._prefix + name + SEPARATOR, self.records)

  def take(self, name: str, x):
    """Kernel `name`'s probe [B, out], or None; records x [B, in] if probed."""
    path = self._prefix + name
    probe = self._probes.get(path)
    if probe is not None:
      self.records[path] = x
    return probe


# No probes: every kernel's gradient by autodiff (decoding, or not hoisted).
# Never records, so one instance serves every call.
NO_PROBES = Probes()


class Projection(nn.Module):
  """A dense layer (lecun_normal kernel) by `lstm.project`.

  nn.Dense's parameters (kernel, and bias with `bias_init`), but its kernel
  gradient is `lstm.weight_grad`'s, or hoisted when `probes` has one for it.
  """

  KERNEL = 'kernel'  # as nn.Dense's

  features: int
  explicit_weight_grads: bool = True
  bias_init: Optional[Callable] = None  # None: no bias

  @nn.compact
  def __call__(self, x, probes: Probes = NO_PROBES):
    """x [..., in] -> [..., features]."""
    kernel = self.param(
        self.KERNEL,
        nn.initializers.lecun_normal(),
        (x.shape[-1], self.features),
    )
    probe = probes.scope(self.name).take(self.KERNEL, x)
    x, kernel = nn.dtypes.promote_dtype(x, kernel)  # as nn.Dense
    y = lstm.project(x, kernel, self.explicit_weight_grads, probe)
    if self.bias_init is None:
      return y
    bias = self.param('bias', self.bias_init, (self.features,))
    return y + bias.astype(y.dtype)


def hoisted_weight_grads(
    loop: Callable, probe_shapes: Dict[str, tuple], dtype, explicit: bool
):
  """`loop` with its hoisted kernels' gradients computed after its backward.

  Args:
    loop: (module, *args, probes) -> (outputs, records). `probes` is None
      (plain autodiff) or a dict of [T, B, out] zeros keyed by the kernel's
      parameter path under the module (`key`: 'cell/kernel_0'); `records`
      then has the same keys, each the stacked inputs x [T, B, in] of that
      kernel (each step's `Probes.records`).
    probe_shapes: key -> [T, B, out].
    dtype: the probes' dtype (the compute dtype).
    explicit: the final GEMM by `lstm.weight_grad(..., explicit)`.
  Returns:
    (module, *args) -> outputs, differentiable in the module's params and
    in args.
  """

  def plain(module, *args):
    return loop(module, *args, None)[0]

  def forward(module, *args):
    probes = {k: jnp.zeros(s, dtype) for k, s in probe_shapes.items()}
    outputs, vjp_fn, records = nn.vjp(loop, module, *args, probes, has_aux=True)
    return outputs, (vjp_fn, records)

  def backward(residuals, d_outputs):
    vjp_fn, records = residuals
    params_t, *args_t, d_probes = vjp_fn(d_outputs)
    grads = traverse_util.flatten_dict(params_t['params'], sep=SEPARATOR)
    for key, x in records.items():
      dz = d_probes[key]
      grads[key] = grads[key] + lstm.weight_grad(
          x.reshape(-1, x.shape[-1]), dz.reshape(-1, dz.shape[-1]), explicit
      ).astype(grads[key].dtype)
    params_t = dict(
        params_t, params=traverse_util.unflatten_dict(grads, SEPARATOR)
    )
    return (params_t, *args_t)

  return nn.custom_vjp(plain, forward, backward)
