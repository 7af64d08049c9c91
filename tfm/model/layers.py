"""Encoder and decoder layers (section 3.1) with post-LN (the paper) or pre-LN residual blocks.

post-LN: x = LayerNorm(x + Dropout(Sublayer(x)))      (the paper's "Add & Norm")
pre-LN:  x = x + Dropout(Sublayer(LayerNorm(x)))       (stacks then end in a final LayerNorm)
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from tfm.model import partitioning as P
from tfm.model.attention import Attention
from tfm.model.config import ModelConfig
from tfm.model.ffn import FeedForward


def layer_norm(cfg: ModelConfig, name: str) -> nn.LayerNorm:
  """LayerNorm over d_model, statistics in float32, scale and bias on the `embed` axis."""
  return nn.LayerNorm(epsilon=cfg.norm_epsilon, dtype=cfg.compute_dtype, param_dtype=jnp.float32,
                      scale_init=P.with_axes(nn.initializers.ones, ("embed",)),
                      bias_init=P.with_axes(nn.initializers.zeros, ("embed",)), name=name)


def residual(cfg: ModelConfig, x, sublayer, norm, train: bool):
  """One sub-layer with residual dropout, the residual connection and LayerNorm (post or pre).

  x [b, l, d_model]; sublayer: a callable [b, l, d_model] -> [b, l, d_model]; norm: a LayerNorm.
  """
  dropout = lambda y: nn.Dropout(cfg.dropout_rate)(y, deterministic=not train)
  if cfg.norm == "pre":
    return x + dropout(sublayer(norm(x)))
  return norm(x + dropout(sublayer(x)))


class EncoderLayer(nn.Module):
  """Self-attention then FFN. x [b, s, d_model], mask [b, 1, s, s], bias [b|1, h, s, s]."""

  cfg: ModelConfig

  @nn.compact
  def __call__(self, x, mask, bias, positions, train: bool = False):
    attention = Attention(self.cfg, name="self_attention")
    x = residual(self.cfg, x, lambda y: attention(y, mask=mask, bias=bias, positions=positions,
                                                  train=train),
                 layer_norm(self.cfg, "self_attention_norm"), train)
    ffn = FeedForward(self.cfg, name="ffn")
    x = residual(self.cfg, x, lambda y: ffn(y, train), layer_norm(self.cfg, "ffn_norm"), train)
    return P.constrain(x, P.BLD)


class DecoderLayer(nn.Module):
  """Masked self-attention, encoder-decoder attention (when there is an encoder), then FFN.

  x [b, t, d_model]; encoded [b, s, d_model] or None; self_mask [b, 1, t, t'], cross_mask
  [b, 1, t, s]. In 'init_cache' mode only the caches are created and x is returned unchanged.
  """

  cfg: ModelConfig
  cross_attention: bool = True

  @nn.compact
  def __call__(self, x, encoded, self_mask, cross_mask, bias, positions, train: bool = False,
               mode: str = "full", decode_index=None):
    self_attn = Attention(self.cfg, name="self_attention")
    cross_attn = Attention(self.cfg, is_cross=True, name="cross_attention") if self.cross_attention else None
    if mode == "init_cache":
      self_attn(x, mode=mode)
      if cross_attn is not None:
        cross_attn(x, encoded, mode=mode)
      return x
    x = residual(self.cfg, x, lambda y: self_attn(y, mask=self_mask, bias=bias, positions=positions,
                                                  train=train, mode=mode, decode_index=decode_index),
                 layer_norm(self.cfg, "self_attention_norm"), train)
    if cross_attn is not None:
      x = residual(self.cfg, x, lambda y: cross_attn(y, encoded, mask=cross_mask, train=train, mode=mode),
                   layer_norm(self.cfg, "cross_attention_norm"), train)
    ffn = FeedForward(self.cfg, name="ffn")
    x = residual(self.cfg, x, lambda y: ffn(y, train), layer_norm(self.cfg, "ffn_norm"), train)
    return P.constrain(x, P.BLD)
