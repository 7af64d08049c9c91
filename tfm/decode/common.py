"""Shared pieces of the decoders: the step-function contract, batch size and length limits.

Every decoder in this package drives a model through one function,

  tokens_to_logits(ids: int32[rows, 1], cache: PyTree) -> (logits: float[rows, vocab], new_cache)

where `ids` holds the previous token of each row (the start token, 0, at the first step) and every
cache leaf has a leading `rows` dimension (batch, or batch * beam inside beam search; beam search
keeps the leaves its `beam_invariant` predicate picks at batch rows, read once per example). The
cache carries whatever the model needs to continue a prefix (keys/values of past tokens, the
projected encoder output, the position); decoders only thread it through, tile it and reorder its
rows. Nothing here leaves the device, so all decoders run under `jax.jit` with sharded caches.

A cache may also grow as the output does: a decoder given cache_lengths (L_1 < ... < L_n =
max_decode_len) starts from a cache of L_1 positions, runs steps 0 .. L_1 - 1 in one while-loop,
calls grow_cache(cache, L_2), runs steps L_1 .. L_2 - 1 in the next, and so on. A step then reads
a cache about as long as the prefix instead of the longest output.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

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


def cache_lengths(max_decode_len: int, phases: int) -> tuple[int, ...]:
  """The cache lengths of a decoder run in `phases` while-loops: max_decode_len cut into equal
  parts, L_i = ceil(i * max_decode_len / phases) (e.g. 82, 3 -> (28, 55, 82)); fewer when short."""
  if phases < 1:
    raise ValueError(f"phases must be >= 1, got {phases}")
  return tuple(sorted({-(-i * max_decode_len // phases) for i in range(1, phases + 1)}))


def check_cache_lengths(lengths: Sequence[int], grow_cache: Callable | None,
                        max_decode_len: int) -> tuple[int, ...]:
  """The loop ends of a decoder: `lengths` checked (increasing, the last max_decode_len, grow_cache
  given when there are several), or (max_decode_len,) when it is empty."""
  lengths = tuple(int(n) for n in lengths) or (max_decode_len,)
  if lengths[-1] != max_decode_len or any(a >= b for a, b in zip(lengths, lengths[1:])) \
      or lengths[0] < 1:
    raise ValueError(f"cache_lengths must increase from >= 1 to max_decode_len={max_decode_len}, "
                     f"got {lengths}")
  if len(lengths) > 1 and grow_cache is None:
    raise ValueError("cache_lengths with several lengths needs grow_cache")
  return lengths


def while_phases(cond: Callable[[Any, int], jax.Array], body: Callable[[Any], Any], state: Any,
                 ends: Sequence[int], grow: Callable[[Any, int], Any]) -> Any:
  """`jax.lax.while_loop(lambda s: cond(s, end), body, state)` for each end in turn, with
  state = grow(state, end) before every loop but the first: a decoder's steps in phases whose
  cache holds `end` positions (one compiled loop body per phase)."""
  for i, end in enumerate(ends):
    if i:
      state = grow(state, end)
    state = jax.lax.while_loop(functools.partial(cond, end=end), body, state)
  return state
