"""RMS norm (Zhang & Sennrich, 2019), T5's layer normalization (model.norm_kind='rms').

y = x / sqrt(mean(x^2) + epsilon) * scale over the last axis (d_model), statistics in float32: no
mean is subtracted and there is no bias, so a norm has d_model parameters where LayerNorm has
2 d_model (T5's T5LayerNorm, Raffel et al. 2020, section 2.1: "only rescaled and no additive bias
is applied"). Its backward pass is JAX's derivative of this forward pass: model.layer_norm_grad's
written backward is LayerNorm's (tfm/model/layer_norm.py), and the config refuses 'written' here.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from tfm.model import partitioning as P


def rms_norm(x, scale, epsilon: float):
  """x float32 [..., d], scale float32 [d] -> float32 [..., d]."""
  return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + epsilon) * scale


class RMSNorm(nn.Module):
  """RMS norm over the last axis: x [..., d_model] -> [..., d_model] in `dtype`.

  One parameter, 'scale' (ones), float32 [d_model] on the `embed` axis, as LayerNorm's scale.
  """

  epsilon: float
  dtype: str = "float32"

  @nn.compact
  def __call__(self, x):
    scale = self.param("scale", P.with_axes(nn.initializers.ones, ("embed",)), (x.shape[-1],),
                       jnp.float32)
    return rms_norm(x.astype(jnp.float32), scale, self.epsilon).astype(jnp.dtype(self.dtype))
