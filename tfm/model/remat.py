"""Rematerialisation (gradient checkpointing) of one layer: what its backward pass recomputes.

model.remat, applied to every encoder and decoder layer (inside the scan too when model.scan_layers):
  none     nothing recomputed: every activation of the forward pass is kept for the backward pass
  full     only the layer's inputs are kept; the backward pass reruns the whole layer forward
  dots     the results of matmuls without batch dimensions (the projections and the FFN: x W) are
           kept, everything else (attention scores and weights, norms, activations) is recomputed
  offload  as dots, but the saved matmul results go to host memory (`pinned_host`) during the
           forward pass and come back for the backward pass: device memory of 'full' at the
           compute of 'dots', paid in host transfers.

'offload' needs a backend with a `pinned_host` memory space. TPUs and GPUs have one; so does XLA's
CPU client of the jax we pin, where host and device memory are the same RAM: on CPU 'offload'
works (its gradients equal those of the other policies: tests/model/test_remat.py) and saves
nothing. On a backend without it, building the model fails with one line naming the key
(`config key model.remat: ...`), not deep in XLA.
"""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax

HOST_MEMORY = "pinned_host"


def memory_kinds() -> set[str]:
  """The memory spaces of the default backend's first device (e.g. {'device', 'pinned_host'})."""
  return {m.kind for m in jax.devices()[0].addressable_memories()}


def policy(name: str) -> Callable | None:
  """The jax.checkpoint policy of model.remat = name ('none' has none: the layer is not wrapped)."""
  if name == "full":
    return jax.checkpoint_policies.nothing_saveable
  if name == "dots":
    return jax.checkpoint_policies.dots_with_no_batch_dims_saveable
  if name == "offload":
    kinds = memory_kinds()
    if HOST_MEMORY not in kinds:
      raise ValueError(f"config key model.remat: expected one of ('none', 'full', 'dots') on "
                       f"backend {jax.default_backend()!r}, got 'offload' (it has no "
                       f"{HOST_MEMORY!r} memory to offload to, only {sorted(kinds)})")
    return jax.checkpoint_policies.offload_dot_with_no_batch_dims("device", HOST_MEMORY)
  raise ValueError(f"config key model.remat: expected one of none, full, dots, offload, got {name!r}")


def remat(call: Callable[..., Any], name: str, scanned: bool = False) -> Callable[..., Any]:
  """call(layer, *arrays) rematerialised with policy `name` (call itself for 'none').

  call applies a layer module to array arguments (or None); the Python values the layer takes
  (train, mode) are in call's closure, so they are constants of the traced function and no
  argument needs to be marked static. scanned: the layer runs inside nn.scan, whose loop already
  keeps XLA from merging the recomputation with the forward pass, so the CSE barriers are left out
  (jax.checkpoint's advice).
  """
  if name == "none":
    return call
  return nn.remat(call, policy=policy(name), prevent_cse=not scanned)
