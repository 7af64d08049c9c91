"""Masks proven by perturbation: what must not be seen, changed, leaves the outputs unchanged."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.model.helpers import draw, tiny

POSITIONS = ["sinusoidal", "learned", "rope", "alibi", "relative"]


@functools.lru_cache(maxsize=None)
def _model(positions):
  """(variables, jitted apply) of the tiny model with `positions`, shared by this file's tests:
  each way of calling it below is traced and compiled once a model. The parameters' shapes do not
  depend on the sequence length. One layer a stack: every layer applies the stack's masks (and its
  relative-position bias) to its own attention, and one layer compiles in about half the time."""
  tokens = jnp.ones((1, 6), jnp.int32)
  model, v = draw(tiny(positions=positions, num_encoder_layers=1, num_decoder_layers=1), tokens,
                  tokens)
  return v, jax.jit(model.apply)


@pytest.mark.parametrize("positions", POSITIONS)
def test_padding_and_future_tokens_are_invisible(positions):
  inputs = jnp.array([[5, 6, 7, 1, 0, 0]])
  targets = jnp.array([[8, 9, 10, 11, 1, 0]])
  v, apply = _model(positions)
  base = np.asarray(apply(v, inputs, targets))
  # A padded source token changed: no output at a real target position moves (its segment id stays 0).
  other = np.asarray(apply(v, inputs.at[0, 5].set(13), targets, inputs_segmentation=(inputs != 0)))
  np.testing.assert_allclose(other[0, :5], base[0, :5], atol=1e-5)
  # A future target token changed: the outputs before it (which predict up to it) are unchanged.
  changed = np.asarray(apply(v, inputs, targets.at[0, 3].set(20)))
  np.testing.assert_allclose(changed[0, :4], base[0, :4], atol=1e-5)
  assert np.abs(changed[0, 4] - base[0, 4]).max() > 1e-4  # ... and the next one does move.
  # A real source token changed: every target position moves (the perturbation test can fail).
  moved = np.asarray(apply(v, inputs.at[0, 1].set(13), targets))
  assert np.abs(moved[0, :5] - base[0, :5]).max() > 1e-4


@pytest.mark.parametrize("positions", POSITIONS)
def test_packed_segments_do_not_see_each_other(positions):
  inputs = jnp.array([[5, 6, 1, 7, 8, 9, 1, 0]])
  in_seg = jnp.array([[1, 1, 1, 2, 2, 2, 2, 0]])
  in_pos = jnp.array([[0, 1, 2, 0, 1, 2, 3, 0]])
  targets = jnp.array([[10, 1, 11, 12, 13, 1, 0, 0]])
  tg_seg = jnp.array([[1, 1, 2, 2, 2, 2, 0, 0]])
  tg_pos = jnp.array([[0, 1, 0, 1, 2, 3, 0, 0]])
  v, apply = _model(positions)
  run = lambda i, t: np.asarray(apply(v, i, t, inputs_segmentation=in_seg, targets_segmentation=tg_seg,
                                            inputs_positions=in_pos, targets_positions=tg_pos))
  base = run(inputs, targets)
  # Change example 1 (source and target): example 2's outputs are unchanged, example 1's move.
  other = run(inputs.at[0, 0].set(20), targets.at[0, 0].set(21))
  np.testing.assert_allclose(other[0, 2:6], base[0, 2:6], atol=1e-5)
  assert np.abs(other[0, 1] - base[0, 1]).max() > 1e-4
  # Packed example 2 equals the same example run alone, unpacked (padded as in the test above).
  alone = np.asarray(apply(v, jnp.array([[7, 8, 9, 1, 0, 0]]), jnp.array([[11, 12, 13, 1, 0, 0]])))
  np.testing.assert_allclose(base[0, 2:6], alone[0, :4], atol=1e-4)
  # Positions left out follow from the segment ids: the same outputs.
  derived = np.asarray(apply(v, inputs, targets, inputs_segmentation=in_seg,
                             targets_segmentation=tg_seg))
  np.testing.assert_allclose(derived[0, :6], base[0, :6], atol=1e-6)


def test_positions_from_segments_restart_with_each_segment():
  from tfm.model.masks import positions_from_segments
  segments = np.array([[1, 1, 1, 2, 2, 3, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1], [1, 2, 2, 2, 0, 0, 0, 0]])
  expected = np.zeros_like(segments)
  for row, ids in enumerate(segments):  # a loop over the rows, independently
    for i in range(1, len(ids)):
      expected[row, i] = expected[row, i - 1] + 1 if ids[i] == ids[i - 1] else 0
  np.testing.assert_array_equal(positions_from_segments(jnp.asarray(segments)), expected)
