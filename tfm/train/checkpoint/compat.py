"""A checkpoint against the state a run wants, where they differ by more than shapes.

A checkpoint an older tfm wrote before the state had an `ema` field restores as it is
(restore_target); the config keys in which a checkpoint's optimizer or EMA differ from this run's
(train.optimizer, train.adafactor_momentum, train.ema_decay) are named in one line by
check_shapes (tfm/train/checkpoint/__init__.py) and train.init_from."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import orbax.checkpoint as ocp
from etils import epath


def restore_target(state_dir: epath.Path, abstract_state: Any) -> tuple[Any, Callable[[Any], Any]]:
  """(the tree to restore the checkpoint at state_dir into, a function making the TrainState of
  what comes back) for `abstract_state`. They are abstract_state and the identity, except for a
  state without an EMA (train.ema_decay = 0) read from a checkpoint an older tfm wrote, before the
  state had an `ema` field: that tree has no `ema` node at all (this tfm saves None there), so
  the other fields are restored as a dict and the state is rebuilt with ema=None."""
  fields = [f.name for f in dataclasses.fields(abstract_state)] if dataclasses.is_dataclass(
      abstract_state) else []
  if "ema" not in fields or abstract_state.ema is not None:
    return abstract_state, lambda state: state
  handler = ocp.PyTreeCheckpointHandler()
  try:
    saved = handler.metadata(state_dir).tree
  finally:
    handler.close()
  if not isinstance(saved, dict) or "ema" in saved:
    return abstract_state, lambda state: state
  target = {name: getattr(abstract_state, name) for name in fields if name != "ema"}
  return target, lambda state: type(abstract_state)(**state, ema=None)


def _optimizer_parts(names) -> set[str]:
  """The parts of tfm's optimizer state (tfm/train/optimizer.py: opt_state/<part>/...) that
  arrays by these names hold: adam, or adafactor (and momentum), and learning_rate."""
  return {k.split("/")[1] for k in names if k.startswith("opt_state/") and k.count("/") >= 2}


def optimizer_difference(saved, wanted) -> str | None:
  """One line naming the key (train.optimizer, train.adafactor_momentum) in which the optimizer
  of a state of arrays `wanted` (by name) differs from that of a checkpoint holding `saved`, or
  None (the same parts; or either holds no optimizer state)."""
  held, kept = _optimizer_parts(saved), _optimizer_parts(wanted)
  if not held or not kept or held == kept or any(p.isdigit() for p in held | kept):
    return None  # (optax.chain's numbering, opt_state/0/...: older tfm, check_shapes names it)
  rule = lambda parts: ("adafactor" if "adafactor" in parts else "adam" if "adam" in parts
                        else "/".join(sorted(parts)))
  if rule(held) != rule(kept):
    return (f"config key train.optimizer: the checkpoint holds the optimizer state of "
            f"{rule(held)!r} (adam and adamw keep Adam's) and this run's optimizer is "
            f"{rule(kept)!r}")
  if ("momentum" in held) != ("momentum" in kept):
    return ("config key train.adafactor_momentum: the checkpoint holds Adafactor's state "
            f"{'with' if 'momentum' in held else 'without'} momentum and this run's "
            f"adafactor_momentum is {'0' if 'momentum' in held else '> 0'}")
  return None


def ema_difference(saved, wanted) -> str | None:
  """Where a checkpoint holding arrays `saved` (by name) and a state of arrays `wanted` differ in
  keeping an EMA of the parameters (train.ema_decay): what the checkpoint holds, what this run
  keeps and the setting it was trained with; None where both keep one or neither does."""
  held = any(k.startswith("ema/") for k in saved)
  if held == any(k.startswith("ema/") for k in wanted):
    return None
  return (f"holds {'an' if held else 'no'} EMA of the parameters and this run keeps "
          f"{'none' if held else 'one'}: a run resumes with the EMA setting it was trained with "
          f"(train.ema_decay {'> 0' if held else '= 0'})")
