"""The train step and the eval step, each one `jax.jit` over the mesh.

train step (one update):
  1. N = real target tokens of the global batch; dropout key = fold_in(state.rng, state.step)
     (with train.dropout_prng=rbg made an unsafe_rbg key: dropout_key)
  2. g = sum over microbatches of grad(label-smoothed CE sum / N)           (tfm/train/accumulate.py)
  3. if the loss, ||g|| (float32) and lrate(applied updates + 1) are finite, the optimizer's update
     gives new params and opt_state, and the EMA (train.ema_decay, tfm/train/ema.py) takes the new
     params in; else params, opt_state and the EMA stay unchanged and nonfinite_count + 1
  4. step + 1
No NaN or inf enters the state that way, whatever its cause (data, a learning rate, an overflowing
gradient), without checking the new state itself: for the chain make_optimizer builds (clipping,
Adam, decoupled weight decay, the rate), a finite ||g|| means every g_i^2 is finite, so Adam's
moments stay finite (m_t, v_t are convex combinations of past g and g^2), so does its direction
m_t / (sqrt(v_t) + eps), and a finite rate gives a finite update; the new parameters could only
overflow at float32's limit (3.4e38). The check is three scalars known before the update: on CPUs
the update runs inside the branch that applies it (one pass over parameters and moments), or a
select keeps it or the old state, with no host round trip (train.guard: guarded).
Metrics stay on device (no host sync): loss (label-smoothed CE per token, the objective), nll (per
token, unsmoothed), perplexity = exp(nll), accuracy, tokens, grad_norm (global, before clipping),
learning_rate (the one this update used), nonfinite (1 if this update was skipped), nonfinite_count.

Batches are dicts of int32 [batch, length]: targets and, for models with an encoder, inputs; optional
inputs_segmentation / targets_segmentation and inputs_position / targets_position (the `*_positions`
spelling is accepted too). Pad id 0 is excluded from the loss.
"""

from __future__ import annotations

from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tfm.model import dropout
from tfm.train.accumulate import accumulate_gradients
from tfm.train.ema import EmaSettings, update_ema
from tfm.train.loss import loss_sums, per_token, target_weights
from tfm.train.schedules import Schedule
from tfm.train.sharding import OnMesh, Rules, batch_sharding, check_batch_size
from tfm.train.state import TrainState

Batch = Mapping[str, jax.Array]

# Leaves of at most this many elements enter gradient_norm's pooled vector: every bias and
# layer-norm gradient of the Table 3 models (d_ff <= 4096, d_model <= 1024), no weight matrix.
POOLED_LEAF_SIZE = 8192


def _position(batch: Batch, prefix: str):
  return batch.get(f"{prefix}_position", batch.get(f"{prefix}_positions"))


def norm_groups(leaves: list, shardings: list | None = None, pooled_size: int = POOLED_LEAF_SIZE
                ) -> tuple[list[int], list[int]]:
  """(pooled, alone): indices of the leaves gradient_norm ravels into one vector, and of the rest.

  Pooled: at most `pooled_size` elements and replicated (no sharding given, or one that is fully
  replicated), so that concatenating them moves no data between devices."""
  pooled, alone = [], []
  for i, leaf in enumerate(leaves):
    sharding = None if shardings is None else shardings[i]
    replicated = sharding is None or sharding.is_fully_replicated
    (pooled if replicated and leaf.size <= pooled_size else alone).append(i)
  return pooled, alone


def gradient_norm(grads: Any, shardings: Any = None, pooled_size: int = POOLED_LEAF_SIZE
                  ) -> jax.Array:
  """||g||_2 = sqrt(sum over leaves l of sum(g_l^2)), float32 [], over a tree of gradients.

  A weight matrix's square-sum is one kernel (on XLA:CPU, a YNNPACK reduction of the product that
  made its gradient). A bias or layer-norm gradient is itself a reduction over the tokens, and on
  XLA:CPU its square-sum compiles to three kernels of its own (the square, the reduce-window of
  XLA's tree reduction, a last reduce): hundreds of kernels for the paper's base model
  (experiments/SPEED.md). So the small replicated leaves (norm_groups; shardings: a tree like
  grads, or None) are raveled into one vector and reduced once, and the others one by one.
  """
  leaves = jax.tree.leaves(grads)
  if shardings is not None:
    shardings = jax.tree.leaves(shardings, is_leaf=lambda x: x is None)
    if len(shardings) != len(leaves):
      raise ValueError(f"gradient_norm: {len(shardings)} shardings for {len(leaves)} gradients")
  pooled, alone = norm_groups(leaves, shardings, pooled_size)
  squares = [jnp.sum(jnp.square(leaves[i])) for i in alone]
  if pooled:
    flat = jnp.concatenate([jnp.ravel(leaves[i]) for i in pooled])
    squares.append(jnp.sum(jnp.square(flat)))
  return jnp.sqrt(sum(squares, jnp.float32(0)))


