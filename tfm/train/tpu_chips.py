"""TPU chips: HBM capacity, HBM bandwidth and dense bf16 peak FLOP/s per chip.

Vendor figures from Google Cloud's TPU system-architecture pages (cloud.google.com/tpu/docs/v4,
/v5e, /v5p, /v6e), per chip:

  chip   HBM       HBM bandwidth   bf16 peak      JAX device_kind
  v4     32 GiB    1200 GB/s       275 TFLOP/s    "TPU v4"
  v5e    16 GiB     819 GB/s       197 TFLOP/s    "TPU v5 lite"
  v5p    95 GiB    2765 GB/s       459 TFLOP/s    "TPU v5"
  v6e    32 GiB    1640 GB/s       918 TFLOP/s    "TPU v6 lite" (Trillium)

The HBM figure is the chip's capacity; the runtime keeps a little of it for itself, so a program
planned within a few percent of it may still not load.
"""

from __future__ import annotations

import dataclasses

GIB = 2**30


@dataclasses.dataclass(frozen=True)
class TpuChip:
  name: str  # the topology prefix: v5e in "v5e:4x4"
  device_kinds: tuple[str, ...]  # lower-case jax Device.device_kind spellings
  hbm_bytes: int
  hbm_bytes_per_s: float
  peak_bf16_flops: float


TPU_CHIPS = (
    TpuChip("v4", ("tpu v4",), 32 * GIB, 1200e9, 275e12),
    TpuChip("v5e", ("tpu v5 lite", "tpu v5e"), 16 * GIB, 819e9, 197e12),
    TpuChip("v5p", ("tpu v5p", "tpu v5"), 95 * GIB, 2765e9, 459e12),
    TpuChip("v6e", ("tpu v6 lite", "tpu v6e"), 32 * GIB, 1640e9, 918e12),
)


def chip_by_name(name: str) -> TpuChip | None:
  """The chip of a topology prefix ('v5e', also 'v5litepod' and 'v6e'), case-insensitive."""
  name = {"v5litepod": "v5e", "v5lite": "v5e", "v6lite": "v6e"}.get(name.lower(), name.lower())
  return next((chip for chip in TPU_CHIPS if chip.name == name), None)


def chip_by_device_kind(device_kind: str) -> TpuChip | None:
  """The chip whose device kind is a substring of `device_kind` (longest spelling wins, so
  'TPU v5 lite' is a v5e, not a v5p)."""
  kind = device_kind.lower()
  matches = [(len(k), chip) for chip in TPU_CHIPS for k in chip.device_kinds if k in kind]
  return max(matches, key=lambda m: m[0])[1] if matches else None
