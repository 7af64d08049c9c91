"""The train and eval steps on one device, against computations written independently here."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.train import helpers
from tests.train.conftest import LABEL_SMOOTHING
from tests.train.tiny_model import TinySeq2Seq, tiny_config
from tfm.data.prefetch import to_device
from tfm.train.sharding import batch_sharding
from tfm.train.step import (BRANCH, POOLED_LEAF_SIZE, RBG, SELECT, THREEFRY, KeptGradients,
                            NonFiniteError, check_nonfinite, dropout_key, gradient_norm,
                            make_train_step, norm_groups, train_step)

ROWS, LENGTH = 8, 12
EPS = LABEL_SMOOTHING


@pytest.fixture
def model(tiny_model):
  return tiny_model


@pytest.fixture
def setup(tiny_setup):
  return tiny_setup


@pytest.fixture(scope="module")
def micro(tiny_model):
  """The same model and optimizer with the batch split in 4 microbatches."""
  return helpers.Setup(tiny_model, helpers.train_cfg(label_smoothing=EPS, microbatches=4),
                       helpers.mesh_cfg(), jax.devices()[:1])


def device_batch(setup, seed=0, rows=ROWS):
  batch = helpers.packed_batch(rows, LENGTH, setup.model.cfg.vocab_size, seed)
  return batch, to_device(batch, batch_sharding(setup.mesh, setup.rules))


def reference_loss(params, model, batch):
  """Mean over real target tokens of -sum_v q(v) log p(v), q built explicitly; and the mean NLL."""
  logits = model.apply({"params": params}, batch["inputs"], batch["targets"],
                       inputs_segmentation=batch["inputs_segmentation"],
                       targets_segmentation=batch["targets_segmentation"],
                       inputs_positions=batch["inputs_position"],
                       targets_positions=batch["targets_position"])
  vocab = logits.shape[-1]
  onehot = jax.nn.one_hot(batch["targets"], vocab)
  q = onehot * (1 - EPS) + (1 - onehot) * EPS / (vocab - 1)
  logp = jax.nn.log_softmax(logits)
  real = batch["targets_segmentation"] > 0
  loss = jnp.sum(-(q * logp).sum(-1) * real) / jnp.sum(real)
  nll = jnp.sum(-(onehot * logp).sum(-1) * real) / jnp.sum(real)
  return loss, nll


@pytest.fixture(scope="module")
def reference(tiny_model):
  """jitted (params, batch) -> ((loss, nll), grads) of reference_loss."""
  return jax.jit(jax.value_and_grad(lambda p, b: reference_loss(p, tiny_model, b), has_aux=True),
                 compiler_options=helpers.FAST_COMPILE)


def test_step_against_manual_adam(setup, reference):
  batch, on_device = device_batch(setup)
  params = setup.initial.params
  (loss, nll), grads = reference(params, batch)
  state, metrics = setup.step(setup.fresh_state(), on_device)
  assert float(metrics["loss"]) == pytest.approx(float(loss), rel=1e-5)
  assert float(metrics["nll"]) == pytest.approx(float(nll), rel=1e-5)
  assert float(metrics["perplexity"]) == pytest.approx(float(np.exp(nll)), rel=1e-5)
  assert float(metrics["tokens"]) == (batch["targets_segmentation"] > 0).sum()
  norm = np.sqrt(sum(float(np.sum(np.square(g))) for g in jax.tree_util.tree_leaves(grads)))
  assert float(metrics["grad_norm"]) == pytest.approx(norm, rel=1e-4)  # fails if not per-token
  lr = setup.model.cfg.d_model**-0.5 * 1 * 10**-1.5  # paper schedule, step 1, warmup 10
  assert float(metrics["learning_rate"]) == pytest.approx(lr, rel=1e-6)
  # Adam's first update: m_hat = g, v_hat = g^2 -> -lr * g / (|g| + eps).
  expected = jax.tree_util.tree_map(lambda p, g: p - lr * g / (np.abs(g) + 1e-9), params, grads)
  for got, want in zip(jax.tree_util.tree_leaves(state.params), jax.tree_util.tree_leaves(expected)):
    np.testing.assert_allclose(got, want, atol=1e-6)
  assert int(state.step) == 1 and int(state.nonfinite_count) == 0
  assert int(metrics["nonfinite"]) == 0


def test_microbatches_equal_one_batch(setup, micro):
  _, on_device = device_batch(setup, seed=3, rows=16)
  big, small = setup.fresh_state(), micro.fresh_state()
  for _ in range(2):
    big, big_metrics = setup.step(big, on_device)
    small, small_metrics = micro.step(small, on_device)
    for key in ("loss", "nll", "tokens", "grad_norm"):
      assert float(small_metrics[key]) == pytest.approx(float(big_metrics[key]), rel=1e-5), key
  leaves = jax.tree_util.tree_leaves
  moved = max(float(np.abs(a - b).max()) for a, b in zip(leaves(big.params),
                                                          leaves(setup.initial.params)))
  assert moved > 1e-3
  for a, b in zip(jax.tree_util.tree_leaves(big.params), jax.tree_util.tree_leaves(small.params)):
    np.testing.assert_allclose(a, b, atol=2e-6)


def test_microbatches_must_divide_the_batch(micro):
  _, on_device = device_batch(micro, rows=6)
  with pytest.raises(ValueError, match=r"train\.microbatches"):
    micro.step(micro.fresh_state(), on_device)


def step_with_guard(setup, guard):
  return make_train_step(setup.model, setup.tx, setup.schedule, label_smoothing=EPS,
                         microbatches=setup.train.microbatches, mesh=setup.mesh, rules=setup.rules,
                         state_shardings=setup.shardings, compiler_options=helpers.FAST_COMPILE,
                         guard=guard, prng=THREEFRY)


@pytest.mark.parametrize("guard", [None, BRANCH, SELECT])
def test_nonfinite_update_is_skipped(setup, guard):
  """A NaN parameter makes the loss and ||g|| NaN: the update is refused, params and Adam's moments
  come back bit for bit (NaN included), the step and nonfinite_count advance; the repaired state's
  next update is applied, at the schedule's first step. guard None: the CPU's default (BRANCH)."""
  step = setup.step if guard is None else step_with_guard(setup, guard)
  _, on_device = device_batch(setup)
  host = jax.device_get(setup.fresh_state())
  poisoned = host.params["wi"].copy()
  poisoned[0, 0] = np.nan
  bad = host.replace(params={**host.params, "wi": poisoned})
  state, metrics = step(jax.device_put(bad, setup.shardings), on_device)
  after = jax.device_get(state)
  assert int(metrics["nonfinite"]) == 1 and int(after.nonfinite_count) == 1 and int(after.step) == 1
  same = jax.tree_util.tree_map(lambda a, b: np.array_equal(a, b, equal_nan=True),
                                (bad.params, bad.opt_state), (after.params, after.opt_state))
  assert all(jax.tree_util.tree_leaves(same))
  check_nonfinite(metrics, 1, "skip")
  with pytest.raises(NonFiniteError, match=r"step 1 \(loss=.*grad_norm=nan"):
    check_nonfinite(metrics, 1, "stop")
  # Repaired, the next update is applied and uses the schedule's step 1 (one update applied so far: 0).
  repaired = after.replace(params={**after.params, "wi": host.params["wi"]})
  state, metrics = step(jax.device_put(repaired, setup.shardings), on_device)
  assert int(metrics["nonfinite"]) == 0 and int(state.step) == 2 and int(state.nonfinite_count) == 1
  assert float(metrics["learning_rate"]) == pytest.approx(32**-0.5 * 10**-1.5, rel=1e-6)
  assert not np.array_equal(jax.device_get(state.params["wi"]), host.params["wi"])


def test_the_select_guard_applies_the_same_updates_as_the_branch(setup):
  """On a CPU the select guard (the accelerators') gives the branch's states and metrics to the
  bit, three finite updates in a row: the guard decides which state is kept, not its values."""
  _, on_device = device_batch(setup, seed=7)
  branch, select = step_with_guard(setup, BRANCH), step_with_guard(setup, SELECT)
  a, b = setup.fresh_state(), setup.fresh_state()
  for _ in range(3):
    a, a_metrics = branch(a, on_device)
    b, b_metrics = select(b, on_device)
    assert jax.tree.all(jax.tree.map(np.array_equal, jax.device_get((a, a_metrics)),
                                     jax.device_get((b, b_metrics))))
  assert int(a.step) == 3 and int(a.nonfinite_count) == 0
  with pytest.raises(ValueError, match="guard must be"):
    step_with_guard(setup, "maybe")(a, on_device)


@pytest.mark.parametrize("guard", [BRANCH, SELECT])
@pytest.mark.parametrize("rate", [float("nan"), float("inf")])
def test_a_nonfinite_learning_rate_never_reaches_the_state(setup, rate, guard):
  """Loss and gradients are finite; the rate is not: the update is skipped all the same."""
  import optax  # pylint: disable=import-outside-toplevel
  tx = optax.chain(optax.scale_by_adam(), optax.scale_by_learning_rate(lambda count: rate))
  _, on_device = device_batch(setup)
  state = setup.fresh_state().replace(opt_state=tx.init(setup.initial.params))
  step = jax.jit(lambda s, b: train_step(s, b, model=setup.model, tx=tx, schedule=lambda c: rate,
                                         label_smoothing=EPS, guard=guard))
  new, metrics = step(state, on_device)
  assert np.isfinite(float(metrics["loss"])) and np.isfinite(float(metrics["grad_norm"]))
  assert int(metrics["nonfinite"]) == 1 and not np.isfinite(float(metrics["learning_rate"]))
  finite = jax.tree_util.tree_map(lambda x: bool(np.all(np.isfinite(np.asarray(x)))),
                                  (new.params, new.opt_state))
  assert all(jax.tree_util.tree_leaves(finite))
  assert all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(jax.device_get(new.params)),
                                                  jax.tree_util.tree_leaves(setup.initial.params)))


def test_eval_step_sums(setup, reference):
  batch, on_device = device_batch(setup, seed=5)
  sums = setup.eval(setup.fresh_state().params, on_device)
  (loss, nll), _ = reference(setup.initial.params, batch)
  tokens = (batch["targets_segmentation"] > 0).sum()
  assert float(sums["tokens"]) == tokens
  assert float(sums["loss"]) == pytest.approx(float(loss) * tokens, rel=1e-5)
  assert float(sums["nll"]) == pytest.approx(float(nll) * tokens, rel=1e-5)


def test_dropout_key_changes_per_step():
  model = TinySeq2Seq(tiny_config(dropout_rate=0.5))
  drop = helpers.Setup(model, helpers.train_cfg(), helpers.mesh_cfg(), jax.devices()[:1])
  _, on_device = device_batch(drop)
  state = drop.fresh_state()
  frozen = jax.device_get(state)
  # Same params twice (skip the update by comparing losses of step 0 and of a replayed step 0).
  _, first = drop.step(drop.fresh_state(), on_device)
  _, again = drop.step(drop.fresh_state(), on_device)
  assert float(first["loss"]) == float(again["loss"])  # deterministic given (rng, step)
  later = jax.device_put(frozen.replace(step=np.int32(7)), drop.shardings)
  _, other = drop.step(later, on_device)
  assert float(other["loss"]) != float(first["loss"])  # another step, another dropout mask


def test_dropout_keys():
  """Threefry: fold_in(rng, step) itself; RBG: an unsafe_rbg key made of the words of that key's
  split, for each step its own."""
  rng = jax.random.PRNGKey(3)
  assert np.array_equal(dropout_key(rng, 5), jax.random.fold_in(rng, 5))
  rbg = dropout_key(rng, 5, RBG)
  assert str(jax.random.key_impl(rbg)) == "unsafe_rbg"
  want = np.asarray(jax.random.split(jax.random.fold_in(rng, 5), 2)).reshape(-1)
  assert np.array_equal(jax.random.key_data(rbg), want)
  assert not np.array_equal(jax.random.key_data(dropout_key(rng, 6, RBG)), want)
  with pytest.raises(ValueError, match="prng must be"):
    dropout_key(rng, 5, "philox")


def test_rbg_dropout_trains_on_a_cpu():
  """The accelerators' dropout PRNG compiles and runs on a CPU: the same (rng, step) gives the same
  loss, another step another mask (another loss), and threefry's masks differ from it."""
  model = TinySeq2Seq(tiny_config(dropout_rate=0.5))
  drop = helpers.Setup(model, helpers.train_cfg(), helpers.mesh_cfg(), jax.devices()[:1])
  _, on_device = device_batch(drop)
  step = make_train_step(drop.model, drop.tx, drop.schedule, label_smoothing=EPS,
                         microbatches=1, mesh=drop.mesh, rules=drop.rules,
                         state_shardings=drop.shardings, compiler_options=helpers.FAST_COMPILE,
                         guard=BRANCH, prng=RBG)
  loss = lambda s, state: float(s(state, on_device)[1]["loss"])
  first = loss(step, drop.fresh_state())
  assert np.isfinite(first) and first == loss(step, drop.fresh_state())
  later = jax.device_put(jax.device_get(drop.fresh_state()).replace(step=np.int32(7)),
                         drop.shardings)
  assert loss(step, later) != first
  assert loss(drop.step, drop.fresh_state()) != first  # the CPU's default: threefry's masks


@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_finite_gradients_and_rate_keep_the_optimizer_state_finite(clip):
  """The step checks the loss, ||g|| and the rate, not the new state (tfm/train/step.py): the
  chain make_optimizer builds, with clipping and weight decay on, stays finite under gradients at
  float32's extremes whose norm is finite, and a norm that overflows is what the step refuses."""
  import optax  # pylint: disable=import-outside-toplevel
  from tfm.train.optimizer import make_optimizer
  tx, schedule = make_optimizer(helpers.train_cfg(grad_clip_norm=clip, weight_decay=0.1), 64)
  params = {"w": np.full((2, 3), 1e30, np.float32), "b": np.zeros(3, np.float32)}
  state = tx.init(params)
  extremes = [  # huge, tiny (its square underflows to 0), zero, and sign flips between updates
      {"w": np.array([[1.2e19, -1e-30, 0.0], [1e-45, -1.2e19, 3.0]], np.float32),
       "b": np.array([-1e-38, 1e-20, 0.0], np.float32)},
      {"w": np.array([[-1.2e19, 1e-30, 0.0], [-1e-45, 0.0, -3.0]], np.float32),
       "b": np.array([1e-38, 0.0, 1e19], np.float32)},
      {"w": np.zeros((2, 3), np.float32), "b": np.array([1e-44, 0.0, -1e-44], np.float32)}]
  update = jax.jit(lambda g, s, p: tx.update(g, s, p))
  for grads in extremes * 3:
    assert np.isfinite(float(gradient_norm(grads)))
    updates, state = update(grads, state, params)
    params = optax.apply_updates(params, updates)
    for leaf in jax.tree.leaves((params, state, updates)):
      assert np.all(np.isfinite(np.asarray(leaf)))
  assert np.isfinite(float(schedule(0)))
  overflow = {"w": np.full((2, 3), 1.9e19, np.float32), "b": np.zeros(3, np.float32)}
  assert np.isinf(float(gradient_norm(overflow)))  # sum of squares > 3.4e38: refused
  assert np.isinf(float(gradient_norm(overflow, pooled_size=0)))


def step_without_kept_gradients(setup):
  return make_train_step(setup.model, setup.tx, setup.schedule, label_smoothing=EPS,
                         microbatches=setup.train.microbatches, mesh=setup.mesh, rules=setup.rules,
                         state_shardings=setup.shardings, compiler_options=helpers.FAST_COMPILE,
                         guard=BRANCH, prng=THREEFRY, keep_gradients=False)


@pytest.mark.parametrize("which", ["setup", "micro"])
def test_kept_gradients_change_no_bit_of_the_updates(which, request, reference):
  """On CPU the step keeps its gradients' memory between calls (KeptGradients): the same states
  and metrics as the plain step's, and the buffer holds the gradients the last update applied."""
  setup = request.getfixturevalue(which)
  assert isinstance(setup.step, KeptGradients)  # make_train_step's default on CPU
  plain = step_without_kept_gradients(setup)
  assert not isinstance(plain, KeptGradients)
  batch, on_device = device_batch(setup, seed=5, rows=16)
  kept, other = setup.fresh_state(), setup.fresh_state()
  for _ in range(3):
    before = jax.device_get(kept.params)
    kept, kept_metrics = setup.step(kept, on_device)
    other, other_metrics = plain(other, on_device)
    assert jax.tree.all(jax.tree.map(np.array_equal, jax.device_get((kept, kept_metrics)),
                                     jax.device_get((other, other_metrics))))
  _, grads = reference(before, batch)
  kept_grads = setup.step._grads  # pylint: disable=protected-access
  for got, want in zip(jax.tree.leaves(kept_grads), jax.tree.leaves(grads)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7)


def test_kept_gradients_are_written_into_the_donated_buffer(setup):
  """XLA aliases the gradients' output with the donated buffer (what makes the memory last), and
  they leave the temporaries; a buffer lost to a failed call is made again."""
  _, on_device = device_batch(setup)
  state = setup.fresh_state()
  kept = setup.step.lower(state, on_device).compile().memory_analysis()
  plain = step_without_kept_gradients(setup).lower(state, on_device).compile().memory_analysis()
  grad_bytes = sum(x.nbytes for x in jax.tree.leaves(setup.initial.params))
  assert kept.alias_size_in_bytes == plain.alias_size_in_bytes + grad_bytes
  assert kept.temp_size_in_bytes < plain.temp_size_in_bytes
  state, _ = setup.step(state, on_device)
  with pytest.raises(KeyError, match="targets"):  # a call that fails
    setup.step(state, {k: v for k, v in on_device.items() if k != "targets"})
  state, metrics = setup.step(state, on_device)
  assert int(state.step) == 2 and np.isfinite(float(metrics["loss"]))


def concatenations(fn, *args):
  """[number of operands] of every concatenate in fn's jaxpr."""
  return [len(e.invars) for e in jax.make_jaxpr(fn)(*args).eqns if e.primitive.name == "concatenate"]


def test_gradient_norm_pools_the_small_leaves():
  """||g|| over leaves of every size, against float64 numpy: the small ones (biases, layer-norm
  scales) are reduced as one concatenation, the weight matrices one by one, with the same norm."""
  rng = np.random.default_rng(0)
  shapes = {"bias": (8, 64), "scale": (512,), "wide_bias": (POOLED_LEAF_SIZE,),
            "kernel": (512, 8, 64), "ffn": (POOLED_LEAF_SIZE + 1,), "scalar": ()}
  grads = {k: (rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 6, shape)).astype(np.float32)
           for k, shape in shapes.items()}
  want = np.sqrt(sum(np.sum(np.square(g.astype(np.float64))) for g in grads.values()))
  leaves = jax.tree.leaves(grads)
  pooled, alone = norm_groups(leaves)
  names = sorted(grads)  # jax.tree.leaves orders a dict's leaves by key
  assert [names[i] for i in pooled] == ["bias", "scalar", "scale", "wide_bias"]
  assert [names[i] for i in alone] == ["ffn", "kernel"]
  assert concatenations(gradient_norm, grads) == [4]
  assert float(gradient_norm(grads)) == pytest.approx(want, rel=1e-6)
  assert concatenations(lambda g: gradient_norm(g, pooled_size=0), grads) == []
  assert float(gradient_norm(grads, pooled_size=0)) == pytest.approx(want, rel=1e-6)


def test_gradient_norm_reads_the_step_shardings(setup):
  """Pooled leaves must be replicated: concatenating one that is sharded would move it between
  devices. On one device every sharding is fully replicated, so every small leaf is pooled;
  tests/train/test_multidevice.py checks which leaves each 8-device mesh pools."""
  leaves = jax.tree.leaves(setup.initial.params)
  shardings = jax.tree.leaves(setup.shardings.params)
  assert all(s.is_fully_replicated for s in shardings)
  small = [i for i, leaf in enumerate(leaves) if leaf.size <= POOLED_LEAF_SIZE]
  assert norm_groups(leaves, shardings)[0] == small
  with pytest.raises(ValueError, match="1 shardings for"):
    gradient_norm(setup.initial.params, [shardings[0]])

