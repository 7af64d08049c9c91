"""Learning-rate schedules against their formulas, and the paper's schedule inside the optimizer."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tfm.train.config import SCHEDULES, TrainConfig, step_fields
from tfm.train.optimizer import decay_mask, make_optimizer
from tfm.train.schedules import constant, linear_cosine, make_schedule, rsqrt, rsqrt_warmup
from tests.train.helpers import train_cfg


def paper(step, d_model=512, warmup=4000):
  return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def test_paper_schedule_peaks_at_6_99e_4_at_step_4000():
  schedule = rsqrt_warmup(512, 4000)
  counts = np.arange(0, 20000)
  values = np.asarray(schedule(jnp.asarray(counts)))
  assert counts[np.argmax(values)] + 1 == 4000  # optax count 3999 = step 4000
  assert values.max() == pytest.approx(6.99e-4, abs=5e-7)
  for step in (1, 2, 100, 3999, 4000, 4001, 50000):
    assert float(schedule(step - 1)) == pytest.approx(paper(step), rel=1e-6)


def test_scale_factor_multiplies():
  assert float(rsqrt_warmup(512, 4000, 2.0)(10)) == pytest.approx(2 * paper(11), rel=1e-6)


def test_first_update_uses_step_1():
  train = train_cfg(warmup_steps=4000)
  tx, _ = make_optimizer(train, d_model=512)
  params = {"w": jnp.zeros(3)}
  grads = {"w": jnp.array([1.0, -2.0, 0.5])}
  state = tx.init(params)
  for step in (1, 2, 3):
    updates, state = tx.update(grads, state, params)
    # Adam's bias-corrected direction of a constant gradient is sign(g) (up to eps).
    np.testing.assert_allclose(updates["w"], -paper(step) * np.sign(grads["w"]), rtol=1e-5)


def test_other_schedules():
  peak, warmup, total, end = 2e-3, 10, 110, 0.1
  cosine = linear_cosine(peak, warmup, total, end)
  for step in (1, 5, 10, 11, 60, 110, 200):
    if step < warmup:
      expected = peak * step / warmup
    else:
      progress = min(1.0, (step - warmup) / (total - warmup))
      expected = peak * (end + (1 - end) * 0.5 * (1 + np.cos(np.pi * progress)))
    assert float(cosine(step - 1)) == pytest.approx(expected, rel=1e-5), step
    assert float(constant(peak, warmup)(step - 1)) == pytest.approx(peak * min(1, step / warmup))
    assert float(rsqrt(peak, warmup)(step - 1)) == pytest.approx(
        peak * min(step / warmup, (warmup / step) ** 0.5), rel=1e-6)
  assert float(rsqrt(peak)(99)) == pytest.approx(peak / 10)
  assert float(constant(peak)(0)) == pytest.approx(peak)


def test_make_schedule_by_name():
  train = train_cfg(schedule="constant", learning_rate=0.5, warmup_steps=0)
  assert float(make_schedule(train, 512)(7)) == 0.5
  with pytest.raises(ValueError, match=r"train\.schedule"):
    make_schedule(train_cfg(schedule="bogus"), 512)


def test_clipping_and_weight_decay():
  params = {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}
  grads = {"w": jnp.full((2, 2), 30.0), "b": jnp.full(2, 40.0)}
  norm = np.sqrt(4 * 30.0**2 + 2 * 40.0**2)
  train = train_cfg(schedule="constant", learning_rate=0.1, warmup_steps=0, grad_clip_norm=1.0,
                    weight_decay=0.5)
  tx, _ = make_optimizer(train, d_model=512)
  updates, _ = tx.update(grads, tx.init(params), params)
  # Adam's first direction is sign(g) whatever the clipping; decay 0.5 * param on matrices only.
  np.testing.assert_allclose(updates["w"], -0.1 * (1 + 0.5), rtol=1e-6)
  np.testing.assert_allclose(updates["b"], -0.1, rtol=1e-6)
  # Clipping shows in Adam's first moment: (1 - b1) * g / global norm.
  _, state = tx.update(grads, tx.init(params), params)
  adam_state = state["adam"]
  np.testing.assert_allclose(adam_state.mu["w"], 0.1 * 30.0 / norm, rtol=1e-5)
  np.testing.assert_allclose(adam_state.mu["b"], 0.1 * 40.0 / norm, rtol=1e-5)


def test_the_state_is_the_same_tree_whichever_optional_parts_are_on():
  """A resume may turn clipping or weight decay on or off: the optimizer state (what a checkpoint
  holds) has the same structure and array names either way, and the update is optax.chain's."""
  params = {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}
  grads = {"w": jnp.array([[3.0, -1.0], [0.5, 2.0]]), "b": jnp.array([4.0, -2.0])}
  trees = []
  for clip, decay in ((0.0, 0.0), (1.0, 0.0), (0.0, 0.1), (1.0, 0.1)):
    train = train_cfg(schedule="constant", learning_rate=0.1, warmup_steps=0,
                      grad_clip_norm=clip, weight_decay=decay)
    tx, _ = make_optimizer(train, d_model=64)
    state = tx.init(params)
    trees.append(jax.tree_util.tree_structure(state))
    parts = ([optax.clip_by_global_norm(clip)] if clip else []) + [
        optax.scale_by_adam(b1=0.9, b2=0.98, eps=1e-9)] + (
        [optax.add_decayed_weights(decay, mask=decay_mask)] if decay else []) + [
        optax.scale_by_learning_rate(0.1)]
    chain = optax.chain(*parts)
    reference = chain.init(params)
    for _ in range(3):
      update, state = tx.update(grads, state, params)
      expected, reference = chain.update(grads, reference, params)
      for key in params:
        np.testing.assert_array_equal(update[key], expected[key])
  assert all(tree == trees[0] for tree in trees), trees


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_step_fields_keep_what_the_optimizer_computes(schedule):
  """Experiments share steps across train sections with equal step_fields: every schedule and the
  whole update must be the same with the loop's fields (and `steps` where dropped) changed."""
  train = train_cfg(schedule=schedule, steps=40, warmup_steps=10, learning_rate=0.01,
                    grad_clip_norm=1.0, weight_decay=0.1, log_every=3, eval_every=7,
                    checkpoint_every=5, keep_checkpoints=2, average_checkpoints=2, nonfinite="stop",
                    compilation_cache_dir="", profile_steps=(1, 3), curves=False)
  reduced = step_fields(train)
  assert reduced.log_every == TrainConfig.log_every and reduced.profile_steps == ()
  assert reduced.curves is TrainConfig.curves
  assert (reduced.steps == train.steps) == (schedule == "linear_cosine")
  counts = jnp.arange(0, 60)
  np.testing.assert_array_equal(make_schedule(train, 64)(counts), make_schedule(reduced, 64)(counts))
  params = {"w": jnp.ones((2, 3)), "b": jnp.ones(3)}
  grads = {"w": jnp.linspace(-2.0, 3.0, 6).reshape(2, 3), "b": jnp.array([0.5, -1.0, 4.0])}
  updates = []
  for config in (train, reduced):
    tx, _ = make_optimizer(config, d_model=64)
    state, steps = tx.init(params), []
    for _ in range(12):  # through warmup and into the decay
      update, state = tx.update(grads, state, params)
      steps.append(update)
    updates.append(steps)
  for a, b in zip(*updates):
    for key in params:
      np.testing.assert_array_equal(a[key], b[key])
