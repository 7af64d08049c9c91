"""Checksums of array trees, computed on the devices, for checkpoints that notice corrupt bytes.

Each array's bits (float32 -> uint32, bfloat16 -> uint16 -> uint32, ...) are summed twice with
wrapping uint32 arithmetic: plainly, and weighted by a multiplier of each element's global index.
Integer sums do not depend on the order of the additions, so the checksum of an array is the same
however it is sharded, on any number of devices or hosts; one flipped bit changes the plain sum,
and moved or swapped elements change the weighted one. It is a corruption check, not a
cryptographic one. The JSON side of a checkpoint is checked with SHA-256.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

_MULTIPLIER = np.uint32(2654435761)  # Knuth's multiplicative hash constant


def _bits(x: jax.Array) -> jax.Array:
  """The array's bits as uint32 (1 per element)."""
  if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  width = jnp.dtype(x.dtype).itemsize
  unsigned = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}[width]
  if width == 8:  # 64-bit values: both halves
    return jax.lax.bitcast_convert_type(x, jnp.uint32).reshape(-1)
  if x.dtype == jnp.bool_:
    return x.astype(jnp.uint32).reshape(-1)
  return jax.lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32).reshape(-1)


def _leaf_sums(x: jax.Array) -> jax.Array:
  bits = _bits(x)
  weights = jax.lax.iota(jnp.uint32, bits.shape[0]) * _MULTIPLIER + np.uint32(1)
  return jnp.stack([jnp.sum(bits, dtype=jnp.uint32), jnp.sum(bits * weights, dtype=jnp.uint32)])


@jax.jit
def _tree_sums(tree):
  return jax.tree.map(_leaf_sums, tree)


def array_name(path) -> str:
  """An array's name in a checkpoint's manifest: its key path as "a/b/c"."""
  return jax.tree_util.keystr(path, simple=True, separator="/")


def array_checksums(tree: Any) -> dict[str, str]:
  """{"a/b/c": "plain:weighted" (hex)} for every array leaf of `tree` (device arrays, any sharding)."""
  sums = jax.device_get(_tree_sums(tree))
  flat = jax.tree_util.tree_flatten_with_path(sums)[0]
  return {array_name(path): f"{int(s[0]):08x}:{int(s[1]):08x}" for path, s in flat}


def json_checksum(value: Any) -> str:
  """SHA-256 of the canonical JSON of a value."""
  return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def mismatches(expected: dict[str, str], actual: dict[str, str]) -> list[str]:
  """Key paths whose checksums differ or that only one side has."""
  return sorted(k for k in set(expected) | set(actual) if expected.get(k) != actual.get(k))
