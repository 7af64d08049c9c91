"""Layer normalization (Ba et al., 2016; the "Norm" of the paper's "Add & Norm", section 3.1).

y = (x - mean(x)) / sqrt(var(x) + epsilon) * scale + bias over the last axis (d_model), statistics
in float32. The forward pass is flax's nn.LayerNorm's arithmetic to the bit (var = E[x^2] - E[x]^2
clipped at 0, y = (x - mu) * (rsqrt(var + eps) * scale) + bias), with the same parameters ('scale',
'bias'), so checkpoints and results carry over.

The backward pass is written out, with x_hat = (x - mu) r, r = rsqrt(var + eps), g = dy * scale:

  dx     = r (g - mean(g) - x_hat mean(g x_hat))      (means over d_model)
  dscale = sum over rows of dy * x_hat,   dbias = sum over rows of dy

The two row means are taken as products with the scale vector, mean(g) = (dy . scale) / d and
mean(g x_hat) = ((dy * x_hat) . scale) / d, so no array of the scale broadcast over the rows feeds a
reduction (in full float32 precision: a TPU's default would round the products' inputs to
bfloat16). Autodiff of the forward pass gave XLA:CPU such reductions (of dy * broadcast(scale) and
of broadcast(r) * ...), which its YNNPACK reduction kernels take only materialised: two extra
[rows, d_model] arrays written per LayerNorm, 30 of them in the base model's step, which this
backward pass does not write (its scratch memory and kernel count: see experiments/SPEED.md).

model.layer_norm_grad picks the backward pass: "written" (the one above), "autodiff" (JAX's
derivative of the same forward pass: the same gradients to float32 rounding, arranged by XLA,
which on a GPU may fuse them into the kernels around it) or "auto" (grad_for the platform the step
is traced for).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from tfm.model import partitioning as P
from tfm.model.platform import target_platform


def _statistics(x, epsilon: float):
  """x float32 [..., d] -> mean and rsqrt(var + epsilon), each [..., 1]."""
  mean = jnp.mean(x, -1, keepdims=True)
  var = jnp.maximum(0.0, jnp.mean(x * x, -1, keepdims=True) - mean * mean)
  return mean, jax.lax.rsqrt(var + epsilon)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def layer_norm(x, scale, bias, epsilon: float):
  """x float32 [..., d], scale and bias float32 [d] -> float32 [..., d]."""
  return _forward(x, scale, bias, epsilon)[0]  # XLA drops the unused residuals


def _forward(x, scale, bias, epsilon):
  """(y, the residuals of `_backward`): flax's arithmetic for y, to the bit."""
  mean, r = _statistics(x, epsilon)
  return (x - mean) * (r * scale) + bias, ((x - mean) * r, r, scale)


def _backward(epsilon, residuals, dy):
  del epsilon
  x_hat, r, scale = residuals
  rows = tuple(range(dy.ndim - 1))
  d = x_hat.shape[-1]
  dy_x_hat = dy * x_hat
  dot = lambda a: jnp.matmul(a, scale, precision=jax.lax.Precision.HIGHEST)[..., None] / d
  mean_g, mean_g_x_hat = dot(dy), dot(dy_x_hat)
  dx = r * (dy * scale - mean_g - x_hat * mean_g_x_hat)
  return dx, jnp.sum(dy_x_hat, rows), jnp.sum(dy, rows)


layer_norm.defvjp(_forward, _backward)

WRITTEN, AUTODIFF = "written", "autodiff"  # model.layer_norm_grad's two backward passes


def grad_for(platform: str) -> str:
  """The backward pass model.layer_norm_grad="auto" picks for a platform: WRITTEN everywhere.

  WRITTEN was made for XLA:CPU, where it saves two [rows, d_model] arrays a LayerNorm; whether
  AUTODIFF is faster on GPUs is what experiments/gpu_table.py's `variants` job measures
  (docs/gpu.md), and until a GPU's figure says so "auto" keeps WRITTEN there too."""
  del platform
  return WRITTEN


def autodiff_layer_norm(x, scale, bias, epsilon: float):
  """layer_norm's forward pass without its custom backward: JAX differentiates it."""
  return _forward(x, scale, bias, epsilon)[0]


class LayerNorm(nn.Module):
  """LayerNorm over the last axis: x [..., d_model] -> [..., d_model] in `dtype`.

  Parameters 'scale' (ones) and 'bias' (zeros), float32 [d_model] on the `embed` axis. grad: the
  backward pass, "auto", WRITTEN or AUTODIFF (model.layer_norm_grad; "auto": grad_for the traced
  platform).
  """

  epsilon: float
  dtype: str = "float32"
  grad: str = "auto"

  @nn.compact
  def __call__(self, x):
    d = x.shape[-1]
    scale = self.param("scale", P.with_axes(nn.initializers.ones, ("embed",)), (d,), jnp.float32)
    bias = self.param("bias", P.with_axes(nn.initializers.zeros, ("embed",)), (d,), jnp.float32)
    grad = grad_for(target_platform()) if self.grad == "auto" else self.grad
    norm = {WRITTEN: layer_norm, AUTODIFF: autodiff_layer_norm}[grad]  # validated: model/config.py
    return norm(x.astype(jnp.float32), scale, bias, self.epsilon).astype(jnp.dtype(self.dtype))
