"""grain's index shuffle, a whole epoch at a time: the same permutation, computed with numpy.

grain's `MapDataset.shuffle(seed)` (and `grain.experimental.index_shuffle`) maps position i of an
epoch of n elements to index_shuffle(i, max_index=n - 1, seed=seed + epoch, rounds=4): a
4-round Simon-style Feistel cipher on B-bit blocks, B = max(16, ceil(log2(n - 1)) rounded up to
even), whose outputs above n - 1 are encrypted again until they fall in [0, n) (cycle walking,
Black and Rogaway 2002). Called once per element it is slow, slower still for small n (B is at
least 16, so an epoch of 250 examples walks ~260 steps per element; see experiments/SPEED.md).

`epoch_permutation(n, seed)` returns the n numbers at once, bit for bit grain's (the tests compare
them): the cipher runs on numpy arrays, and for B = 16 it is tabulated over all 2^16 blocks, whose
walks are then followed by pointer doubling (log2 of the longest walk passes over the table).
An epoch of 4.5M examples (WMT14 en-de) takes a small fraction of the element-by-element time
(see experiments/SPEED.md). One exception: when n - 1 is 2^16, 2^18, 2^20, ..., grain's B is one
bit short (index n - 1 encrypts as index 0 does, so one example comes twice an epoch and another
never); there B is taken for n itself, two bits more, and the result is a permutation, not grain's.

The cipher, with W = B / 2 and x = (left, right) in two W-bit words:
  keys k_0..k_3 = std::seed_seq{seed}.generate(4) (C++ [rand.util.seedseq]), truncated to W bits
  F(v) = (rotl(v, 1) & rotl(v, 8)) ^ rotl(v, 2)
  per pair of rounds: left ^= F(right) ^ k_2j;  right ^= F(left) ^ k_2j+1
"""

from __future__ import annotations

import math

import numpy as np

ROUNDS = 4  # what grain's MapDataset.shuffle uses
_MIN_BLOCK_BITS = 16
_M32 = 0xFFFFFFFF


def seed_seq_generate(seed: int, count: int) -> list[int]:
  """std::seed_seq{seed}.generate(out, out + count): `count` 32-bit words (C++11 26.5.7.1)."""
  n, s, values = count, 1, [seed & _M32]
  out = [0x8B8B8B8B] * n
  t = 11 if n >= 623 else 7 if n >= 68 else 5 if n >= 39 else 3 if n >= 7 else (n - 1) // 2
  p = (n - t) // 2
  q = p + t
  mix = lambda x: x ^ (x >> 27)
  for k in range(max(s + 1, n)):
    r1 = (1664525 * mix(out[k % n] ^ out[(k + p) % n] ^ out[(k - 1) % n])) & _M32
    r2 = (r1 + (s if k == 0 else k % n + values[k - 1] if k <= s else k % n)) & _M32
    out[(k + p) % n] = (out[(k + p) % n] + r1) & _M32
    out[(k + q) % n] = (out[(k + q) % n] + r2) & _M32
    out[k % n] = r2
  for k in range(max(s + 1, n), max(s + 1, n) + n):
    r3 = (1566083941 * mix((out[k % n] + out[(k + p) % n] + out[(k - 1) % n]) & _M32)) & _M32
    r4 = (r3 - k % n) & _M32
    out[(k + p) % n] ^= r3
    out[(k + q) % n] ^= r4
    out[k % n] = r4
  return out


def block_bits(max_index: int) -> int:
  """B for max_index >= 1: ceil(log2(max_index)) rounded up to even, at least 16 (as grain)."""
  bits = math.ceil(math.log2(max_index))
  return max(bits + bits % 2, _MIN_BLOCK_BITS)


def encrypt(blocks: np.ndarray, seed: int, bits: int) -> np.ndarray:
  """The cipher of the module docstring on uint64 blocks (each word keeps its low W bits)."""
  w = bits // 2
  mask = np.uint64((1 << w) - 1)

  def rotl(v, r):
    return ((v << np.uint64(r)) | (v >> np.uint64(w - r))) & mask

  def f(v):
    return (rotl(v, 1) & rotl(v, 8)) ^ rotl(v, 2)

  keys = [np.uint64(k & ((1 << w) - 1)) for k in seed_seq_generate(seed, ROUNDS)]
  blocks = blocks.astype(np.uint64)
  left, right = (blocks >> np.uint64(w)) & mask, blocks & mask
  for j in range(0, ROUNDS, 2):
    left ^= f(right) ^ keys[j]
    right ^= f(left) ^ keys[j + 1]
  return (left << np.uint64(w)) | right


def epoch_permutation(n: int, seed: int) -> np.ndarray:
  """int64 [n], a permutation of 0..n-1: out[i] = grain index_shuffle(i, max_index=n - 1,
  seed=seed, rounds=4) (but for the n of the module docstring)."""
  if n < 1:
    raise ValueError(f"cannot shuffle {n} elements")
  if n == 1:
    return np.zeros((1,), np.int64)
  max_index, seed = n - 1, seed % 2**32
  bits = block_bits(n)  # = grain's block_bits(max_index) unless max_index is 2^16, 2^18, ...
  out = encrypt(np.arange(n, dtype=np.uint64), seed, bits)
  if bits == _MIN_BLOCK_BITS:  # possibly many steps a walk: tabulate the 2^16 blocks
    nxt = encrypt(np.arange(1 << bits, dtype=np.uint64), seed, bits).astype(np.int64)
    done = nxt <= max_index  # nxt[b]: the walk from b after 2^r steps, or where it ended
    while not done[out[out > max_index].astype(np.int64)].all():
      nxt, done = np.where(done, nxt, nxt[nxt]), done | done[nxt]
    walking = out > max_index
    out[walking] = nxt[out[walking].astype(np.int64)]
  else:  # the domain is < 4n: a few steps a walk, on the elements still walking
    walking = np.flatnonzero(out > max_index)
    while walking.size:
      out[walking] = encrypt(out[walking], seed, bits)
      walking = walking[out[walking] > max_index]
  return out.astype(np.int64)
