"""Stacked runs: runs of one model that differ only in their seeds, trained as one program.

A small model leaves most of a GPU idle, and several processes sharing one (NVIDIA's MPS) gained
1.24x for six (experiments/results/gpu/2026-11-27_h200_table3). A stack trains K runs in one step
instead: every leaf of the train state (parameters, optimizer state, step counters, dropout keys)
and of the batch gets a leading member axis, and the step is the run's own train step vmapped over
it (tfm/train/step.py: make_train_step's `members`), so each member's update is its run's (its
non-finite guard included: a member whose update is not finite skips its own).

Members are runs whose configs differ only in STACK_KEYS: train.seed (parameter init, dropout
masks) and data.shuffle_seed (data order), as a sweep's seeds of one row, and the scalars that
change no shape or program: the dropout rates and the label smoothing (Table 3's base and D1-D4),
and the learning rate's scale (train.learning_rate: a learning-rate sweep). They share everything
else, train.optimizer and the EMA's decay (train.ema_decay) among it: runs that differ in those
train in stacks of their own.
A scalar the members share stays the Python float the solo step compiles; one they differ in is
each member's array (MemberScalars): the dropout's keep probability (tfm/model/dropout.py) and the
loss's smoothing, traced, and the model is built for the stack from the largest rate of each
dropout (structure_config), so that a member with rate 0 keeps every value. A member's learning
rate is the structure's times its ratio to the first member's: its updates are the optimizer's
scaled by that ratio (every part of tfm's optimizer before the rate is independent of it:
tfm/train/optimizer.py), equal to its solo run's to float rounding (the first member's exactly). Each member starts from
the state its solo run starts from, reads the batches its solo run reads, and is saved into a
workdir of its own as a solo run's checkpoint (member_state): `tfm eval`, `translate`, `plot` and
a solo resume read a member's workdir as any run's.

  states = [Experiment(c).init_state() for c in members]   # each member's solo start
  exp = Experiment(structure_config(members))                # the stack's model and step
  state = stack_states(states, exp.state_shardings)          # [K, ...]
  step = exp.stacked_train_step(K, MemberScalars.of(members))
  state, metrics = step(state, stack_batches(batches))       # metrics [K]
  solo = member_state(state, k, exp.state_shardings)         # member k, as its run holds it
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from tfm import config as config_lib
from tfm.model import dropout
from tfm.train.step import member_sharding

# The keys members may differ in: what a sweep's seed sets, and scalars the step takes as arrays.
SEED_KEYS = ("train.seed", "data.shuffle_seed")
SCALAR_KEYS = tuple(f"model.{kind}" for kind in dropout.KINDS) + ("train.label_smoothing",
                                                                  "train.learning_rate")
STACK_KEYS = SEED_KEYS + SCALAR_KEYS


@dataclasses.dataclass(frozen=True)
class MemberScalars:
  """The scalars in which members differ, a tuple a scalar with a value a member: keep: (kind,
  keep probabilities) for each dropout kind, label_smoothing, learning_rate_ratio (each member's
  train.learning_rate over the first's): None where they share it."""
  keep: tuple[tuple[str, tuple[float, ...]], ...] = ()
  label_smoothing: tuple[float, ...] | None = None
  learning_rate_ratio: tuple[float, ...] | None = None

  @classmethod
  def of(cls, configs: Sequence[config_lib.Config]) -> "MemberScalars":
    keep = []
    for kind in dropout.KINDS:
      rates = [getattr(c.model, kind) for c in configs]
      if len(set(rates)) > 1:  # 1 - rate in double precision, as the solo step's constant
        keep.append((kind, tuple(float(np.float32(1.0 - r)) for r in rates)))
    smoothing = [c.train.label_smoothing for c in configs]
    rates = [c.train.learning_rate for c in configs]
    return cls(tuple(keep), tuple(smoothing) if len(set(smoothing)) > 1 else None,
               tuple(r / rates[0] for r in rates) if len(set(rates)) > 1 else None)

  def arrays(self) -> tuple[dict[str, jax.Array], jax.Array | None, jax.Array | None]:
    """({kind: keep [K]}, label smoothing [K] or None, learning-rate ratio [K] or None), float32:
    what the vmapped step takes."""
    keep = {kind: jnp.asarray(values, jnp.float32) for kind, values in self.keep}
    as_array = lambda values: None if values is None else jnp.asarray(values, jnp.float32)
    return keep, as_array(self.label_smoothing), as_array(self.learning_rate_ratio)


def structure_config(configs: Sequence[config_lib.Config]) -> config_lib.Config:
  """The config the stack's model and step are built from: the first member's with each dropout
  rate the largest of the members' (which dropouts exist and which attention kernel runs depend on
  the rates: tfm/model/attention.py)."""
  first = configs[0]
  rates = {kind: max(getattr(c.model, kind) for c in configs) for kind in dropout.KINDS}
  return first.replace(model=dataclasses.replace(first.model, **rates))


def why_alone(config: config_lib.Config) -> str | None:
  """Why a run of `config` cannot be a stack's member (one line naming the key), or None."""
  if not config.data.packing:
    return ("config key data.packing: a stack needs every member's batch of one shape, packed "
            "rows (data.packing=True), not length buckets")
  if config.train.dropout_prng == "rbg":
    # vmap of XLA's RngBitGenerator draws every member's bits from the first member's key.
    return ("config key train.dropout_prng: 'rbg' cannot serve a stack: vmapped, RngBitGenerator "
            "draws every member's masks from the first member's key, so no member would be its "
            "solo run; set 'threefry' or 'auto' (a stack resolves it to threefry)")
  return None


def _shared(config: config_lib.Config) -> dict:
  """What runs must share to stack: the flattened config less STACK_KEYS and a table row's name
  and figures (config_lib.EXTRAS: base and D1 are rows of one table)."""
  values = config_lib.flatten(config.to_dict())
  return {k: v for k, v in values.items() if k not in STACK_KEYS + config_lib.EXTRAS}


def check_members(configs: Sequence[config_lib.Config]) -> None:
  """Raises ValueError naming the first key outside STACK_KEYS in which a member differs from the
  first (_shared), or why these configs cannot be stacked (why_alone)."""
  if len(configs) < 1:
    raise ValueError("a stack needs at least one member")
  first = _shared(configs[0])
  for i, config in enumerate(configs[1:], start=1):
    other = _shared(config)
    for key in sorted(set(first) | set(other)):
      if first.get(key) != other.get(key):
        raise ValueError(f"stack member {i} differs from member 0 in {key} ({other.get(key)!r} "
                         f"against {first.get(key)!r}): members may differ only in "
                         f"{', '.join(STACK_KEYS)}")
  reason = why_alone(configs[0])
  if reason is not None:
    raise ValueError(reason)


def stack_class(config: config_lib.Config) -> str | None:
  """Runs of equal classes may train as one stack (check_members): what they share (_shared), as
  text; None for a run that cannot stack (why_alone), which trains alone."""
  if why_alone(config) is not None:
    return None
  return json.dumps(_shared(config), sort_keys=True, default=str)


@functools.lru_cache(maxsize=None)
def _stacker(treedef, shardings: tuple, members: int):
  del members  # a key of the cache: one program a member count
  stacked = jax.tree.unflatten(treedef, [member_sharding(s) for s in shardings])
  return jax.jit(lambda *states: jax.tree.map(lambda *xs: jnp.stack(xs), *states),
                 out_shardings=stacked)


@functools.lru_cache(maxsize=None)
def _slicer(treedef, shardings: tuple, k: int):
  return jax.jit(lambda state: jax.tree.map(lambda x: x[k], state),
                 out_shardings=jax.tree.unflatten(treedef, list(shardings)))


def stack_states(states: Sequence[Any], shardings: Any) -> Any:
  """One state with a leading member axis from each member's own (shardings: a run's state
  shardings, Experiment.state_shardings), laid out for make_train_step's `members`."""
  leaves, treedef = jax.tree.flatten(shardings)
  return _stacker(treedef, tuple(leaves), len(states))(*states)


def member_state(state: Any, k: int, shardings: Any) -> Any:
  """Member k of a stacked state, in a run's own shardings: what its solo run would hold."""
  leaves, treedef = jax.tree.flatten(shardings)
  return _slicer(treedef, tuple(leaves), k)(state)


def stack_batches(batches: Sequence[dict]) -> dict:
  """Host batches of equal shapes, one a member -> one batch [K, rows, length]."""
  keys = batches[0].keys()
  return {key: np.stack([np.asarray(b[key]) for b in batches]) for key in keys}


class MemberBatches:
  """The members' train iterators as one: each next() is every member's next batch, stacked
  [K, rows, length] (stack_batches); get_state, set_state and stats are lists, a member each, as
  each member's checkpoint keeps its own iterator's state."""

  def __init__(self, iterators: Sequence[Any]):
    self.iterators = list(iterators)

  def __iter__(self):
    return self

  def __next__(self) -> dict:
    return stack_batches([next(it) for it in self.iterators])

  def get_state(self) -> list:
    return [it.get_state() for it in self.iterators]

  def set_state(self, states: Sequence[Any]) -> None:
    for it, state in zip(self.iterators, states, strict=True):
      it.set_state(state)

  def stats(self) -> list[dict]:
    return [it.stats() for it in self.iterators]

  def close(self) -> None:
    for it in self.iterators:
      it.close()
