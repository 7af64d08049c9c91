"""A roofline estimate of a compiled step's time on one chip, and the tokens/s and MFU it implies.

  compute_s = max(XLA's FLOPs per chip, model FLOPs per chip) / the chip's peak bf16 FLOP/s
  memory_s  = HBM bytes accessed per chip / the chip's HBM bandwidth
  step_s    = max(compute_s, memory_s)

Both counts are XLA's own cost analysis of the partitioned (per-chip) program, which counts the body
of a loop once. A microbatched step (train.microbatches > 1, a loop of forward and backward
passes) would be counted as about one microbatch, so tfm plan gives it no estimate at all
(tfm/plan/step_plan.py's `unestimated`). Smaller loops (collective matmuls, which XLA may use under
FSDP) are under-counted too, hence the model's FLOPs (tfm/train/flops.py) as a floor for compute;
HBM traffic inside them is under-counted the same way, with no floor.

What the estimate leaves out, which makes it optimistic: collectives (all-reduce, all-gather,
reduce-scatter over ICI, and over the data-centre network between slices) are not counted at all;
compute and memory traffic are assumed to overlap perfectly; matmuls are assumed to run at peak
(small or badly shaped ones, or f32 ones, do not); host input and step dispatch are free. What
makes it pessimistic: XLA's bytes-accessed count adds up every fused op's operands and outputs,
including traffic that stays in on-chip memory. Treat it as an order of magnitude and a
compute-vs-memory diagnosis, not a prediction.

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


def roofline(flops_per_chip: float, bytes_accessed_per_chip: float, chip: TpuChip,
             model_flops_per_chip: float = 0.0) -> Roofline:
  return Roofline(compute_s=max(flops_per_chip, model_flops_per_chip) / chip.peak_bf16_flops,
                  memory_s=bytes_accessed_per_chip / chip.hbm_bytes_per_s)