BRANCH, SELECT = "branch", "select"  # guarded's two forms


def guarded(finite: jax.Array, update, unchanged: Any, guard: str) -> Any:
  """update() where the scalar bool `finite` holds, else `unchanged` (a tree like update's result).

  BRANCH: jax.lax.cond, the update runs only when it is kept. SELECT: the update always runs and
  jnp.where picks each leaf, no control flow (a non-finite update's values are computed, then
  dropped: NaN never reaches the result, as where takes the other operand element by element).
  SELECT is there for GPUs: XLA:GPU runs a conditional by copying its predicate to the host and
  waiting for the stream, every step, so the device idles while the host catches up; a select
  stays on the device. XLA:CPU runs either on the host, and its branch skips the update's pass on
  a refused step."""
  if guard == BRANCH:
    return jax.lax.cond(finite, update, lambda: unchanged)
  if guard == SELECT:
    return jax.tree.map(lambda new, old: jnp.where(finite, new, old), update(), unchanged)
  raise ValueError(f"guard must be {BRANCH!r} or {SELECT!r}, got {guard!r}")


THREEFRY, RBG = "threefry", "rbg"  # dropout_key's two PRNGs (train.dropout_prng)


def dropout_key(rng: jax.Array, step: jax.Array, prng: str = THREEFRY) -> jax.Array:
  """The dropout key of step `step`: fold_in(rng, step) (rng uint32 [2], a threefry key); with
  RBG, a typed unsafe_rbg key made of the 4 words of that key's two halves (split), so that
  every random bit drawn from it comes from RngBitGenerator.

  Threefry makes every random bit with rounds of integer arithmetic, device work every dropout
  mask of every step pays for; RngBitGenerator (unsafe_rbg: its keys split and fold in by hashing)
  is the generator GPUs make bits with cheaply. Either way the masks of step s are a pure function
  of (state.rng, s); the two generators draw different masks."""
  key = jax.random.fold_in(rng, step)
  if prng == THREEFRY:
    return key
  if prng == RBG:
    return jax.random.wrap_key_data(jax.random.split(key, 2).reshape(-1), impl="unsafe_rbg")
  raise ValueError(f"prng must be {THREEFRY!r} or {RBG!r}, got {prng!r}")


def apply_model(model: nn.Module, params: Any, batch: Batch, train: bool, dropout_key=None) -> jax.Array:
  """Logits [batch, target_len, vocab] (float32) for a batch dict."""
  rngs = {"dropout": dropout_key} if train else {}
  return model.apply({"params": params}, batch.get("inputs"), batch.get("targets"),
                     inputs_segmentation=batch.get("inputs_segmentation"),
                     targets_segmentation=batch.get("targets_segmentation"),
                     inputs_positions=_position(batch, "inputs"),
                     targets_positions=_position(batch, "targets"), train=train, rngs=rngs)


def batch_loss_sums(model: nn.Module, params: Any, batch: Batch, label_smoothing: float, train: bool,
                    dropout_key=None) -> dict[str, jax.Array]:
  """loss/nll/correct/tokens sums over the real target tokens of `batch` (tfm/train/loss.py)."""
  logits = apply_model(model, params, batch, train, dropout_key)
  weights = target_weights(batch["targets"], batch.get("targets_segmentation"))
  return loss_sums(logits, batch["targets"], weights, label_smoothing)


class NonFiniteError(ValueError):
  """Training stopped on a non-finite update (train.nonfinite='stop').

  Metrics reach the host only at a log window's end, so the run stops there, up to
  train.log_every - 1 (finite) updates after the bad step. No checkpoint holds the bad step or any
  later one: a window ending at a checkpoint step is checked before it is saved."""


