"""From logical axis names to mesh shardings, with a replicated fallback for indivisible dimensions.

Parameters carry logical names (`vocab`, `embed`, `heads`, ...) and activations are constrained with
`act_*` names (tfm/model/partitioning.py). A rule table (config key mesh.rules, default
tfm.train.config.DEFAULT_RULES; `MeshConfig.rules` holds it validated) maps each logical name to mesh axes; flax resolves them, first free
rule wins. Two safety nets keep a legal config from crashing on an awkward shape:

  * `rules_for_model`: a rule whose model dimension (e.g. 1 kv head under multi-query attention, or a
    vocabulary of 37001) is not divisible by its mesh axes is turned into "replicated", with a log line.
    This covers activations, whose constraints are placed inside the model.
  * `state_shardings`: every array of the train state is checked again, dimension by dimension.

The batch is split along its first dimension over the mesh axes of `act_batch` (data and fsdp).
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any, Callable

import flax.linen as nn
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tfm.model.config import ModelConfig

log = logging.getLogger(__name__)

Rules = tuple[tuple[str, Any], ...]


def _as_tuple(axes) -> tuple[str, ...]:
  if axes is None:
    return ()
  return (axes,) if isinstance(axes, str) else tuple(axes)


def axes_size(mesh: Mesh, axes) -> int:
  """Number of devices a dimension mapped to `axes` (None, a name or a tuple) is split over."""
  return math.prod(mesh.shape[a] for a in _as_tuple(axes))


def model_dimensions(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
  """Sizes of the dimensions each logical name labels in this model (act_batch/act_length vary)."""
  dims = {
      "vocab": (cfg.vocab_size,), "embed": (cfg.d_model,), "heads": (cfg.num_heads,),
      "kv_heads": (cfg.kv_heads,), "kv": (cfg.d_k, cfg.d_v), "mlp": (cfg.d_ff,),
      "position": (cfg.max_length,), "relpos": (cfg.relative_buckets,),
  }
  dims.update({"act_" + name: dims[name] for name in ("vocab", "embed", "heads", "kv_heads", "kv",
                                                       "mlp")})
  return dims


def rules_for_model(rules: Rules, mesh: Mesh, cfg: ModelConfig) -> Rules:
  """Rules with every rule whose dimension is not divisible by its mesh axes set to None (logged)."""
  dims = model_dimensions(cfg)
  fitted = []
  for name, axes in rules:
    size = axes_size(mesh, axes)
    bad = [d for d in dims.get(name, ()) if d % size]
    if bad and size > 1:
      log.warning("logical axis %r: size %s not divisible by mesh axes %s (%d devices); replicated",
                  name, bad[0], axes, size)
      axes = None
    fitted.append((name, axes))
  return tuple(fitted)


def fit_spec(spec: PartitionSpec, shape: tuple[int, ...], mesh: Mesh, what: str = "array"
             ) -> PartitionSpec:
  """`spec` with each dimension that its mesh axes do not divide replaced by None (logged)."""
  entries = list(spec) + [None] * (len(shape) - len(spec))
  for i, (axes, size) in enumerate(zip(entries, shape)):
    n = axes_size(mesh, axes)
    if n > 1 and size % n:
      log.warning("%s: dimension %d of size %d not divisible by mesh axes %s (%d devices); "
                  "replicated along it", what, i, size, axes, n)
      entries[i] = None
  return PartitionSpec(*entries)


def state_shardings(boxed_abstract: Any, mesh: Mesh, rules: Rules) -> Any:
  """NamedShardings for a tree that may hold `nn.LogicallyPartitioned` boxes (abstract or concrete).

  Boxed leaves map through the rules; unboxed arrays (step counters, rng) are replicated. The result
  has the structure of the *unboxed* tree.
  """
  logical = nn.get_partition_spec(boxed_abstract)
  mesh_specs = nn.logical_to_mesh(logical, rules)
  shapes = nn.meta.unbox(boxed_abstract)

  def fit(path, spec, x):
    return NamedSharding(mesh, fit_spec(spec, x.shape, mesh, jax.tree_util.keystr(path)))

  return jax.tree_util.tree_map_with_path(fit, mesh_specs, shapes,
                                          is_leaf=lambda x: isinstance(x, PartitionSpec))


def batch_spec(rules: Rules) -> PartitionSpec:
  """PartitionSpec of a [batch, length] array: rows split like `act_batch`."""
  return nn.logical_to_mesh_axes(("act_batch", None), rules)


def batch_sharding(mesh: Mesh, rules: Rules) -> NamedSharding:
  return NamedSharding(mesh, batch_spec(rules))


def batch_row_multiple(mesh: Mesh, rules: Rules, microbatches: int = 1) -> int:
  """The global batch's row count must be a multiple of this: microbatches x the batch shards."""
  return microbatches * axes_size(mesh, batch_spec(rules)[0])


def check_batch_size(batch_size: int, mesh: Mesh, rules: Rules, microbatches: int = 1) -> None:
  """The global batch must split evenly into microbatches and each microbatch over the batch axes."""
  if batch_size % batch_row_multiple(mesh, rules, microbatches):
    raise ValueError(
        f"global batch of {batch_size} rows cannot be split into train.microbatches={microbatches} "
        f"slices of a multiple of {axes_size(mesh, batch_spec(rules)[0])} rows (the mesh axes "
        f"{batch_spec(rules)[0]} of act_batch); "
        f"change data.tokens_per_batch, train.microbatches or mesh.data / mesh.fsdp")


@contextlib.contextmanager
def mesh_context(mesh: Mesh, rules: Rules):
  """Makes `mesh` and the logical `rules` current: the model's `nn.with_logical_constraint` calls act
  only while both are set. Enter it around tracing (the first call of a jitted step)."""
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    yield


class OnMesh:
  """A jitted function that is always traced and called with its mesh and logical rules current.

  Training, evaluation and decoding all go through it, so the model's logical constraints act the
  same way in each. `lower` gives the ahead-of-time path (compile once, call the result).
  """

  def __init__(self, jitted: Callable, mesh: Mesh, rules: Rules):
    self.jitted, self.mesh, self.rules = jitted, mesh, rules

  def __call__(self, *args):
    with mesh_context(self.mesh, self.rules):
      return self.jitted(*args)

  def lower(self, *args):
    with mesh_context(self.mesh, self.rules):
      return self.jitted.lower(*args)
