"""N layers applied in turn: a Python loop (`layer_0` ... `layer_{N-1}`) or one `nn.scan` (`layers`).

x_{i+1} = Layer_i(x_i, *inputs), i = 0..N-1; the inputs (masks, the stack-level position bias, the
encoder output, positions, the decode index) are the same for every layer.

Unrolled (model.scan_layers=False, the default): each layer is its own submodule and XLA compiles N
copies of it. Scanned: one submodule `layers` whose variables carry a leading layers dimension and
one `jax.lax.scan` over it, so XLA compiles the layer once whatever N is:
  params   [N, ...]      stacked on axis 0, logical axis `layers` (unsharded by the default rules)
  cache    [b, N, ...]   stacked on axis 1, behind the batch: every decode-cache leaf still leads
                         with the batch, so beam search tiles and reorders it unchanged
The inputs are broadcast into the scan (their gradients, e.g. of the relative-position bias, are
summed over the layers); the params and dropout RNGs are split per layer.
tfm/model/scan_convert.py converts parameters between the two layouts.
"""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn

from tfm.model import partitioning as P

SCANNED = "layers"  # the scanned stack's name in the parameter and cache trees
CACHE_AXIS = 1  # where a scanned cache leaf holds its layers dimension ([b, N, ...])


def unrolled_name(i: int) -> str:
  """The name of layer i of an unrolled stack."""
  return f"layer_{i}"


def apply_stack(make: Callable[[str], nn.Module], call: Callable[..., Any], count: int, scan: bool,
                x, *inputs):
  """x after `count` layers: layer = make(name), x = call(layer, x, *inputs) for each.

  make builds a layer module with the given name (inside the caller's compact method); call applies
  it and returns the new x ([b, l, d_model]); Python-valued arguments (train, mode) belong in call's
  closure, arrays (or None) in inputs. scan: one nn.scan (see the module docstring) instead of a loop.
  """
  if not scan:
    for i in range(count):
      x = call(make(unrolled_name(i)), x, *inputs)
    return x
  body = lambda layer, carry, *xs: (call(layer, carry, *xs), None)
  scanned = nn.scan(body, variable_axes={"params": 0, "cache": CACHE_AXIS, "intermediates": 0},
                    split_rngs={"params": True, "dropout": True}, in_axes=(nn.broadcast,) * len(inputs),
                    length=count, metadata_params={nn.PARTITION_NAME: P.LAYERS})
  return scanned(make(SCANNED), x, *inputs)[0]
