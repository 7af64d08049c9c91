"""A TPU topology for ahead-of-time compilation: compile-only devices from libtpu, on any machine.

  topology = load_topology("v5e:4x4", slices=2)   # 2 slices of 4x4 v5e chips: 32 devices
  topology.devices                                # jax devices to build a Mesh from (no TPU needed)
  topology.chip                                   # HBM, bandwidth, peak (tfm/train/tpu_chips.py)

Specs are libtpu's: CHIP:XxY (v5e, v6e) or CHIP:XxYxZ (v4, v5p). Several slices (`slices` > 1) are
joined by the data-centre network; their devices carry a slice_index, which tfm/train/mesh.py lays
along mesh.data. v4 and v5p are compiled as megacore (one JAX device per chip, as they run).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
from typing import Sequence

from tfm.train.tpu_chips import TPU_CHIPS, TpuChip, chip_by_name

INSTALL_HINT = "install the tpu-aot extra: pip install -e '.[tpu-aot]'"
_SPEC = re.compile(r"^([a-z0-9]+):(\d+(?:x\d+){1,2})$")
_MEGACORE = ("v4", "v5p")


@dataclasses.dataclass(frozen=True)
class Topology:
  spec: str  # e.g. "v5e:4x4"
  slices: int
  chip: TpuChip
  devices: Sequence  # compile-only jax devices, slices x chips per slice

  @property
  def chips(self) -> int:
    return len(self.devices)

  @property
  def name(self) -> str:
    return self.spec if self.slices == 1 else f"{self.slices} x {self.spec}"


def parse_spec(spec: str) -> tuple[TpuChip, tuple[int, ...]]:
  """'v5e:4x4' -> (the v5e chip, (4, 4)); ValueError naming --topology otherwise."""
  match = _SPEC.match(spec.strip().lower())
  known = ", ".join(chip.name for chip in TPU_CHIPS)
  if not match:
    raise ValueError(f"--topology={spec!r}: expected CHIP:XxY or CHIP:XxYxZ, e.g. v5e:4x4 or "
                     f"v5p:2x2x2 (CHIP one of {known})")
  chip = chip_by_name(match.group(1))
  if chip is None:
    raise ValueError(f"--topology={spec!r}: unknown chip {match.group(1)!r}; expected one of {known}")
  return chip, tuple(int(n) for n in match.group(2).split("x"))


def libtpu_installed() -> bool:
  return importlib.util.find_spec("libtpu") is not None


def load_topology(spec: str, slices: int = 1) -> Topology:
  """Compile-only devices of `slices` slices of topology `spec` (libtpu; no TPU needed).

  Sets ALLOW_MULTIPLE_LIBTPU_LOAD (planning opens no TPU, so it may run beside a job that holds
  one) and TPU_STDERR_LOG_LEVEL=1, so libtpu's warnings (e.g. XLA's "involuntary full
  rematerialization") reach stderr, where tfm/plan/xla_log.py reads them, not only /tmp/tpu_logs.
  """
  chip, _ = parse_spec(spec)
  if slices < 1:
    raise ValueError(f"--slices must be a positive number of slices, got {slices}")
  if not libtpu_installed():
    raise ValueError(f"tfm plan needs libtpu to compile for a TPU topology; {INSTALL_HINT}")
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  os.environ.setdefault("TPU_STDERR_LOG_LEVEL", "1")
  from jax.experimental import topologies  # pylint: disable=import-outside-toplevel
  kwargs = {"num_slices": slices} if slices > 1 else {}
  if chip.name in _MEGACORE:
    kwargs["chip_config_name"] = "megacore"
  name = f"{chip.name}:{spec.split(':', 1)[1]}"
  try:
    devices = topologies.get_topology_desc(name, "tpu", **kwargs).devices
  except Exception as e:  # libtpu reports a bad shape as a JaxRuntimeError: one line
    raise ValueError(f"--topology={spec!r}: libtpu rejects it: {str(e).splitlines()[0]}") from e
  return Topology(spec=name, slices=slices, chip=chip, devices=devices)
