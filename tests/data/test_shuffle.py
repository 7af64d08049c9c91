"""tfm/data/shuffle.py: an epoch's permutation is grain's index shuffle, number for number."""

import numpy as np
import pytest
from grain.experimental import index_shuffle

from tfm.data import shuffle


def _grain(n, seed, indices):
  return [index_shuffle(int(i), max_index=n - 1, seed=seed, rounds=4) for i in indices]


# Around the block sizes: below, at and above 2^16 (the smallest block), 300,001 (a bigger block,
# walked element by element), and n - 1 = 2^16 or 2^18, where grain's block is one bit short.
@pytest.mark.parametrize("n", [2, 3, 7, 250, 65535, 65536, 65537, 65538, 2**18 + 1, 300_001])
@pytest.mark.parametrize("seed", [0, 5, 2**32 - 1])
def test_epoch_permutation_is_grains_index_shuffle(n, seed):
  out = shuffle.epoch_permutation(n, seed)
  assert out.dtype == np.int64 and out.shape == (n,)
  assert np.array_equal(np.sort(out), np.arange(n))  # a permutation, always
  indices = np.arange(n) if n <= 300 else np.random.default_rng(n).choice(n, 300, replace=False)
  grains = _grain(n, seed, [0, n - 1] if n - 1 in (2**16, 2**18) else indices)
  if n - 1 in (2**16, 2**18):  # grain's is not a permutation there: two indices collide
    assert grains[0] == grains[1]
  else:
    assert out[indices].tolist() == grains


def test_one_element_and_empty():
  assert shuffle.epoch_permutation(1, 3).tolist() == [0]
  with pytest.raises(ValueError, match="cannot shuffle 0 elements"):
    shuffle.epoch_permutation(0, 3)


def test_seed_seq_and_block_bits():
  # std::seed_seq{s}.generate(out, out + 4), printed by a C++ program built with g++ (libstdc++).
  assert shuffle.seed_seq_generate(0, 4) == [2963817213, 69796629, 1973464570, 532167439]
  assert shuffle.seed_seq_generate(5, 4) == [2245491460, 1031600070, 716532090, 3792855389]
  assert shuffle.seed_seq_generate(2**32 - 1, 4) == [3258260622, 2976084991, 227751652, 537413182]
  assert shuffle.block_bits(1) == 16 and shuffle.block_bits(2**16) == 16
  assert shuffle.block_bits(2**16 + 1) == 18 and shuffle.block_bits(2**19) == 20
