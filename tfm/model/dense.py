"""Linear maps over tokens: each projection flattens x's (batch, length) into one tokens axis.

`token_matmul` flattens the leading (batch, length) axes of x into one tokens axis before
multiplying. The product and its value are the same; what changes is the gradient: the kernel's
gradient x^T dy then contracts one tokens axis instead of two, and XLA:CPU, given two, copied an
operand into a transposed layout first; in the tied output projection that copy was a second pass
over the [tokens, vocab] loss gradient, its exp recomputed. Flattened, a CPU train step is faster
(see experiments/SPEED.md). The kernel's own axes stay as they are: merging (heads, d_k) as well
gained nothing on CPU and added HBM traffic in a TPU's tiled layouts (see experiments/SPEED.md).
Merging leading axes of row-major arrays moves no data, and rows split over the mesh along batch
stay split along the tokens axis.
"""

from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from tfm.model import partitioning as P
from tfm.model.platform import target_platform


def token_matmul(x: jax.Array, kernel: jax.Array, in_dims: int, cpu_backward: bool = True
                 ) -> jax.Array:
  """x [*lead, *in] times kernel [*in, *out] (the last `in_dims` axes of x contract with the first
  `in_dims` of kernel) -> [*lead, *out], computed on x reshaped to [prod(lead), *in].

  On CPUs, where prod(in) <= prod(out) and cpu_backward, the gradients are taken as
  `_cpu_kernel_grad` does."""
  lead, ins, outs = x.shape[:x.ndim - in_dims], kernel.shape[:in_dims], kernel.shape[in_dims:]
  x = x.reshape(math.prod(lead), *ins)
  if cpu_backward and target_platform() == "cpu" and math.prod(ins) <= math.prod(outs):
    y = _cpu_kernel_grad(x, kernel, in_dims)
  else:
    y = jnp.tensordot(x, kernel, axes=in_dims)
  return y.reshape(*lead, *outs)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _cpu_kernel_grad(x, kernel, in_dims: int):
  """jnp.tensordot(x, kernel, in_dims) for x [tokens, *in], with a backward pass for XLA:CPU.

  Both gradients are taken on 2-D views, x [tokens, IN], kernel [IN, OUT], dy [tokens, OUT] (IN =
  prod(in), OUT = prod(out); merging axes of row-major arrays moves no data):
  - dx = dy kernel^T. Contracting a kernel's (heads, d_k) axes where they lie, XLA:CPU first copied
    the whole kernel into another layout (see experiments/SPEED.md).
  - dkernel = x^T dy, from a transposed copy of x, [IN, tokens]. Autodiff contracts the tokens axis
    of x and dy where they lie, a product XLA:CPU runs as its plain dot; with x transposed first,
    YNNPACK's, which gains more than the copy of the smaller operand costs (hence prod(in) <=
    prod(out) in `token_matmul`; see experiments/SPEED.md). The optimization barrier keeps
    XLA from folding the transpose back into the product.
  The forward pass is unchanged; the gradients are the same products, summed in another order.
  """
  return jnp.tensordot(x, kernel, axes=in_dims)


def _cpu_kernel_grad_forward(x, kernel, in_dims):
  return jnp.tensordot(x, kernel, axes=in_dims), (x, kernel)


def _cpu_kernel_grad_backward(in_dims, residuals, dy):
  del in_dims
  x, kernel = residuals
  x2, dy2 = x.reshape(x.shape[0], -1), dy.reshape(dy.shape[0], -1)
  kernel2 = kernel.reshape(x2.shape[1], dy2.shape[1])
  dx = (dy2 @ kernel2.T).reshape(x.shape)
  dkernel = jax.lax.optimization_barrier(x2.T) @ dy2
  return dx, dkernel.reshape(kernel.shape)


_cpu_kernel_grad.defvjp(_cpu_kernel_grad_forward, _cpu_kernel_grad_backward)


class Dense(nn.Module):
  """A multi-axis linear map: x [..., *in] -> [..., *features], kernel [*in, *features] + bias.

  The kernel keeps its true rank (so its logical axis `names` always apply; bias_names label the
  bias, the features' names) and gets Glorot-uniform init over fan_in = prod(in),
  fan_out = prod(features) (flax's xavier_uniform for a 2-D kernel). Computed in `dtype`, parameters
  stored in float32.
  """

  features: tuple[int, ...]
  in_dims: int
  names: tuple[str, ...]
  bias_names: tuple[str, ...]
  dtype: str = "float32"
  use_bias: bool = True

  @nn.compact
  def __call__(self, x):
    n_in, shape = self.in_dims, x.shape[-self.in_dims:] + tuple(self.features)
    init = nn.initializers.variance_scaling(1.0, "fan_avg", "uniform", in_axis=tuple(range(n_in)),
                                            out_axis=tuple(range(n_in, len(shape))))
    kernel = self.param("kernel", P.with_axes(init, self.names), shape, jnp.float32)
    dtype = jnp.dtype(self.dtype)
    y = token_matmul(x.astype(dtype), kernel.astype(dtype), n_in)
    if self.use_bias:
      bias = self.param("bias", P.with_axes(nn.initializers.zeros, self.bias_names),
                        tuple(self.features), jnp.float32)
      y = y + bias.astype(dtype)
    return y


def vocab_projection(vocab_size: int, dtype, name: str = "logits") -> Dense:
  """The untied output projection x [b, l, d_model] -> logits [b, l, vocab]: no bias."""
  return Dense((vocab_size,), 1, ("embed", "vocab"), (), dtype, use_bias=False, name=name)
