"""Stacked runs (tfm/train/stack.py): K runs of one model differing in their seeds, one vmapped step,
each member's numbers its solo run's."""

from typing import Any

import jax
import numpy as np
import pytest

from tests.train import helpers
from tests.train.tiny_model import TinySeq2Seq, tiny_config
from tfm.config import load_config
from tfm.data.prefetch import to_device
from tfm.experiment import Experiment
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


def _solo_runs(setups) -> tuple[list, list]:
  """Each setup's STEPS steps alone on its own batches: ([(loss, grad_norm)] a step, final state)
  a member."""
  losses, states = [], []
  for k, setup in enumerate(setups):
    state, figures = setup.fresh_state(), []
    for batch in _batches(setup, k):
      state, metrics = setup.step(state, to_device(batch, batch_sharding(setup.mesh, setup.rules)))
      figures.append((float(metrics["loss"]), float(metrics["grad_norm"])))
    losses.append(figures)
    states.append(jax.device_get(state))
  return losses, states


def _stacked_run(step, state, setups) -> tuple[list, Any]:
  """STEPS stacked steps on every member's own batches: ([(loss, grad_norm)] a step a member, the
  stacked state)."""
  losses = [[] for _ in setups]
  sharding = member_sharding(batch_sharding(setups[0].mesh, setups[0].rules))
  for batches in zip(*(_batches(s, k) for k, s in enumerate(setups))):
    state, metrics = step(state, to_device(stack.stack_batches(batches), sharding))
    for k, figures in enumerate(losses):
      figures.append((float(metrics["loss"][k]), float(metrics["grad_norm"][k])))
  return losses, state


@pytest.mark.parametrize("guard", ["branch", "select"])
def test_each_member_trains_as_its_solo_run(guard):
  """Two seeds, each with batches of its own and dropout on: 3 stacked steps give each member the
  losses, gradient norms and state of 3 steps of its solo run, to float rounding (the largest
  difference is asserted below 1e-6; the test prints it), and the stacked state is laid out with
  an unsharded member axis."""
  setups = _setups((0, 1), guard=guard)
  solo_losses, solo_states = _solo_runs(setups)
  exp = setups[0].experiment
  state = stack.stack_states([s.fresh_state() for s in setups], exp.state_shardings)
  assert jax.tree.leaves(state)[0].sharding == member_sharding(jax.tree.leaves(
      exp.state_shardings)[0])
  stacked_losses, state = _stacked_run(exp.stacked_train_step(2), state, setups)
  diffs = []
  for k in range(2):
    member = jax.device_get(stack.member_state(state, k, exp.state_shardings))
    diffs.append(helpers.max_diff(member, solo_states[k]))
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
  assert helpers.max_diff(after[0].params, jax.device_get(setups[0].fresh_state()).params) > 0


def test_members_may_differ_in_their_seeds_dropout_and_smoothing_only():
  base = load_config("configs/quickstart.py")
  others = [load_config("configs/quickstart.py", [f"train.seed={s}", f"data.shuffle_seed={s}",
                                                  "model.dropout_rate=0.0",
                                                  "train.label_smoothing=0.2"]) for s in (1, 2)]
  stack.check_members([base, *others])
  # Rows of one table: base and D1 differ in their name and paper figures, and may stack.
  stack.check_members([load_config("configs/table3_v3.py:base"),
                       load_config("configs/table3_v3.py:D1")])
  other = load_config("configs/quickstart.py", ["model.d_ff=1024"])
  with pytest.raises(ValueError, match=r"^stack member 1 differs from member 0 in "
                     r"model\.d_ff \(1024 against 512\): members may differ only in "
                     r"train\.seed, data\.shuffle_seed, model\.dropout_rate, "):
    stack.check_members([base, other])
  with pytest.raises(ValueError, match=r"^config key data\.packing: a stack needs"):
    stack.check_members([load_config("configs/quickstart.py", ["data.packing=False"])])
  # What the step takes as arrays: the scalars they differ in, each member's.
  scalars = stack.MemberScalars.of([base, *others])
  assert scalars.keep == (("dropout_rate", (0.8999999761581421, 1.0, 1.0)),)
  assert scalars.label_smoothing == (0.1, 0.2, 0.2)
  assert stack.MemberScalars.of([base, base]) == stack.MemberScalars()
  assert stack.structure_config([others[0], base]).model.dropout_rate == 0.1


