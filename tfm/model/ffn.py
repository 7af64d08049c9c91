"""Position-wise feed-forward network (section 3.3): FFN(x) = max(0, x W1 + b1) W2 + b2.

Variants: GELU in place of ReLU, and SwiGLU (Shazeer 2020): (Swish(x W) * x V) W2, whose two input
projections share the `mlp` axis. Optional dropout on the hidden activation (off in the paper).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from tfm.model import partitioning as P
from tfm.model.config import ModelConfig


def _dense(features, names, cfg: ModelConfig, name):
  return nn.Dense(features, use_bias=cfg.use_bias, dtype=cfg.compute_dtype, param_dtype=jnp.float32,
                  kernel_init=P.with_axes(nn.initializers.xavier_uniform(), names),
                  bias_init=P.with_axes(nn.initializers.zeros, names[1:]), name=name)


class FeedForward(nn.Module):
  """x [batch, length, d_model] -> [batch, length, d_model] through a d_ff hidden layer."""

  cfg: ModelConfig

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    cfg = self.cfg
    if cfg.ffn == "swiglu":
      hidden = nn.silu(_dense(cfg.d_ff, ("embed", "mlp"), cfg, "wi_gate")(x))
      hidden = hidden * _dense(cfg.d_ff, ("embed", "mlp"), cfg, "wi")(x)
    else:
      activation = nn.relu if cfg.ffn == "relu" else nn.gelu
      hidden = activation(_dense(cfg.d_ff, ("embed", "mlp"), cfg, "wi")(x))
    hidden = P.constrain(hidden, P.BLF)
    hidden = nn.Dropout(cfg.ffn_dropout_rate)(hidden, deterministic=not train)
    return P.constrain(_dense(cfg.d_model, ("mlp", "embed"), cfg, "wo")(hidden), P.BLD)
