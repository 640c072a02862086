"""One step of the decoder's LSTM stack (the decoder loop calls it per step).

Layer 0's input is the per-step inputs (input feeding, context) and its own
h; its embedding gates come precomputed from outside the loop. Each layer's
kernel is one stacked [in + H, 4H] matrix, so a layer is one GEMM per step.

With layer normalisation (model.layer_norm) x W_x and h W_h are normalised
apart, so each layer has an input kernel [in, 4H] and a recurrent kernel
[H, 4H] instead (two GEMMs per step, both hoistable), and its own bias; layer
0's embedding gates are then E y W_e without a bias, normalised together
with the per-step inputs' product.
"""

from typing import Dict

import flax.linen as nn
import jax
import jax.numpy as jnp

from nmt_jax.model import hoisting
from nmt_jax.model import lstm


# Layer i's kernels: one stacked [in + H, 4H], or with layer normalisation an
# input [in, 4H] and a recurrent [H, 4H] one. These are the parameter names,
# and so the hoisted kernels' keys.
def kernel(layer: int) -> str:
  return f'kernel_{layer}'


def input_kernel(layer: int) -> str:
  return f'input_kernel_{layer}'


def recurrent_kernel(layer: int) -> str:
  return f'recurrent_kernel_{layer}'


def stacked_kernel_init(num_input_rows):
  """Initializer of a stacked [in + H, 4H] kernel.

  lecun_normal for the input rows, orthogonal for the H recurrent rows.
  """

  def init(key, shape, dtype=jnp.float32):
    k_in, k_rec = jax.random.split(key)
    rows = [
        nn.initializers.orthogonal()(
            k_rec, (shape[0] - num_input_rows, shape[1]), dtype
        )
    ]
    if num_input_rows:
      rows.insert(
          0,
          nn.initializers.lecun_normal()(
              k_in, (num_input_rows, shape[1]), dtype
          ),
      )
    return jnp.concatenate(rows, axis=0)

  return init


class StackedLSTMCell(nn.Module):
  """One step of the decoder's LSTM stack.

  Layer 0 receives its embedding gates precomputed (`x_gates`, hoisted out of
  the time loop) and the per-step inputs `extra` (input feeding, context).
  The kernels with a probe in `probes` (nmt_jax/model/hoisting.py) leave their
  gradients to the loop's caller.
  """

  features: int
  num_layers: int
  dropout: float
  forget_bias: float
  explicit_weight_grads: bool = True  # see weight_grad
  layer_norm: bool = False  # model.layer_norm
  recurrent_dropout: float = 0.0  # model.recurrent_dropout
  residual: int = 0  # model.residual: first layer adding its input

  @nn.compact
  def __call__(
      self, carries, x_gates, extra, keep=None, probes=hoisting.NO_PROBES
  ):
    """One step of the stack -> new carries, output [B, H].

    carries: per layer (c, h) [B, H]; x_gates [B, 4H]; extra: list of [B, *];
    keep: None (no dropout) or this step's dropout keep masks [B, H]: of the
    inputs of layers 1.. ('layer_1', ...) and of each layer's h before its
    recurrent kernel ('recurrent_0', ...); probes: the step's
    `hoisting.Probes` ([B, 4H] each). The output is the top layer's h (plus
    its input with a residual connection).
    """
    h_size = self.features
    mask = lambda name: None if keep is None else keep.get(name)
    probes = probes.scope(self.name)
    new = []
    output = None
    for layer in range(self.num_layers):
      carry = carries[layer]
      h = lstm.dropout(
          carry[1], mask(f'recurrent_{layer}'), self.recurrent_dropout
      )
      if layer == 0:
        inputs = list(extra)
      else:
        inputs = [lstm.dropout(output, mask(f'layer_{layer}'), self.dropout)]

      def project(name, x, init):
        w = self.param(name, init, (x.shape[-1], 4 * h_size))
        probe = probes.take(name, x)
        return lstm.project(x, w, self.explicit_weight_grads, probe)

      if self.layer_norm:
        gates = self._normed_gates(layer, inputs, h, x_gates, project)
        cell_norm = lstm.norm_params(self, f'cell_norm_{layer}', h_size)
      else:
        # The bias before the kernel: parameters draw their initial values
        # in the order they are created (the same values as before the
        # layer-norm path existed).
        bias = x_gates if layer == 0 else self._bias(layer)
        # [B, in + H]
        stacked = jnp.concatenate(inputs + [h], axis=-1)
        gates = project(
            kernel(layer),
            stacked,
            stacked_kernel_init(stacked.shape[-1] - h_size),
        )
        gates = gates + bias
        cell_norm = None
      new.append(lstm.lstm_update(carry, gates, cell_norm))
      output = new[-1][1]
      if layer and self.residual and layer >= self.residual:
        output = output + inputs[0]
    return tuple(new), output

  def kernel_widths(self, has_inputs: bool) -> Dict[str, int]:
    """The stack's kernels (each used once per step) -> output width 4H.

    has_inputs: whether layer 0 has per-step inputs (`extra` not empty).
    """
    names = []
    for layer in range(self.num_layers):
      if not self.layer_norm:
        names.append(kernel(layer))
        continue
      names.append(recurrent_kernel(layer))
      if layer or has_inputs:  # layer 0's input product: of `extra` alone
        names.append(input_kernel(layer))
    return {name: 4 * self.features for name in names}

  def _bias(self, layer):
    return self.param(
        f'bias_{layer}',
        lstm.forget_bias_init(self.features, self.forget_bias),
        (4 * self.features,),
    )

  def _normed_gates(self, layer, inputs, h, x_gates, project):
    """LN(x W_x) + LN(h W_h) + b [B, 4H] of layer `layer` (layer 0's x W_x:
    the embedding gates x_gates plus the per-step inputs' product)."""
    width = 4 * self.features
    x_part = x_gates if layer == 0 else 0.0
    if inputs:
      x_part = x_part + project(
          input_kernel(layer),
          jnp.concatenate(inputs, axis=-1),
          nn.initializers.lecun_normal(),
      )
    h_part = project(recurrent_kernel(layer), h, nn.initializers.orthogonal())
    norm = lambda name: lstm.norm_params(self, f'{name}_norm_{layer}', width)
    return (
        lstm.layer_norm(x_part, norm('input'))
        + lstm.layer_norm(h_part, norm('recurrent'))
        + self._bias(layer)
    )