def train_step(state: TrainState, batch: Batch, *, model: nn.Module, tx: optax.GradientTransformation,
               schedule: Schedule, label_smoothing: float, microbatches: int = 1,
               grad_shardings: Any = None, guard: str = BRANCH, prng: str = THREEFRY,
               ema: EmaSettings | None = None) -> tuple[TrainState, dict[str, jax.Array]]:
  """One update (unjitted; see make_train_step). Returns (new state, metrics). guard: how the
  non-finite check keeps or drops the update (guarded: BRANCH or SELECT); prng: the dropout
  key's PRNG (dropout_key: THREEFRY or RBG); ema: the EMA's settings where state.ema holds one."""
  new_state, metrics, _ = train_step_and_gradients(
      state, batch, model=model, tx=tx, schedule=schedule, label_smoothing=label_smoothing,
      microbatches=microbatches, grad_shardings=grad_shardings, guard=guard, prng=prng, ema=ema)
  return new_state, metrics


def train_step_and_gradients(state: TrainState, batch: Batch, *, model: nn.Module,
                             tx: optax.GradientTransformation, schedule: Schedule,
                             label_smoothing: float, microbatches: int = 1,
                             grad_shardings: Any = None, guard: str = BRANCH,
                             prng: str = THREEFRY, ema: EmaSettings | None = None
                             ) -> tuple[TrainState, dict[str, jax.Array], Any]:
  """train_step, also returning the gradients g it applied (a tree like state.params)."""
  if (ema is None) != (state.ema is None):
    raise ValueError(f"train step: EMA settings {ema} for a state "
                     f"{'without' if state.ema is None else 'with'} an EMA")
  weights = target_weights(batch["targets"], batch.get("targets_segmentation"))
  num_tokens = jnp.maximum(jnp.sum(weights), 1.0)

  def grad_fn(params, microbatch, key):
    def objective(p):
      sums = batch_loss_sums(model, p, microbatch, label_smoothing, True, key)
      return sums["loss"] / num_tokens, sums
    return jax.grad(objective, has_aux=True)(params)

  key = dropout_key(state.rng, state.step, prng)
  grads, sums = accumulate_gradients(grad_fn, state.params, batch, microbatches, key, grad_shardings)
  grad_norm = gradient_norm(grads, grad_shardings)
  learning_rate = schedule(state.applied_updates)
  # Decided before the update (see the module docstring): no pass checking the new state.
  finite = jnp.isfinite(sums["loss"]) & jnp.isfinite(grad_norm) & jnp.isfinite(learning_rate)

  def update():
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    averaged = None if ema is None else update_ema(state.ema, params, ema, state.applied_updates)
    return params, opt_state, averaged

  # A skipped update skips the EMA's too: it averages the parameters the run held.
  params, opt_state, averaged = guarded(finite, update, (state.params, state.opt_state, state.ema),
                                        guard)
  skipped = (~finite).astype(jnp.int32)
  new_state = state.replace(
      step=state.step + 1,
      params=params,
      opt_state=opt_state,
      ema=averaged,
      nonfinite_count=state.nonfinite_count + skipped)
  metrics = dict(per_token(sums), grad_norm=grad_norm, learning_rate=learning_rate,
                 nonfinite=skipped, nonfinite_count=new_state.nonfinite_count)
  return new_state, metrics, grads


def eval_step(params: Any, batch: Batch, *, model: nn.Module, label_smoothing: float
              ) -> dict[str, jax.Array]:
  """Sums over the batch's real target tokens (no dropout): loss, nll, correct, tokens.

  Add them up over the dev set and pass the totals to tfm.train.loss.per_token for the dev loss,
  NLL and perplexity.
  """
  return batch_loss_sums(model, params, batch, label_smoothing, train=False)


