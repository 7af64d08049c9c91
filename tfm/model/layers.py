"""Encoder and decoder layers (section 3.1) with post-LN (the paper) or pre-LN residual blocks.

post-LN: x = LayerNorm(x + Dropout(Sublayer(x)))      (the paper's "Add & Norm")
pre-LN:  x = x + Dropout(Sublayer(LayerNorm(x)))       (stacks then end in a final LayerNorm)
Every norm of a model is a LayerNorm or, with model.norm_kind='rms', an RMS norm (T5's).
"""

from __future__ import annotations

import flax.linen as nn

from tfm.model import partitioning as P
from tfm.model.attention import Attention
from tfm.model.config import ModelConfig
from tfm.model.dropout import Dropout
from tfm.model.ffn import FeedForward
from tfm.model.layer_norm import LayerNorm
from tfm.model.rms_norm import RMSNorm


def residual(x, sublayer, norm, *, dropout_rate: float, pre_norm: bool, train: bool):
  """One sub-layer with residual dropout, the residual connection and LayerNorm (post or pre).

  x [b, l, d_model]; sublayer: a callable [b, l, d_model] -> [b, l, d_model]; norm: a LayerNorm
  or an RMS norm.
  """
  dropout = lambda y: Dropout(dropout_rate)(y, deterministic=not train)
  if pre_norm:
    return x + dropout(sublayer(norm(x)))
  return norm(x + dropout(sublayer(x)))


def attention(cfg: ModelConfig, name: str, is_cross: bool = False) -> Attention:
  """The attention sub-layer of a ModelConfig."""
  return Attention(cfg.num_heads, cfg.kv_heads, cfg.d_k, cfg.d_v, cfg.dtype, cfg.use_bias,
                   cfg.attention_impl, cfg.attention_dropout_rate,
                   cfg.rope_base if cfg.positions == "rope" else None, is_cross, name=name)


def feed_forward(cfg: ModelConfig) -> FeedForward:
  return FeedForward(cfg.d_ff, cfg.ffn, cfg.dtype, cfg.use_bias, cfg.ffn_dropout_rate,
                     cfg.gelu_approximate, name="ffn")


def norm(cfg: ModelConfig, name: str) -> LayerNorm | RMSNorm:
  """The model's norm over d_model, statistics in float32, epsilon model.norm_epsilon: LayerNorm
  (tfm/model/layer_norm.py; its backward pass model.layer_norm_grad) or, with
  model.norm_kind='rms', RMS norm (tfm/model/rms_norm.py)."""
  if cfg.norm_kind == "rms":
    return RMSNorm(cfg.norm_epsilon, cfg.dtype, name=name)
  return LayerNorm(cfg.norm_epsilon, cfg.dtype, cfg.layer_norm_grad, name=name)


def add(cfg: ModelConfig, x, sublayer, norm_layer, train: bool):
  """`residual` with the ModelConfig's dropout rate and norm placement."""
  return residual(x, sublayer, norm_layer, dropout_rate=cfg.dropout_rate, pre_norm=cfg.norm == "pre",
                  train=train)


class EncoderLayer(nn.Module):
  """Self-attention then FFN. x [b, s, d_model], mask [b, 1, s, s], bias [b|1, h, s, s]."""

  cfg: ModelConfig

  @nn.compact
  def __call__(self, x, mask, bias, positions, *, train: bool = False):
    cfg = self.cfg
    self_attn = attention(cfg, "self_attention")
    x = add(cfg, x, lambda y: self_attn(y, mask=mask, bias=bias, positions=positions, train=train),
            norm(cfg, "self_attention_norm"), train)
    ffn = feed_forward(cfg)
    x = add(cfg, x, lambda y: ffn(y, train), norm(cfg, "ffn_norm"), train)
    return P.constrain(x, P.BLD)


class DecoderLayer(nn.Module):
  """Masked self-attention, encoder-decoder attention (when there is an encoder), then FFN.

  x [b, t, d_model]; encoded [b, s, d_model] or None; self_mask [b, 1, t, t'], cross_mask
  [b, 1, t, s]; decode_index [b] in 'decode' mode. The Python values, train and mode ('full',
  'init_cache', 'decode', 'prefill': tfm/model/attention.py), are keyword-only. In 'init_cache'
  mode only the caches are created (from x's and encoded's shapes; the masks, bias and positions
  are not read) and x is returned unchanged.
  """

  cfg: ModelConfig
  cross_attention: bool = True

  @nn.compact
  def __call__(self, x, encoded=None, self_mask=None, cross_mask=None, bias=None, positions=None,
               decode_index=None, *, train: bool = False, mode: str = "full"):
    cfg = self.cfg
    self_attn = attention(cfg, "self_attention")
    cross_attn = attention(cfg, "cross_attention", is_cross=True) if self.cross_attention else None
    if mode == "init_cache":
      self_attn(x, mode=mode)
      if cross_attn is not None:
        cross_attn(x, encoded, mode=mode)
      return x
    x = add(cfg, x, lambda y: self_attn(y, mask=self_mask, bias=bias, positions=positions,
                                        train=train, mode=mode, decode_index=decode_index),
            norm(cfg, "self_attention_norm"), train)
    if cross_attn is not None:
      x = add(cfg, x, lambda y: cross_attn(y, encoded, mask=cross_mask, train=train, mode=mode),
              norm(cfg, "cross_attention_norm"), train)
    ffn = feed_forward(cfg)
    x = add(cfg, x, lambda y: ffn(y, train), norm(cfg, "ffn_norm"), train)
    return P.constrain(x, P.BLD)
