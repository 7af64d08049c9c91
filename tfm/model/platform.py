"""The platform a traced computation is for, for the few kernels that are written per platform."""

from __future__ import annotations

import jax


def target_platform() -> str:
  """The platform a traced computation is for: that of the current mesh's devices while a step is
  traced under its mesh (OnMesh; a TPU topology's devices when tfm plan compiles ahead of time on
  another host), the default backend's outside one."""
  device = jax.sharding.get_abstract_mesh().abstract_device
  return device.platform if device is not None else jax.default_backend()
