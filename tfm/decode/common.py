"""Shared pieces of the decoders: the step-function contract, batch size and length limits.

Every decoder in this package drives a model through one function,

  tokens_to_logits(ids: int32[rows, 1], cache: PyTree) -> (logits: float[rows, vocab], new_cache)

where `ids` holds the previous token of each row (the start token, 0, at the first step) and every
cache leaf has a leading `rows` dimension (batch, or batch * beam inside beam search). The cache
carries whatever the model needs to continue a prefix (keys/values of past tokens, the projected
encoder output, the position); decoders only thread it through, tile it and reorder its rows.
Nothing here leaves the device, so all decoders run under `jax.jit` with sharded caches.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

PyTree = Any
TokensToLogits = Callable[[jax.Array, PyTree], tuple[jax.Array, PyTree]]


def infer_batch_size(cache: PyTree, max_lengths: jax.Array | None, batch_size: int | None) -> int:
  """The static batch size: given, else from max_lengths [batch], else from the first cache leaf."""
  if batch_size is not None:
    return int(batch_size)
  if max_lengths is not None:
    return int(jnp.shape(max_lengths)[0])
  leaves = jax.tree.leaves(cache)
  if not leaves:
    raise ValueError("cannot infer the batch size: pass batch_size or max_lengths (cache is empty)")
  return int(jnp.shape(leaves[0])[0])


def resolve_max_lengths(max_lengths: jax.Array | None, batch_size: int,
                        max_decode_len: int) -> jax.Array:
  """Per-example output limits int32[batch], clipped to [1, max_decode_len] (None: max_decode_len).

  A limit counts generated tokens, EOS included; the start token is not part of the output.
  """
  if max_decode_len < 1:
    raise ValueError(f"max_decode_len must be >= 1, got {max_decode_len}")
  if max_lengths is None:
    return jnp.full((batch_size,), max_decode_len, jnp.int32)
  max_lengths = jnp.asarray(max_lengths, jnp.int32)
  if max_lengths.shape != (batch_size,):
    raise ValueError(f"max_lengths must have shape ({batch_size},), got {max_lengths.shape}")
  return jnp.clip(max_lengths, 1, max_decode_len)


def input_length_limits(inputs: jax.Array, extra: int = 50, pad_id: int = 0) -> jax.Array:
  """The paper's per-example output limit (section 6.1): input length + extra, int32[batch].

  inputs: int32[batch, src_len], unpacked, padded with pad_id. Pass the result as `max_lengths`;
  decoders clip it to their static max_decode_len.
  """
  return jnp.sum(inputs != pad_id, axis=-1).astype(jnp.int32) + extra
