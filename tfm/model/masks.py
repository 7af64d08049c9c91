"""Boolean attention masks, True where a query may attend to a key. Shapes [batch, 1, q_len, k_len].

Packed batches hold several examples per row; segment ids (1, 2, ... per example, 0 on padding) keep
attention inside an example. An unpacked batch is the special case of one segment per row.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def segment_mask(q_segments: jax.Array, k_segments: jax.Array) -> jax.Array:
  """Same-segment, non-padding keys. q_segments [b, q], k_segments [b, k] -> [b, 1, q, k]."""
  same = q_segments[:, :, None] == k_segments[:, None, :]
  return (same & (k_segments != 0)[:, None, :])[:, None]


def causal_mask(q_len: int, k_len: int) -> jax.Array:
  """Key index <= query index (the decoder's auto-regressive mask). -> [1, 1, q, k]."""
  return (jnp.arange(k_len)[None, :] <= jnp.arange(q_len)[:, None])[None, None]


def decode_mask(index: jax.Array, cache_len: int) -> jax.Array:
  """One query at position index [b] over a cache of cache_len keys: keys 0..index. -> [b, 1, 1, L]."""
  return (jnp.arange(cache_len)[None, :] <= index[:, None])[:, None, None, :]


def segments_from_tokens(tokens: jax.Array) -> jax.Array:
  """Segment ids for an unpacked batch: 1 on real tokens (id != 0), 0 on padding."""
  return (tokens != 0).astype(jnp.int32)


def positions_from_tokens(tokens: jax.Array) -> jax.Array:
  """Positions 0..length-1 for an unpacked batch. tokens [b, l] -> [b, l]."""
  return jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)


def positions_from_segments(segmentation: jax.Array) -> jax.Array:
  """Positions that restart at 0 with each segment of a packed row (segments are contiguous runs of
  one id, as the data pipelines pack them). segmentation [b, l] -> [b, l]; padding positions count
  on from where the padding starts, and nothing reads them."""
  index = jnp.arange(segmentation.shape[1], dtype=jnp.int32)
  previous = jnp.pad(segmentation, ((0, 0), (1, 0)), constant_values=-1)[:, :-1]
  starts = jnp.where(segmentation != previous, index, 0)
  return index - jax.lax.cummax(starts, axis=1)