# (model.dropout_rate, train.label_smoothing, train.learning_rate) of three members: Table 3's
# base, D1-like (no dropout), and D4-like (more dropout, no smoothing) at a learning-rate sweep's
# 3x point.
ROWS_OF_A_TABLE = [(0.1, 0.1, 1.0), (0.0, 0.1, 1.0), (0.2, 0.0, 3.0)]


@pytest.mark.parametrize("dtype, train, rows, loss_rtol, params_atol", [
    # long tier: its parts run fast in test_each_member_trains_as_its_solo_run (a stacked step is
    # each member's), test_members_may_differ_in_their_seeds_dropout_and_smoothing_only (the
    # scalars that differ), test_members_train_as_their_solo_runs_under_each_optimizer_with_an_ema
    # (members at rates 1 and 3, dropout on) and tests/model/test_dropout.py (a keep probability)
    pytest.param("float32", {}, ROWS_OF_A_TABLE, 2e-6, 1e-4, marks=pytest.mark.long),
    # bfloat16 activations (a member's keep probability divides in bfloat16, as its solo run's),
    # with decoupled weight decay and clipping under the learning-rate ratio, two members that
    # differ in all three scalars. The vmapped step's bfloat16 products round apart from the solo
    # step's from the second step on: 3e-4 of a loss whose bfloat16 resolution is 8e-3, and Adam
    # turns that rounding of near-zero gradients into steps of the rate, 3x for the second member
    # (6e-3 in a ReLU layer's kernel of magnitude 0.3).
    pytest.param("bfloat16", {"weight_decay": 0.1, "grad_clip_norm": 0.5},
                 [(0.1, 0.1, 1.0), (0.0, 0.0, 3.0)], 1e-3, 1e-2, marks=pytest.mark.long),
])
def test_members_with_their_own_dropout_smoothing_and_rate_train_as_their_solo_runs(
    dtype, train, rows, loss_rtol, params_atol):
  """Table 3's base and D rows at a learning-rate sweep's points as one stack: three members of
  the Transformer with dropout rates 0.1, 0 and 0.2, label smoothing 0.1, 0.1 and 0, and
  learning-rate scales 1, 1 and 3: each member's 3 stacked steps give its solo run's losses,
  gradient norms and state (the model built for the stack with the largest rate, each member's
  keep probability, smoothing and learning-rate ratio traced), in float32 and bfloat16, with
  weight decay and clipping."""
  import dataclasses  # pylint: disable=import-outside-toplevel
  from tfm.model.config import ModelConfig  # pylint: disable=import-outside-toplevel
  from tfm.model.transformer import Transformer  # pylint: disable=import-outside-toplevel
  base = ModelConfig(vocab_size=64, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=8,
                     num_encoder_layers=1, num_decoder_layers=1, max_length=32, dtype=dtype)
  setups = [helpers.Setup(Transformer(dataclasses.replace(base, dropout_rate=rate)),
                          helpers.train_cfg(label_smoothing=smoothing, learning_rate=scale, **train),
                          helpers.mesh_cfg(), jax.devices()[:1], seed=k)
            for k, (rate, smoothing, scale) in enumerate(rows)]
  configs = [s.experiment.config for s in setups]
  solo_losses, solo_states = _solo_runs(setups)
  structure = stack.structure_config(configs)
  # The stack's Experiment: its stacked step and state layout, no state of its own (the members'
  # fresh states are stacked), so no init is compiled for it.
  exp = Experiment(helpers.experiment_config(structure.model, structure.train, helpers.mesh_cfg()),
                   model=Transformer(structure.model), devices=jax.devices()[:1],
                   compiler_options=helpers.FAST_COMPILE)
  state = stack.stack_states([s.fresh_state() for s in setups], exp.state_shardings)
  scalars = stack.MemberScalars.of(configs)
  k = len(rows)
  with pytest.raises(ValueError, match=rf"a stacked step of {k - 1} members was given \{{'the "
                                       rf"state': {k}, 'the batch': {k}, 'member scalar "
                                       rf"dropout_rate': {k}, "):
    _stacked_run(exp.stacked_train_step(k - 1, scalars), state, setups)
  stacked_losses, state = _stacked_run(exp.stacked_train_step(k, scalars), state, setups)
  assert scalars.learning_rate_ratio == tuple(scale for _, _, scale in rows)
  differences = []
  for k in range(len(rows)):
    np.testing.assert_allclose(stacked_losses[k], solo_losses[k], rtol=loss_rtol, atol=0)
    member = jax.device_get(stack.member_state(state, k, exp.state_shardings))
    differences.append(helpers.max_diff(member.params, solo_states[k].params, key_biases=False))
  print(f"largest parameter difference, member against its solo run ({dtype}, {train}): "
        f"{max(differences):.3g}")
  assert max(differences) <= params_atol  # float32: Adam's steps on near-zero gradients round
  assert len({tuple(losses) for losses in stacked_losses}) == len(rows)  # a curve a run


