"""One step of the decoder's LSTM stack (the decoder loop calls it per step).

Layer 0's input is the per-step inputs (input feeding, context) and its own
h; its embedding gates come precomputed from outside the loop. Each layer's
kernel is one stacked [in + H, 4H] matrix, so a layer is one GEMM per step.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from nmt_jax.model import lstm


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
  With `probes` (see nmt_jax/model/hoisting.py) the kernels' gradients are left to the
  caller.
  """

  features: int
  num_layers: int
  dropout: float
  forget_bias: float
  explicit_weight_grads: bool = True  # see weight_grad

  @nn.compact
  def __call__(self, carries, x_gates, extra, keep=None, probes=None):
    """One step of the stack -> new carries, each kernel's input.

    carries: per layer (c, h) [B, H]; x_gates [B, 4H]; extra: list of [B, *];
    keep: None (no dropout) or the dropout keep masks [B, H] of the inputs
    of layers 1.. ('layer_1', ...); probes: None or per layer [B, 4H]. The
    kernels' inputs are per layer [B, in + H].
    """
    h_size = self.features
    new, kernel_inputs = [], []
    for layer in range(self.num_layers):
      carry = carries[layer]
      if layer == 0:
        # [B, in + H]
        inputs = jnp.concatenate(list(extra) + [carry[1]], axis=-1)
        bias = x_gates
      else:
        below = lstm.dropout(
            new[-1][1], keep and keep[f'layer_{layer}'], self.dropout
        )
        inputs = jnp.concatenate([below, carry[1]], axis=-1)  # [B, 2H]
        bias = self.param(
            f'bias_{layer}',
            lstm.forget_bias_init(h_size, self.forget_bias),
            (4 * h_size,),
        )
      kernel = self.param(
          f'kernel_{layer}',
          stacked_kernel_init(inputs.shape[-1] - h_size),
          (inputs.shape[-1], 4 * h_size),
      )
      probe = None if probes is None else probes[layer]
      gates = lstm.project(inputs, kernel, self.explicit_weight_grads, probe)
      new.append(lstm.lstm_update(carry, gates + bias))
      kernel_inputs.append(inputs)
    return tuple(new), kernel_inputs
