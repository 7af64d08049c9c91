"""tfm/model/dropout.py: flax's nn.Dropout to the bit, and a stack member's rate as an array."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tfm.model import dropout


class Ours(nn.Module):
  rate: float

  @nn.compact
  def __call__(self, x):
    return dropout.Dropout(self.rate)(x, deterministic=False)


class Flax(nn.Module):
  rate: float

  @nn.compact
  def __call__(self, x):
    return nn.Dropout(self.rate)(x, deterministic=False)


X = jax.random.normal(jax.random.PRNGKey(0), (4, 8, 16))
RNGS = {"dropout": jax.random.PRNGKey(7)}


@pytest.mark.parametrize("rate", [0.0, 0.1, 0.3])
def test_the_mask_is_flaxs(rate):
  """The same module name (Dropout_0), the same make_rng: the same mask and scale."""
  ours = Ours(rate).apply({}, X, rngs=RNGS)
  assert np.array_equal(ours, Flax(rate).apply({}, X, rngs=RNGS))


def test_a_members_keep_probability_replaces_the_rate():
  """Inside member_keep, each Dropout takes its kind's keep probability: 0.7 masks as a rate of
  0.3 does, a keep of 1 leaves every value as it is, and under vmap each member gets its own."""
  want = Flax(0.3).apply({}, X, rngs=RNGS)
  with dropout.member_keep({dropout.RESIDUAL: jnp.float32(0.7)}):
    assert np.array_equal(Ours(0.5).apply({}, X, rngs=RNGS), want)
  with dropout.member_keep({dropout.RESIDUAL: jnp.float32(1.0)}):
    assert np.array_equal(Ours(0.5).apply({}, X, rngs=RNGS), X)

  def member(keep):
    with dropout.member_keep({dropout.RESIDUAL: keep}):
      return Ours(0.5).apply({}, X, rngs=RNGS)
  stacked = jax.jit(jax.vmap(member))(jnp.array([0.7, 1.0], jnp.float32))
  assert np.array_equal(stacked[0], want) and np.array_equal(stacked[1], X)
