"""What would make a step fit in HBM: single config changes, each compiled and measured.

Candidates, for a plan whose bytes per chip exceed the chip's HBM:

  mesh.fsdp        data-parallel devices moved to fsdp (mesh.data=1, mesh.fsdp=data x fsdp): the
                   parameters and optimizer state are sharded instead of replicated
  train.microbatches  the smallest power-of-two multiple m of the current value with
                   fixed + temporaries x current / m <= 3/4 of HBM (activations shrink with the
                   microbatch; fixed = total - temporaries), at most rows / batch shards. The
                   headroom: a step that XLA must squeeze by rematerializing compiles slowly
                   and runs slower
  model.remat=full the layers' activations are recomputed in the backward pass

The first is tried first when the state (parameters + optimizer) is at least half of the total,
microbatches first otherwise; remat last (it costs a third more compute). Each is a real compile of
the changed config (tfm/plan/step_plan.py), so the figure it reports is XLA's, not a guess.
"""

from __future__ import annotations

import dataclasses

from tfm.config import Config
from tfm.plan.step_plan import StepPlan, plan_step
from tfm.plan.topology import Topology

Change = tuple[tuple[str, str, object], ...]  # ((section, key, value), ...)


def describe(change: Change) -> str:
  """(("train", "microbatches", 4),) -> 'train.microbatches=4'."""
  return ", ".join(f"{section}.{key}={value}" for section, key, value in change)


def apply(config: Config, change: Change) -> Config:
  """config with each (section, key, value) of `change` set (each section validated again, with
  all of its changes at once)."""
  sections: dict[str, dict] = {}
  for section, key, value in change:
    sections.setdefault(section, {})[key] = value
  return config.replace(**{section: dataclasses.replace(getattr(config, section), **values)
                           for section, values in sections.items()})


def _microbatches(config: Config, plan: StepPlan) -> int | None:
  current = config.train.microbatches
  batch_shards = plan.mesh["data"] * plan.mesh["fsdp"]
  most = plan.rows // batch_shards
  fixed = plan.bytes_per_chip - plan.temp_bytes
  m = 2 * current
  while m < most and fixed + plan.temp_bytes * current / m > 0.75 * plan.hbm_bytes:
    m *= 2
  m = min(m, most)
  return m if m > current else None


def candidates(config: Config, plan: StepPlan) -> list[Change]:
  """The single changes worth compiling for a plan that does not fit, best first."""
  data, fsdp = plan.mesh["data"], plan.mesh["fsdp"]
  sharding = [(("mesh", "data", 1), ("mesh", "fsdp", data * fsdp))] if data > 1 else []
  m = _microbatches(config, plan)
  accumulation = [(("train", "microbatches", m),)] if m else []
  state_heavy = plan.params_bytes + plan.optimizer_bytes >= plan.bytes_per_chip / 2
  changes = sharding + accumulation if state_heavy else accumulation + sharding
  if config.model.remat == "none":
    changes.append((("model", "remat", "full"),))
  return changes


@dataclasses.dataclass(frozen=True)
class Remedy:
  change: str  # e.g. "train.microbatches=4"
  plan: StepPlan | None  # None when the changed config could not be compiled
  error: str | None = None


def try_remedies(config: Config, topology: Topology, plan: StepPlan, limit: int) -> list[Remedy]:
  """Compiles up to `limit` candidates in order, stopping at the first that fits."""
  tried = []
  for change in candidates(config, plan)[:limit]:
    try:
      remedy = Remedy(describe(change), plan_step(apply(config, change), topology))
    except ValueError as e:  # e.g. a mesh the rules cannot use: say so and go on
      remedy = Remedy(describe(change), None, " ".join(str(e).split()))
    tried.append(remedy)
    if remedy.plan is not None and remedy.plan.fits:
      break
  return tried
