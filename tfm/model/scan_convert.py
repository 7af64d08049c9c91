"""Parameters between the unrolled and the scanned layer stack (tfm/model/layer_stack.py).

  unrolled: {..., "layer_0": T_0, ..., "layer_{N-1}": T_{N-1}}   every leaf of T_i [...]
  scanned:  {..., "layers": T}                                    every leaf of T [N, ...]
with T[i] = T_i leaf by leaf. Both functions work on any pytree that holds such stacks: a parameter
tree, Adam's moments (which mirror the parameters), a whole TrainState (step, rng and the other
leaves pass through). Under jit with out_shardings they convert a sharded state without gathering it
(tfm convert); under jax.eval_shape they convert shapes.
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp

from tfm.model.layer_stack import SCANNED, unrolled_name


def _is_unrolled(node) -> bool:
  return isinstance(node, Mapping) and unrolled_name(0) in node


def _is_scanned(node) -> bool:
  return isinstance(node, Mapping) and SCANNED in node


def _stack(node: Mapping) -> dict:
  count = 0
  while unrolled_name(count) in node:
    count += 1
  layers = [node[unrolled_name(i)] for i in range(count)]
  rest = {k: v for k, v in node.items() if k not in {unrolled_name(i) for i in range(count)}}
  if any(k.startswith("layer_") for k in rest):
    raise ValueError(f"layers {sorted(k for k in rest if k.startswith('layer_'))} follow a gap in "
                     f"layer_0..layer_{count - 1}; expected consecutive layers")
  return {**rest, SCANNED: jax.tree.map(lambda *xs: jnp.stack(xs), *layers)}


def _unstack(node: Mapping) -> dict:
  stacked = node[SCANNED]
  count = {leaf.shape[0] for leaf in jax.tree.leaves(stacked)}
  if len(count) != 1:
    raise ValueError(f"the leaves of {SCANNED!r} disagree on the number of layers: {sorted(count)}")
  rest = {k: v for k, v in node.items() if k != SCANNED}
  return {**rest, **{unrolled_name(i): jax.tree.map(lambda x, i=i: x[i], stacked)
                     for i in range(count.pop())}}


def stack_layers(tree: Any) -> Any:
  """Unrolled -> scanned: each {layer_0..layer_{N-1}} becomes {"layers": leaves stacked on axis 0}."""
  return jax.tree.map(lambda x: _stack(x) if _is_unrolled(x) else x, tree, is_leaf=_is_unrolled)


def unstack_layers(tree: Any) -> Any:
  """Scanned -> unrolled: each {"layers": [N, ...] leaves} becomes {layer_0..layer_{N-1}}."""
  return jax.tree.map(lambda x: _unstack(x) if _is_scanned(x) else x, tree, is_leaf=_is_scanned)


def convert_layers(tree: Any, scan_layers: bool) -> Any:
  """`tree` in the layout of model.scan_layers = scan_layers, whichever layout it is in now."""
  return stack_layers(tree) if scan_layers else unstack_layers(tree)


def stacked_dims(path) -> int:
  """Leading layer dimensions of the leaf at `path` (a jax key path): 1 inside a scanned stack."""
  return sum(getattr(entry, "key", None) == SCANNED for entry in path)