def test_a_stack_refuses_rbg_dropout_and_resolves_auto_to_threefry():
  """vmap of RngBitGenerator draws every member's bits from the first member's key: an explicit
  train.dropout_prng='rbg' is refused in one line; 'auto' gives a stack threefry on every
  platform, and a run with rbg trains alone in a sweep (no stack class)."""
  from tfm.train import platform_choices  # pylint: disable=import-outside-toplevel
  rbg = [load_config("configs/quickstart.py", ["train.dropout_prng=rbg", f"train.seed={s}"])
         for s in (0, 1)]
  with pytest.raises(ValueError, match=r"^config key train\.dropout_prng: 'rbg' cannot serve a "
                                       r"stack"):
    stack.check_members(rbg)
  assert stack.stack_class(rbg[0]) is None
  assert stack.stack_class(load_config("configs/quickstart.py")) is not None
  gpu = dict(platform_choices.AUTO["gpu"], dropout_prng="rbg")
  try:
    platform_choices.AUTO["gpu"], saved = gpu, platform_choices.AUTO["gpu"]
    auto = load_config("configs/quickstart.py").train
    assert platform_choices.resolve(auto, "gpu").dropout_prng == "rbg"
    assert platform_choices.resolve(auto, "gpu", stacked=True).dropout_prng == "threefry"
  finally:
    platform_choices.AUTO["gpu"] = saved


@pytest.mark.long  # three programs compiled an optimizer (Adafactor's, vmapped per layer: 20 s)
@pytest.mark.parametrize("optimizer", ["adam", "adamw", "adafactor"])
def test_members_train_as_their_solo_runs_under_each_optimizer_with_an_ema(optimizer):
  """Two members (seeds 0 and 1, learning-rate scales 1 and 3: the stack's ratio), dropout on,
  global-norm clipping and an EMA of the parameters, under each train.optimizer (Adafactor's
  statistics factored: min_dim_size_to_factor 8): each member's 3 stacked steps give its solo
  run's losses and whole state (parameters, optimizer state, EMA) to float rounding, the second
  member's at 3 times the first's rate (its updates are its optimizer's scaled by the ratio)."""
  model = TinySeq2Seq(tiny_config(dropout_rate=0.1))
  train = dict(optimizer=optimizer, grad_clip_norm=0.5, ema_decay=0.5,
               adafactor_min_dim_size_to_factor=8)
  setups = [helpers.Setup(model, helpers.train_cfg(learning_rate=scale, **train),
                          helpers.mesh_cfg(), jax.devices()[:1], seed=k)
            for k, scale in enumerate((1.0, 3.0))]
  solo_losses, solo_states = _solo_runs(setups)
  exp = setups[0].experiment
  scalars = stack.MemberScalars.of([s.experiment.config for s in setups])
  assert scalars.learning_rate_ratio == (1.0, 3.0)
  state = stack.stack_states([s.fresh_state() for s in setups], exp.state_shardings)
  stacked_losses, state = _stacked_run(exp.stacked_train_step(2, scalars), state, setups)
  differences = []
  for k in range(2):
    np.testing.assert_allclose(stacked_losses[k], solo_losses[k], rtol=1e-5, atol=0)
    member = jax.device_get(stack.member_state(state, k, exp.state_shardings))
    assert jax.tree.structure(member) == jax.tree.structure(solo_states[k])
    differences.append(helpers.max_diff(member, solo_states[k]))
  print(f"largest state difference, member against its solo run ({optimizer}): "
        f"{max(differences):.3g}")
  assert max(differences) < 1e-5
  assert helpers.max_diff(solo_states[0].ema, solo_states[0].params) > 1e-4  # an EMA that moved
