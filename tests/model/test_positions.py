import math

import jax
import jax.numpy as jnp
import numpy as np

from tfm.model import positions as pos


def test_sinusoids_match_the_paper_formula():
  d = 16
  got = np.asarray(pos.sinusoids(jnp.arange(50)[None], d))[0]
  for p in (0, 1, 7, 49):
    for i in range(d // 2):
      angle = p / 10000 ** (2 * i / d)
      assert math.isclose(got[p, 2 * i], math.sin(angle), abs_tol=1e-5)
      assert math.isclose(got[p, 2 * i + 1], math.cos(angle), abs_tol=1e-5)


def test_rope_scores_depend_only_on_relative_position():
  key_q, key_k = jax.random.split(jax.random.PRNGKey(0))
  q = jax.random.normal(key_q, (1, 1, 1, 8))
  k = jax.random.normal(key_k, (1, 1, 1, 8))
  score = lambda m, n: float(jnp.sum(pos.apply_rope(q, jnp.array([[m]])) * pos.apply_rope(k, jnp.array([[n]]))))
  assert math.isclose(score(3, 1), score(12, 10), rel_tol=1e-4)
  assert math.isclose(score(0, 0), float(jnp.sum(q * k)), rel_tol=1e-5)
  assert not math.isclose(score(3, 1), score(3, 2), rel_tol=1e-3)
  # Rotation preserves norms.
  assert math.isclose(float(jnp.linalg.norm(pos.apply_rope(q, jnp.array([[5]])))),
                      float(jnp.linalg.norm(q)), rel_tol=1e-5)


def test_alibi_slopes_are_the_geometric_sequence():
  np.testing.assert_allclose(pos.alibi_slopes(8), [2.0 ** -(k + 1) for k in range(8)], rtol=1e-6)
  six = pos.alibi_slopes(6)  # 4 from the power of two below, then every other of the 8-head set
  np.testing.assert_allclose(six, [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3], rtol=1e-6)
  bias = pos.alibi_bias(jnp.array([[0, 1, 2]]), jnp.array([[0, 1, 2]]), 8)
  assert bias.shape == (1, 8, 3, 3)
  assert math.isclose(float(bias[0, 0, 2, 0]), -0.5 * 2, rel_tol=1e-6)


def test_relative_buckets():
  rel = jnp.arange(-200, 201)
  b = np.asarray(pos.relative_buckets(rel, 32, 128, bidirectional=True))
  # Exact buckets for small distances, one per side, keys after the query in the upper half.
  assert b[200] == 0 and b[201] == 17 and b[199] == 1 and b[207] == 23
  assert b.min() >= 0 and b.max() <= 31
  assert b[0] == b[10] == 15 and b[-1] == 31  # beyond max_distance: the last bucket of each side
  assert np.all(np.diff(b[200:]) >= 0)  # monotone in distance
  uni = np.asarray(pos.relative_buckets(rel, 32, 128, bidirectional=False))
  assert np.all(uni[201:] == 0)  # future keys all map to bucket 0 in the causal case
  assert uni[199] == 1 and uni.max() == 31


def test_every_accepted_bucket_setting_gives_buckets_in_range():
  """model.relative_buckets / relative_max_distance: a setting the config accepts maps every
  distance, both ways, into [0, buckets); the edge ones it refuses divided by log(1) (32 buckets
  over a max distance of 16: bucket -2**31 + 15, a NaN bias) or by zero (fewer than 4 buckets)."""
  from tfm.model.config import ModelConfig
  rel = jnp.arange(-300, 301)
  accepted = 0
  for buckets in (2, 3, 4, 5, 8, 16, 32):
    for distance in (1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 64, 128):
      try:
        ModelConfig(positions="relative", relative_buckets=buckets, relative_max_distance=distance)
      except ValueError as e:
        assert "model.relative_buckets" in str(e)
        continue
      accepted += 1
      for both_ways in (True, False):
        b = np.asarray(pos.relative_buckets(rel, buckets, distance, bidirectional=both_ways))
        assert 0 <= b.min() and b.max() < buckets, (buckets, distance, both_ways)
  assert accepted >= 30


def test_without_positions_the_encoder_sees_a_set_and_sinusoids_do_not():
  """positions='none': permuting the source permutes the encoder's output the same way (nothing
  tells it where a token stands); with the paper's sinusoids it does not."""
  from tests.model.helpers import draw, tiny
  from tfm.model.transformer import Transformer
  inputs = jnp.array([[5, 9, 12, 7, 3, 21]], jnp.int32)
  perm = np.array([3, 0, 5, 1, 4, 2])
  for positions, equivariant in (("none", True), ("sinusoidal", False)):
    model, variables = draw(tiny(positions=positions), inputs, inputs)
    encode = jax.jit(lambda v, x: model.apply(v, x, method=Transformer.encode))
    a = np.asarray(encode(variables, inputs))[:, perm]
    b = np.asarray(encode(variables, inputs[:, perm]))
    assert np.allclose(a, b, atol=1e-5) == equivariant, positions
