"""A tiny sequence-to-sequence model for the train tests, independent of tfm/model.

It has the Transformer's call signature and config fields the train code reads (`cfg`, d_model,
vocab, ...), uses the same logical axis names for parameters (3-D attention kernels included) and
activations, ties the output projection to the embedding, and has dropout, so it exercises every
sharding rule and the dropout rng. One causal self-attention over the targets, one cross-attention
over the inputs, one ReLU MLP, no LayerNorm.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from tfm.model import partitioning as P
from tfm.model.config import ModelConfig

CFG = dict(vocab_size=64, d_model=32, d_ff=64, num_heads=8, d_k=4, d_v=4, num_encoder_layers=1,
           num_decoder_layers=1, dropout_rate=0.1, max_length=64)


def tiny_config(**changes) -> ModelConfig:
  return ModelConfig(**{**CFG, **changes})


def _param(module, name, shape, names, scale=1.0):
  init = nn.initializers.variance_scaling(scale, "fan_avg", "uniform")
  if len(shape) == 3:  # fan_in / fan_out over the flattened [d_model, heads * d] view
    init = nn.initializers.variance_scaling(scale, "fan_avg", "uniform",
                                            in_axis=0 if names[0] == "embed" else (0, 1),
                                            out_axis=(1, 2) if names[0] == "embed" else 2)
  return module.param(name, P.with_axes(init, names), shape, jnp.float32)


class TinyAttention(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, x, kv, mask):
    c = self.cfg
    wq = _param(self, "query", (c.d_model, c.num_heads, c.d_k), ("embed", "heads", "kv"))
    wk = _param(self, "key", (c.d_model, c.kv_heads, c.d_k), ("embed", "kv_heads", "kv"))
    wv = _param(self, "value", (c.d_model, c.kv_heads, c.d_v), ("embed", "kv_heads", "kv"))
    wo = _param(self, "out", (c.num_heads, c.d_v, c.d_model), ("heads", "kv", "embed"))
    q = P.constrain(jnp.einsum("bld,dhk->blhk", x, wq), P.BLHD)
    k = P.constrain(jnp.einsum("bld,dhk->blhk", kv, wk), P.BLKD)
    v = P.constrain(jnp.einsum("bld,dhk->blhk", kv, wv), P.BLKD)
    group = c.num_heads // c.kv_heads
    k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
    logits = jnp.einsum("bqhk,bshk->bhqs", q, k) * c.d_k**-0.5
    weights = jax.nn.softmax(jnp.where(mask, logits, -1e9), axis=-1)
    y = P.constrain(jnp.einsum("bhqs,bshk->bqhk", weights, v), P.BLHD)
    return P.constrain(jnp.einsum("blhk,hkd->bld", y, wo), P.BLD)


class TinySeq2Seq(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, inputs, targets, *, inputs_segmentation=None, targets_segmentation=None,
               inputs_positions=None, targets_positions=None, train: bool = False):
    c = self.cfg
    table = _param(self, "embedding", (c.vocab_size, c.d_model), ("vocab", "embed"))
    positions = _param(self, "positions", (c.max_length, c.d_model), ("position", "embed"), 0.1)
    embed = lambda t, p: P.constrain(table[t] * c.d_model**0.5 + positions[p], P.BLD)
    tseg = (targets != 0).astype(jnp.int32) if targets_segmentation is None else targets_segmentation
    iseg = (inputs != 0).astype(jnp.int32) if inputs_segmentation is None else inputs_segmentation
    tpos = jnp.broadcast_to(jnp.arange(targets.shape[1]), targets.shape) if targets_positions is None \
        else targets_positions
    ipos = jnp.broadcast_to(jnp.arange(inputs.shape[1]), inputs.shape) if inputs_positions is None \
        else inputs_positions
    shifted = jnp.pad(targets, ((0, 0), (1, 0)))[:, :-1]
    shifted = jnp.where(tpos == 0, 0, shifted)  # every segment starts from token 0
    x = nn.Dropout(c.dropout_rate)(embed(shifted, tpos), deterministic=not train)
    memory = embed(inputs, ipos)
    length = targets.shape[1]
    causal = jnp.arange(length)[None, :] <= jnp.arange(length)[:, None]
    self_mask = ((tseg[:, :, None] == tseg[:, None, :]) & causal)[:, None]
    cross_mask = ((tseg[:, :, None] == iseg[:, None, :]) & (iseg != 0)[:, None, :])[:, None]
    x = x + TinyAttention(c, name="self_attention")(x, x, self_mask)
    x = x + TinyAttention(c, name="cross_attention")(x, memory, cross_mask)
    w1 = _param(self, "wi", (c.d_model, c.d_ff), ("embed", "mlp"))
    w2 = _param(self, "wo", (c.d_ff, c.d_model), ("mlp", "embed"))
    hidden = P.constrain(nn.relu(jnp.einsum("bld,df->blf", x, w1)), P.BLF)
    hidden = nn.Dropout(c.dropout_rate)(hidden, deterministic=not train)
    x = x + P.constrain(jnp.einsum("blf,fd->bld", hidden, w2), P.BLD)
    logits = jnp.einsum("bld,vd->blv", x, table)
    return P.constrain(logits.astype(jnp.float32), P.BLV)