def make_train_step(model: nn.Module, tx: optax.GradientTransformation, schedule: Schedule, *,
                    label_smoothing: float, microbatches: int, mesh: Mesh, rules: Rules,
                    state_shardings: TrainState, compiler_options: dict | None = None,
                    guard: str, prng: str, keep_gradients: bool | None = None,
                    members: int | None = None, member_scalars=None,
                    ema: EmaSettings | None = None) -> OnMesh:
  """Compiled `step(state, batch) -> (state, metrics)`; the state argument is donated.

  label_smoothing, microbatches: train.label_smoothing and train.microbatches. state_shardings: from
  abstract_train_state. Metrics come back replicated, as device arrays.
  compiler_options: passed to jax.jit (XLA options).
  keep_gradients: give the gradients memory that lasts from call to call (KeptGradients); None
  means on CPUs only, where it saves every step the first touch of that memory. The updates are
  the same to the bit either way.
  guard: the non-finite guard's form (guarded); prng: the dropout PRNG (dropout_key): the run's
  train.guard and train.dropout_prng as tfm/train/platform_choices.py resolves them.
  members: a stack of this many runs (tfm/train/stack.py): every leaf of the state and the batch
  has a leading member axis, unsharded, and the step is train_step vmapped over it, so each
  member's update is its own run's (its non-finite guard included); metrics come back [members].
  member_scalars: the stack's stack.MemberScalars, the dropout keep probabilities, label
  smoothing and learning-rate ratios in which its members differ, each member's traced.
  ema: train.ema_decay and ema_warmup (EmaSettings.of) where the state keeps an EMA, else None;
  a stack's members share them.
  """
  platform = mesh.devices.flat[0].platform
  if members is not None:
    return _stacked_step(model, tx, schedule, label_smoothing, microbatches, mesh, rules,
                         state_shardings, compiler_options, guard, prng, members, member_scalars,
                         ema)
  if keep_gradients is None:
    keep_gradients = platform == "cpu"
  settings = dict(model=model, tx=tx, schedule=schedule, label_smoothing=label_smoothing,
                  microbatches=microbatches, grad_shardings=state_shardings.params,
                  guard=guard, prng=prng, ema=ema)
  replicated = NamedSharding(mesh, PartitionSpec())
  batch_in = batch_sharding(mesh, rules)

  if not keep_gradients:
    def step(state, batch):
      check_batch_size(batch["targets"].shape[0], mesh, rules, microbatches)
      return train_step(state, batch, **settings)

    jitted = jax.jit(step, in_shardings=(state_shardings, batch_in),
                     out_shardings=(state_shardings, replicated), donate_argnums=(0,),
                     compiler_options=compiler_options)
    return OnMesh(jitted, mesh, rules)

  def step_keeping(state, last_gradients, batch):
    del last_gradients  # only its memory is wanted: this step's gradients are written there
    check_batch_size(batch["targets"].shape[0], mesh, rules, microbatches)
    return train_step_and_gradients(state, batch, **settings)

  grads_sharding = state_shardings.params
  # keep_unused: an unused argument is dropped from the program by default, and with it the buffer
  # XLA can give the gradients.
  jitted = jax.jit(step_keeping, in_shardings=(state_shardings, grads_sharding, batch_in),
                   out_shardings=(state_shardings, replicated, grads_sharding),
                   donate_argnums=(0, 1), keep_unused=True, compiler_options=compiler_options)
  zeros = jax.jit(lambda params: jax.tree.map(jnp.zeros_like, params), out_shardings=grads_sharding)
  return KeptGradients(jitted, mesh, rules, zeros, grads_sharding)


def member_sharding(sharding: NamedSharding) -> NamedSharding:
  """`sharding` with a leading member axis, unsharded: a stack's layout of one run's array."""
  return NamedSharding(sharding.mesh, PartitionSpec(None, *sharding.spec))


def _stacked_step(model, tx, schedule, label_smoothing, microbatches, mesh, rules, state_shardings,
                  compiler_options, guard, prng, members, member_scalars, ema) -> OnMesh:
  """make_train_step's stacked form: train_step vmapped over the leading member axis, with each
  member's dropout keep probabilities and label smoothing where they differ. A state, batch or
  member scalars of another member count than `members` is refused when the step is traced."""
  settings = dict(model=model, microbatches=microbatches, grad_shardings=None, guard=guard,
                  prng=prng, ema=ema)
  keep, smoothing, ratio = ({}, None, None) if member_scalars is None else member_scalars.arrays()

  def member(state, batch, keep, smoothing, ratio):
    member_tx, member_schedule = (tx, schedule) if ratio is None else _rate_scaled(tx, schedule,
                                                                                   ratio)
    with dropout.member_keep(keep):
      return train_step(state, batch, **settings, tx=member_tx, schedule=member_schedule,
                        label_smoothing=label_smoothing if smoothing is None else smoothing)

  def step(state, batch):
    counts = {"the state": state.step.shape[0], "the batch": batch["targets"].shape[0],
              **{f"member scalar {name}": x.shape[0] for name, x in
                 [*keep.items(), ("label_smoothing", smoothing), ("learning_rate", ratio)]
                 if x is not None}}
    wrong = {what: n for what, n in counts.items() if n != members}
    if wrong:
      raise ValueError(f"a stacked step of {members} members was given {wrong} members")
    check_batch_size(batch["targets"].shape[1], mesh, rules, microbatches)
    return jax.vmap(member)(state, batch, keep, smoothing, ratio)

  stacked = jax.tree.map(member_sharding, state_shardings)
  jitted = jax.jit(step, in_shardings=(stacked, member_sharding(batch_sharding(mesh, rules))),
                   out_shardings=(stacked, NamedSharding(mesh, PartitionSpec())),
                   donate_argnums=(0,), compiler_options=compiler_options)
  return OnMesh(jitted, mesh, rules)


