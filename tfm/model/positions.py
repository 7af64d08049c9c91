"""Positional information: the paper's sinusoids (section 3.5) and the variants researchers ablate.

- sinusoidal: added to the embeddings, PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...).
- learned:    a trained [max_length, d_model] table added to the embeddings (Table 3, row E).
- rope:       rotary embeddings applied to queries and keys inside self-attention (Su et al. 2021).
- alibi:      a per-head linear distance penalty added to attention logits (Press et al. 2022).
- relative:   T5-style bucketed relative-position bias, one learned scalar per bucket and head
              (Raffel et al. 2020), shared by all layers of a stack.
- none:       no positional information at all: the encoder sees its input as a set (its output
              at a token does not depend on where the token stands), and the decoder's only cue
              to order is its causal mask.
All functions take explicit per-token positions, so packed segments restart at 0.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from tfm.model.partitioning import BLD, constrain, with_axes


def sinusoids(positions: jax.Array, d_model: int) -> jax.Array:
  """Interleaved sinusoidal encodings. positions [...] (int) -> [..., d_model] float32."""
  i = np.arange(d_model // 2, dtype=np.float32)
  inv_timescale = jnp.asarray(1.0 / (10000.0 ** (2.0 * i / d_model)))
  angles = positions.astype(jnp.float32)[..., None] * inv_timescale  # [..., d_model/2]
  # Column 2i holds sin, column 2i+1 holds cos.
  return jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1).reshape(*positions.shape, d_model)


class LearnedPositions(nn.Module):
  """A trained position table (row E). positions [batch, length] -> [batch, length, d_model]."""

  max_length: int
  d_model: int

  @nn.compact
  def __call__(self, positions: jax.Array) -> jax.Array:
    table = self.param("pos_embedding", with_axes(nn.initializers.normal(0.02), ("position", "embed")),
                       (self.max_length, self.d_model), jnp.float32)
    # Gathered whole along d_model, as the token embedding is (tfm/model/embedding.py): a gather
    # from the table as stored, embed split over fsdp, made XLA rematerialize it in full.
    return constrain(jnp.take(constrain(table, ("position", None)), positions, axis=0), BLD)


def apply_rope(x: jax.Array, positions: jax.Array, base: float = 10000.0) -> jax.Array:
  """Rotary embedding, half-split convention.

  x [batch, length, heads, d] with d even; positions [batch, length]. Feature j < d/2 is paired with
  feature j + d/2 and the pair is rotated by angle pos * base^(-2j/d).
  """
  d = x.shape[-1]
  half = d // 2
  inv_freq = 1.0 / (base ** (np.arange(half, dtype=np.float32) * 2.0 / d))
  angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # [b, l, d/2]
  cos = jnp.cos(angles)[:, :, None, :]
  sin = jnp.sin(angles)[:, :, None, :]
  x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x.dtype)


def alibi_slopes(num_heads: int) -> np.ndarray:
  """Head slopes: the geometric sequence 2^(-8/n), 2^(-16/n), ... for n a power of two; otherwise
  the slopes of the next lower power of two followed by every other slope of the next higher one."""

  def geometric(n):
    start = 2.0 ** (-8.0 / n)
    return [start ** (k + 1) for k in range(n)]

  if math.log2(num_heads).is_integer():
    return np.asarray(geometric(num_heads), np.float32)
  lower = 2 ** math.floor(math.log2(num_heads))
  extra = geometric(2 * lower)[0::2][: num_heads - lower]
  return np.asarray(geometric(lower) + extra, np.float32)


def alibi_bias(q_positions: jax.Array, k_positions: jax.Array, num_heads: int) -> jax.Array:
  """-slope_h * |q - k|. q_positions [batch, q_len], k_positions [batch, k_len] -> [batch, heads, q, k]."""
  distance = jnp.abs(q_positions[:, :, None] - k_positions[:, None, :]).astype(jnp.float32)
  return -jnp.asarray(alibi_slopes(num_heads))[None, :, None, None] * distance[:, None]


def relative_buckets(relative: jax.Array, num_buckets: int, max_distance: int,
                     bidirectional: bool) -> jax.Array:
  """Maps relative distances (key - query) to bucket ids in [0, num_buckets).

  Bidirectional: half the buckets for keys after the query, half for keys before. Within a
  direction, the first half of the buckets are exact distances 0, 1, ...; the rest grow
  logarithmically up to max_distance, beyond which everything shares the last bucket.
  """
  n = num_buckets
  bucket = jnp.zeros_like(relative)
  if bidirectional:
    n //= 2
    bucket = bucket + jnp.where(relative > 0, n, 0)
    distance = jnp.abs(relative)
  else:
    distance = jnp.maximum(-relative, 0)
  exact = n // 2
  log_ratio = jnp.log(jnp.maximum(distance, 1).astype(jnp.float32) / exact) / math.log(max_distance / exact)
  far = exact + (log_ratio * (n - exact)).astype(jnp.int32)
  far = jnp.minimum(far, n - 1)
  return bucket + jnp.where(distance < exact, distance, far)


class RelativeBias(nn.Module):
  """T5-style learned bias. positions [batch, q_len], [batch, k_len] -> [batch, heads, q_len, k_len]."""

  num_heads: int
  num_buckets: int
  max_distance: int
  bidirectional: bool

  @nn.compact
  def __call__(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
    table = self.param("rel_embedding", with_axes(nn.initializers.normal(0.02), ("relpos", "heads")),
                       (self.num_buckets, self.num_heads), jnp.float32)
    relative = k_positions[:, None, :] - q_positions[:, :, None]
    buckets = relative_buckets(relative, self.num_buckets, self.max_distance, self.bidirectional)
    return jnp.transpose(jnp.take(table, buckets, axis=0), (0, 3, 1, 2))
