"""Logical axis names carried by parameters and activations.

The model never names a mesh axis. Parameters are created with logical names (`vocab`, `embed`,
`heads`, ...) and activations are constrained with `act_*` names; a rule table (tfm/train/sharding.py)
maps both onto mesh axes such as `data`, `fsdp` and `tensor`. Activation names are distinct from
parameter names so that FSDP can shard a weight's `embed` dimension over `fsdp` while the batch of
activations is sharded over the same mesh axis.

Parameter axes:
  vocab       token vocabulary                embed      d_model
  heads       query heads                     kv_heads   key/value heads (GQA / MQA)
  kv          per-head feature dim (d_k, d_v) mlp        d_ff
  position    learned position table rows     relpos     relative-position buckets
  layers      the stacked layers of a scanned stack (model.scan_layers; tfm/model/layer_stack.py)
  (None)      the rows of the token-type table (model.token_types, a handful): never split
Activation axes:
  act_batch, act_length, act_embed, act_heads, act_kv_heads, act_kv, act_mlp, act_vocab
"""

from __future__ import annotations

from typing import Callable, Sequence

import flax.linen as nn
import jax

LAYERS = "layers"
PARAM_AXES = ("vocab", "embed", "heads", "kv_heads", "kv", "mlp", "position", "relpos", LAYERS)
ACTIVATION_AXES = ("act_batch", "act_length", "act_embed", "act_heads", "act_kv_heads", "act_kv",
                   "act_mlp", "act_vocab")

# Common activation layouts.
BLD = ("act_batch", "act_length", "act_embed")
BLHD = ("act_batch", "act_length", "act_heads", "act_kv")
BLKD = ("act_batch", "act_length", "act_kv_heads", "act_kv")
BLF = ("act_batch", "act_length", "act_mlp")
BLV = ("act_batch", "act_length", "act_vocab")


def with_axes(init: Callable, names: Sequence[str | None]) -> Callable:
  """Wraps a parameter initializer so the parameter carries logical axis `names`."""
  return nn.with_logical_partitioning(init, tuple(names))


def constrain(x: jax.Array, names: Sequence[str | None]) -> jax.Array:
  """Sharding constraint by logical names; a no-op outside `nn.logical_axis_rules` + mesh, and on a
  mesh of one device (where it would only add an instruction per call for XLA to remove)."""
  if jax.sharding.get_abstract_mesh().size == 1:
    return x
  return nn.with_logical_constraint(x, tuple(names))
