"""A roofline estimate of a compiled step's time on one chip, and the tokens/s and MFU it implies.

  compute_s = flops per chip / the chip's peak bf16 FLOP/s
  memory_s  = HBM bytes accessed per chip / the chip's HBM bandwidth
  step_s    = max(compute_s, memory_s)

Both counts are XLA's own cost analysis of the partitioned (per-chip) program. It is a lower bound
on the step time, and leaves out: collectives (all-reduce, all-gather, reduce-scatter over ICI, and
over the data-centre network between slices), whose time is not counted at all; compute and memory
traffic not overlapping perfectly; matmuls that run below peak (small or badly shaped ones, f32);
pipeline bubbles of host input and step dispatch. XLA's bytes-accessed count adds up every fused
op's operands and outputs, so memory_s tends to be high for small ops that in practice stay in
VMEM; treat the estimate as an order of magnitude and a compute-vs-memory diagnosis.

With it, tfm plan reports target tokens per step / step_s and the MFU of the model FLOPs of a step
(tfm/train/flops.py) over step_s at the topology's peak.
"""

from __future__ import annotations

import dataclasses

from tfm.train.tpu_chips import TpuChip


@dataclasses.dataclass(frozen=True)
class Roofline:
  compute_s: float
  memory_s: float

  @property
  def step_s(self) -> float:
    return max(self.compute_s, self.memory_s)

  @property
  def bound(self) -> str:
    return "compute" if self.compute_s >= self.memory_s else "HBM bandwidth"


def roofline(flops_per_chip: float, bytes_accessed_per_chip: float, chip: TpuChip) -> Roofline:
  return Roofline(compute_s=flops_per_chip / chip.peak_bf16_flops,
                  memory_s=bytes_accessed_per_chip / chip.hbm_bytes_per_s)

