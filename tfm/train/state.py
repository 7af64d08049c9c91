"""The train state and its sharded initialisation.

The state's shardings are known before any array exists: `jax.eval_shape` traces the initialiser to
get shapes and the logical axis names of every parameter (the model creates them boxed with
`nn.with_logical_partitioning`; Adam's moments inherit the boxes of the parameters they mirror), the
rules turn names into NamedShardings, and `jax.jit(init, out_shardings=...)` then creates every array
directly in its shards: no device ever holds the full parameters unless the rules say so.

Initialisation is traced without a current mesh: the out_shardings alone decide where the parameters
live.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jax.sharding import Mesh

from tfm.model.config import ModelConfig
from tfm.model.scan_convert import stack_layers
from tfm.train.ema import init_ema
from tfm.train.sharding import Rules, state_shardings


class TrainState(struct.PyTreeNode):
  """Everything a step reads and writes; a pytree of arrays (checkpointed as is).

  step             int32 []: batches consumed so far (applied updates + skipped ones)
  params           the model's parameters, float32, unboxed
  opt_state        the optax state (Adam moments mirror params; counts are applied updates)
  rng              uint32 [2]: base key; the dropout key of step s is fold_in(rng, s)
  nonfinite_count  int32 []: updates skipped: the loss, the gradients or the rate were not finite
  ema              a float32 tree like params, their exponential moving average
                   (train.ema_decay, tfm/train/ema.py); None (no arrays) when the EMA is off
  """

  step: jax.Array
  params: Any
  opt_state: Any
  rng: jax.Array
  nonfinite_count: jax.Array
  ema: Any = None

  @property
  def applied_updates(self) -> jax.Array:
    """The optimizer's update count: steps minus skipped steps."""
    return self.step - self.nonfinite_count


def init_inputs(cfg: ModelConfig, rows: int = 1, length: int = 8) -> dict[str, jax.Array | None]:
  """Dummy token arrays [rows, length] for `model.init` (parameter shapes do not depend on them)."""
  tokens = jnp.ones((rows, length), jnp.int32)
  return {"inputs": tokens if cfg.has_encoder else None, "targets": tokens if cfg.has_decoder else None}


def _boxed_params(model: nn.Module, params_key, dropout_key, rows: int):
  """Fresh parameters, still in their LogicallyPartitioned boxes.

  A scanned model (model.scan_layers) starts from the unrolled model's parameters, stacked: the
  initial parameters depend on the seed only, not on the layout, so both layouts train the same
  curve. (The scanned model's own initial values are unused: jit drops their computation.)
  """
  example = init_inputs(model.cfg, rows)
  init = lambda m: m.init({"params": params_key, "dropout": dropout_key}, example["inputs"],
                          example["targets"], train=False)["params"]
  params = init(model)
  if getattr(model.cfg, "scan_layers", False):
    unrolled = stack_layers(nn.meta.unbox(init(model.clone(
        cfg=dataclasses.replace(model.cfg, scan_layers=False)))))
    params = jax.tree_util.tree_map(
        lambda box, value: box.replace_boxed(value) if isinstance(box, nn.meta.AxisMetadata) else value,
        params, unrolled, is_leaf=lambda x: isinstance(x, nn.meta.AxisMetadata))
  return params


def _boxed_state(model: nn.Module, tx: optax.GradientTransformation, key: jax.Array, rows: int,
                 ema: bool = False) -> TrainState:
  """A fresh state whose parameters (Adam's moments, the EMA) are still in their
  LogicallyPartitioned boxes. key: PRNGKey(train.seed). ema: keep an EMA of the parameters (it
  starts as them, float32)."""
  params_key, dropout_key, train_key = jax.random.split(key, 3)
  params = _boxed_params(model, params_key, dropout_key, rows)
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                    rng=train_key, nonfinite_count=jnp.zeros((), jnp.int32),
                    ema=init_ema(params) if ema else None)


def _batch_rows(mesh: Mesh) -> int:
  return mesh.shape.get("data", 1) * mesh.shape.get("fsdp", 1)


def _abstract(boxed, mesh: Mesh, rules: Rules):
  """(ShapeDtypeStructs carrying their shardings, shardings) of a boxed abstract tree."""
  shardings = state_shardings(boxed, mesh, rules)
  abstract = jax.tree_util.tree_map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), nn.meta.unbox(boxed), shardings)
  return abstract, shardings


def abstract_params(model: nn.Module, mesh: Mesh, rules: Rules) -> tuple[Any, Any]:
  """(abstract parameters, their shardings) without an optimizer: what inference restores into."""
  key = jax.random.PRNGKey(0)
  return _abstract(jax.eval_shape(lambda: _boxed_params(model, key, key, _batch_rows(mesh))), mesh,
                   rules)


def abstract_train_state(model: nn.Module, tx: optax.GradientTransformation, mesh: Mesh, rules: Rules,
                         seed: int = 0, ema: bool = False) -> tuple[TrainState, TrainState]:
  """(abstract state, shardings), computed without allocating anything.

  The abstract state holds jax.ShapeDtypeStruct leaves that carry their sharding: the target for a
  sharded checkpoint restore. `model` is a tfm Transformer (it must have a `cfg` ModelConfig field).
  ema: the state keeps an EMA of the parameters (train.ema_decay > 0), sharded as they are.
  """
  key = jax.random.PRNGKey(seed)
  return _abstract(jax.eval_shape(lambda: _boxed_state(model, tx, key, _batch_rows(mesh), ema)),
                   mesh, rules)


THREEFRY = "threefry2x32"  # JAX's default PRNG, the one every tfm key is made by


def check_default_prng() -> None:
  """Refuses a process whose JAX default PRNG is not threefry (jax_default_prng_impl, set by
  jax.config or the JAX_DEFAULT_PRNG_IMPL environment variable, e.g. 'rbg').

  Under another default, PRNGKey(train.seed) makes that generator's key (uint32 [4] for rbg): the
  init, the checkpointed TrainState.rng and every dropout mask would hang on a process setting the
  run's config.json does not record (a resume without it cannot restore the rng), and
  train.dropout_prng=rbg's dropout key (tfm/train/step.py: dropout_key) is made of a threefry
  key's 2 words. Which generator draws the dropout masks is train.dropout_prng's to say.
  """
  impl = jax.config.jax_default_prng_impl
  if impl != THREEFRY:
    raise ValueError(f"jax_default_prng_impl={impl!r} (JAX_DEFAULT_PRNG_IMPL): tfm's keys are "
                     f"{THREEFRY!r} keys, so that a run's init and dropout masks follow its config "
                     "alone; unset it (train.dropout_prng=rbg draws the dropout masks with XLA's "
                     "RngBitGenerator)")


def make_init(model: nn.Module, tx: optax.GradientTransformation, mesh: Mesh, shardings: TrainState,
              compiler_options: dict | None = None):
  """`init(seed) -> TrainState`, jitted, creating every array in `shardings` (from
  abstract_train_state; an EMA where they hold one); each call returns a fresh state. The seed
  reaches the program as its key, PRNGKey(seed), an argument (a host array, which a jit over any
  mesh takes as replicated): one compiled init serves every seed, a stack's members and a sweep's
  seeds. compiler_options: passed to jax.jit (XLA options, e.g. a lower optimisation level for
  CPU tests)."""
  ema = shardings.ema is not None
  init = jax.jit(lambda key: nn.meta.unbox(_boxed_state(model, tx, key, _batch_rows(mesh), ema)),
                 out_shardings=shardings, compiler_options=compiler_options)
  return lambda seed: init(np.asarray(jax.random.PRNGKey(seed)))
