"""Stacked runs (tfm/train/stack.py): K runs of one model differing in their seeds, one vmapped step,
each member's numbers its solo run's."""

import jax
import numpy as np
import pytest

from tests.train import helpers
from tests.train.tiny_model import TinySeq2Seq, tiny_config
from tfm.config import load_config
from tfm.data.prefetch import to_device
from tfm.train import stack
from tfm.train.sharding import batch_sharding
from tfm.train.step import member_sharding

ROWS, LENGTH, STEPS = 8, 12, 3


def _setups(seeds, dropout_rate=0.3, **train):
  model = TinySeq2Seq(tiny_config(dropout_rate=dropout_rate))
  return [helpers.Setup(model, helpers.train_cfg(**train), helpers.mesh_cfg(), jax.devices()[:1],
                        seed=s) for s in seeds]


def _batches(setup, member):
  return [helpers.packed_batch(ROWS, LENGTH, setup.model.cfg.vocab_size, seed=100 * member + i)
          for i in range(STEPS)]


def _max_diff(a, b) -> float:
  return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.parametrize("guard", ["branch", "select"])
def test_each_member_trains_as_its_solo_run(guard):
  """Two seeds, each with batches of its own and dropout on: 3 stacked steps give each member the
  losses, gradient norms and state of 3 steps of its solo run, to float rounding (the largest
  difference is asserted below 1e-6; the test prints it), and the stacked state is laid out with
  an unsharded member axis."""
  setups = _setups((0, 1), guard=guard)
  solo_losses, solo_states = [], []
  for k, setup in enumerate(setups):
    state, losses = setup.fresh_state(), []
    for batch in _batches(setup, k):
      state, metrics = setup.step(state, to_device(batch, batch_sharding(setup.mesh, setup.rules)))
      losses.append((float(metrics["loss"]), float(metrics["grad_norm"])))
    solo_losses.append(losses)
    solo_states.append(jax.device_get(state))

  exp = setups[0].experiment
  state = stack.stack_states([s.fresh_state() for s in setups], exp.state_shardings)
  assert jax.tree.leaves(state)[0].sharding == member_sharding(jax.tree.leaves(
      exp.state_shardings)[0])
  step = exp.stacked_train_step(2)
  stacked_losses = [[], []]
  sharding = member_sharding(batch_sharding(setups[0].mesh, setups[0].rules))
  for batches in zip(*(_batches(s, k) for k, s in enumerate(setups))):
    state, metrics = step(state, to_device(stack.stack_batches(batches), sharding))
    for k in range(2):
      stacked_losses[k].append((float(metrics["loss"][k]), float(metrics["grad_norm"][k])))
  diffs = []
  for k in range(2):
    member = jax.device_get(stack.member_state(state, k, exp.state_shardings))
    diffs.append(_max_diff(member, solo_states[k]))
    np.testing.assert_allclose(stacked_losses[k], solo_losses[k], rtol=1e-6, atol=0)
    assert int(member.step) == STEPS
  print(f"largest state difference, stacked against solo ({guard}): {max(diffs):.3g}")
  assert max(diffs) < 1e-6
  assert solo_losses[0] != solo_losses[1]  # two seeds, two runs


def test_a_members_nonfinite_update_skips_only_its_own():
  """A NaN in member 1's parameters: its update is refused and counted, member 0's applied."""
  setups = _setups((0, 1))
  exp = setups[0].experiment
  broken = jax.tree.map(np.array, jax.device_get(setups[1].fresh_state()))  # writable copies
  leaf = jax.tree.leaves(broken.params)[0]
  leaf.flat[0] = np.nan
  states = [setups[0].fresh_state(), jax.device_put(broken, exp.state_shardings)]
  state = stack.stack_states(states, exp.state_shardings)
  batches = [_batches(s, k)[0] for k, s in enumerate(setups)]
  sharding = member_sharding(batch_sharding(setups[0].mesh, setups[0].rules))
  state, metrics = exp.stacked_train_step(2)(state, to_device(stack.stack_batches(batches),
                                                              sharding))
  assert list(np.asarray(metrics["nonfinite"])) == [0, 1]
  after = [jax.device_get(stack.member_state(state, k, exp.state_shardings)) for k in range(2)]
  assert np.isnan(jax.tree.leaves(after[1].params)[0].flat[0])  # the NaN kept, nothing applied
  assert int(after[1].nonfinite_count) == 1 and int(after[0].nonfinite_count) == 0
  assert _max_diff(after[0].params, jax.device_get(setups[0].fresh_state()).params) > 0


def test_members_may_differ_in_their_seeds_only():
  base = load_config("configs/quickstart.py")
  seeds = [load_config("configs/quickstart.py", [f"train.seed={s}", f"data.shuffle_seed={s}"])
           for s in (1, 2)]
  stack.check_members([base, *seeds])
  other = load_config("configs/quickstart.py", ["model.dropout_rate=0.2"])
  with pytest.raises(ValueError, match=r"^stack member 1 differs from member 0 in "
                     r"model\.dropout_rate \(0\.2 against 0\.1\): members may differ only in "
                     r"train\.seed, data\.shuffle_seed$"):
    stack.check_members([base, other])
  with pytest.raises(ValueError, match=r"^config key data\.packing: a stack needs"):
    stack.check_members([load_config("configs/quickstart.py", ["data.packing=False"])])
