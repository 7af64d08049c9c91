"""Linear maps over tokens: each projection flattens x's (batch, length) into one tokens axis.

`token_matmul` flattens the leading (batch, length) axes of x into one tokens axis before
multiplying. The product and its value are the same; what changes is the gradient: the kernel's
gradient x^T dy then contracts one tokens axis instead of two, and XLA:CPU, given two, copied an
operand into a transposed layout first; in the tied output projection that copy was a second pass
over the [tokens, vocab] loss gradient, its exp recomputed. Flattened, a train step ran 1.12x as
fast at the base model's shape (experiments/SPEED.md, sixth pass). The kernel's own axes stay as
they are: merging (heads, d_k) as well was as fast on CPU but not free in a TPU's tiled layouts
(`tfm plan` v5e:4x4 base: 15.04 -> 15.93 GB of HBM traffic a step; with tokens alone, unchanged).
Merging leading axes of row-major arrays moves no data, and rows split over the mesh along batch
stay split along the tokens axis.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from tfm.model import partitioning as P


def token_matmul(x: jax.Array, kernel: jax.Array, in_dims: int) -> jax.Array:
  """x [*lead, *in] times kernel [*in, *out] (the last `in_dims` axes of x contract with the first
  `in_dims` of kernel) -> [*lead, *out], computed on x reshaped to [prod(lead), *in]."""
  lead, ins, outs = x.shape[:x.ndim - in_dims], kernel.shape[:in_dims], kernel.shape[in_dims:]
  y = jnp.tensordot(x.reshape(math.prod(lead), *ins), kernel, axes=in_dims)
  return y.reshape(*lead, *outs)


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
