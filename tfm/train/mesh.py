"""The device mesh: named axes ('data', 'fsdp', 'tensor') over every device of every host.

  data    pure data parallelism: the batch is split, parameters are replicated
  fsdp    the batch is split too, and parameters / optimizer state are sharded (ZeRO-3 style)
  tensor  weight matrices are split along heads / d_ff / vocab (Megatron style)

Sizes come from the `mesh` config section; one axis may be -1 ("all remaining devices"). On a
multi-slice TPU pod the slices (connected by the slower data-centre network) are laid along `data`.
Axes are created with AxisType.Auto: shardings are propagated by the compiler from the constraints the
model and the train step place, as in jit before explicit sharding.
"""

from __future__ import annotations

import logging
import math
from typing import Sequence

import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh

from tfm.train.config import MESH_AXES, MeshConfig

log = logging.getLogger(__name__)


def mesh_shape(mesh_cfg: MeshConfig, num_devices: int) -> tuple[int, ...]:
  """Resolves -1 in the `mesh` section for `num_devices`; sizes in MESH_AXES order. Errors name the
  keys (the section itself, at most one -1 among positive sizes, was validated when built)."""
  sizes = {axis: getattr(mesh_cfg, axis) for axis in MESH_AXES}
  fill = [axis for axis, size in sizes.items() if size == -1]
  known = math.prod(size for size in sizes.values() if size != -1)
  if fill:
    if num_devices % known:
      raise ValueError(f"config key mesh.{fill[0]}=-1: {num_devices} devices are not divisible by the "
                       f"product {known} of the other mesh axes")
    sizes[fill[0]] = num_devices // known
  if math.prod(sizes.values()) != num_devices:
    raise ValueError(f"config keys mesh.data x mesh.fsdp x mesh.tensor = "
                     f"{' x '.join(str(s) for s in sizes.values())} must equal the number of devices "
                     f"({num_devices})")
  return tuple(sizes[axis] for axis in MESH_AXES)


def _num_slices(devices) -> int:
  return len({getattr(d, "slice_index", 0) for d in devices})


def _device_array(shape: tuple[int, ...], devices: Sequence) -> np.ndarray:
  slices = _num_slices(devices)
  if slices > 1:
    if shape[0] % slices:
      raise ValueError(f"config key mesh.data: {shape[0]} must be a multiple of the {slices} slices")
    per_slice = (shape[0] // slices,) + tuple(shape[1:])
    return mesh_utils.create_hybrid_device_mesh(per_slice, (slices, 1, 1), devices)
  return jax.make_mesh(shape, MESH_AXES, devices=devices).devices


def create_mesh(mesh_cfg: MeshConfig, devices: Sequence | None = None) -> Mesh:
  """A Mesh with axes ('data', 'fsdp', 'tensor') over `devices` (default: jax.devices(), all hosts)."""
  devices = list(jax.devices() if devices is None else devices)
  shape = mesh_shape(mesh_cfg, len(devices))
  mesh = Mesh(_device_array(shape, devices), MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES))
  log.info("mesh %s over %d devices (%s)", dict(zip(MESH_AXES, shape)), len(devices),
           devices[0].device_kind)
  return mesh