def _rate_scaled(tx: optax.GradientTransformation, schedule: Schedule, ratio: jax.Array
                 ) -> tuple[optax.GradientTransformation, Schedule]:
  """tx and schedule at `ratio` times the learning rate: the learning rate is the optimizer's last
  factor (tfm/train/optimizer.py), so its updates scale with it."""
  def update(grads, state, params=None):
    updates, state = tx.update(grads, state, params)
    return jax.tree.map(lambda u: u * ratio.astype(u.dtype), updates), state
  return optax.GradientTransformation(tx.init, update), lambda count: schedule(count) * ratio


class KeptGradients(OnMesh):
  """`step(state, batch) -> (state, metrics)`, as make_train_step's other form, whose gradients
  live in memory it keeps from one call to the next.

  XLA:CPU allocates a program's temporaries afresh on every call, as one block as large as their
  peak. glibc maps a block that large anew each time, so the kernel faults in and zeroes every page
  of it on first write, every step, in system CPU time. The gradients, a tree like the parameters,
  are all in that block when the update reads them, so taking them out shrinks it (the figures: see
  experiments/SPEED.md).

  Here the jitted function also takes the last step's gradients, donated, and returns this step's,
  so XLA writes them into that buffer, whose pages are already mapped; this object holds it between
  calls. Its content is never read, so the step stays a function of (state, batch) alone. On
  accelerators, whose allocators reuse their memory, there is no first touch to save, and the
  buffer would hold the gradients' memory between steps too (make_train_step's default keeps them
  on CPUs only).
  """

  def __init__(self, jitted, mesh: Mesh, rules: Rules, zeros, grads_sharding):
    super().__init__(jitted, mesh, rules)
    self._zeros, self._grads_sharding, self._grads = zeros, grads_sharding, None

  def __call__(self, state, batch):
    # Taken out while the call runs: a call that fails leaves None, and the next makes a new buffer.
    grads, self._grads = self._grads, None
    if grads is None:
      grads = self._zeros(state.params)
    state, metrics, self._grads = super().__call__(state, grads, batch)
    return state, metrics

  def lower(self, state, batch):
    grads = jax.tree.map(lambda p, s: jax.ShapeDtypeStruct(p.shape, p.dtype, sharding=s),
                         state.params, self._grads_sharding)
    return super().lower(state, grads, batch)


def make_eval_step(model: nn.Module, label_smoothing: float, mesh: Mesh, rules: Rules,
                   param_shardings: Any, compiler_options: dict | None = None) -> OnMesh:
  """Compiled `eval(params, batch) -> sums` (see eval_step); params are not donated."""

  def evaluate(params, batch):
    return eval_step(params, batch, model=model, label_smoothing=label_smoothing)

  replicated = NamedSharding(mesh, PartitionSpec())
  jitted = jax.jit(evaluate, in_shardings=(param_shardings, batch_sharding(mesh, rules)),
                   out_shardings=replicated, compiler_options=compiler_options)
  return OnMesh(jitted, mesh, rules)


def check_nonfinite(metrics: Mapping[str, Any], step: int, policy: str) -> None:
  """Host side, after fetching a step's metrics: with train.nonfinite='stop', raises
  NonFiniteError on a skipped update, naming the step and the values (the update itself was not
  applied; see NonFiniteError for what the run did after it)."""
  if policy == "stop" and int(metrics["nonfinite"]):
    raise NonFiniteError(
        f"non-finite update at step {step} (loss={float(metrics['loss'])}, "
        f"grad_norm={float(metrics['grad_norm'])}, "
        f"learning_rate={float(metrics['learning_rate'])}): not applied; training stops because "
        "train.nonfinite='stop' (set it to 'skip' to skip such updates)")
