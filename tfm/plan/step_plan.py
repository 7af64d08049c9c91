"""The plan of one config on one TPU topology: the real train step compiled ahead of time, measured.

  plan = plan_step(config, topology)   # Experiment(config, devices=topology.devices).train_step,
                                       # lowered on the abstract state and batch, compiled by libtpu

Memory per chip (bytes), from the partitioned program:

  params, optimizer   the shards of state.params and state.opt_state (their shardings' shard shapes)
  batch               the batch's shard, other_state: step counters, rng, the EMA of the
                      parameters (train.ema_decay: as large as params)
  temporaries         XLA's temp allocation: activations kept for the backward pass, gradients,
                      the optimizer's intermediates, collective buffers (memory_analysis temp)
  program             the compiled code, which lives in HBM too
  total = arguments + outputs - aliased (the donated state is updated in place) + temporaries
          + program;  fits = XLA compiled it (libtpu refuses a program over the chip's usable HBM,
          tfm/plan/oom.py) and total <= the chip's HBM (tfm/train/tpu_chips.py)

FLOPs per chip and HBM bytes accessed per chip are XLA's cost analysis of the per-chip program;
flops_per_step = flops per chip x chips. model_flops_per_step = rows x train_flops(S=max_length,
T=the task's target length: max_length, or task span's shorter targets) (tfm/train/flops.py),
which counts the matmuls and attention products of the model only. The step time is a roofline
estimate (tfm/plan/roofline.py: no collectives), made only for a step without train.microbatches: a microbatched step is a loop, whose body XLA's cost analysis counts once, so
its FLOPs and HBM traffic would be a fraction of the step's (`estimate_note` says so instead).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import jax

from tfm import tasks
from tfm.config import Config
from tfm.experiment import Experiment
from tfm.plan.oom import OutOfMemory, is_out_of_memory, parse_out_of_memory
from tfm.plan.roofline import Roofline, roofline
from tfm.plan.topology import Topology
from tfm.plan.xla_log import captured_stderr
from tfm.train.flops import mfu, train_flops


def shard_bytes(tree: Any) -> int:
  """Bytes one device holds of a tree of ShapeDtypeStructs with shardings (the largest shard)."""
  return sum(math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize
             for x in jax.tree_util.tree_leaves(tree))


@dataclasses.dataclass(frozen=True)
class StepPlan:
  """Figures of one compile; the compiled ones are None when XLA refused the program (oom set)."""

  topology: str
  chips: int
  hosts: int
  device_kind: str
  mesh: dict[str, int]
  rows: int
  length: int  # inputs (and targets but task span's)
  target_length: int  # the targets' row: length, or task span's shorter one
  tokens_per_step: int  # target tokens: rows x target_length
  rows_note: str | None  # set when the configured rows were rounded up to split
  params_bytes: int
  optimizer_bytes: int
  batch_bytes: int
  other_state_bytes: int
  temp_bytes: int
  program_bytes: int | None
  argument_bytes: int | None
  output_bytes: int | None
  alias_bytes: int | None
  bytes_per_chip: int
  hbm_bytes: int
  peak_flops: float  # per chip, bf16
  flops_per_chip: float | None
  bytes_accessed_per_chip: float | None
  model_flops_per_step: float
  compile_s: float  # tracing, lowering and compiling
  estimate: Roofline | None
  xla_warnings: tuple[str, ...]
  oom: OutOfMemory | None = None  # XLA's refusal: the program does not fit
  estimate_note: str | None = None  # why a compiled step has no estimate (microbatches)

  @property
  def fits(self) -> bool:
    return self.oom is None and self.bytes_per_chip <= self.hbm_bytes

  @property
  def flops_per_step(self) -> float | None:
    return None if self.flops_per_chip is None else self.flops_per_chip * self.chips

  @property
  def est_tokens_per_s(self) -> float | None:
    return None if self.estimate is None else self.tokens_per_step / self.estimate.step_s

  @property
  def est_mfu(self) -> float | None:
    if self.estimate is None:
      return None
    return mfu(self.model_flops_per_step, self.estimate.step_s, self.chips, self.peak_flops)


def unestimated(microbatches: int) -> str | None:
  """Why a compiled step with this many microbatches gets no roofline estimate, or None.

  train.microbatches = m > 1 runs the forward and backward passes as a loop of m
  (tfm/train/accumulate.py) and XLA's cost analysis counts a loop's body once, so the counted
  FLOPs and bytes are those of about one microbatch plus the update. Multiplying by m would not be
  exact either (the update and the loop's own traffic run once, not m times), so no time, tokens/s
  or MFU is given rather than one that is off by a factor near m (the model's FLOPs at peak, MFU
  100% by construction, before this check)."""
  if microbatches <= 1:
    return None
  return (f"not estimated: train.microbatches={microbatches} runs the step as a loop of "
          f"{microbatches} microbatches and XLA's cost analysis counts a loop's body once")


def topology_hosts(devices) -> int:
  """How many processes (TPU VM hosts, over every slice) drive the devices."""
  return len({(getattr(d, "slice_index", 0), d.process_index) for d in devices})


def abstract_batch(config: Config, exp: Experiment, hosts: int):
  """(rows, inputs length, targets length, the abstract global train batch) of `config`'s step:
  rows of data.max_length inputs, and targets as long as its task's rows (task span's: T5's
  targets length, a fifth or so of the inputs)."""
  rows, length = exp.train_rows(hosts), config.data.max_length
  targets = tasks.get(config.task).target_length(config.data)
  return rows, length, targets, exp.abstract_batch(rows, length, targets)


def plan_step(config: Config, topology: Topology) -> StepPlan:
  """Compiles config's train step for `topology` (see the module docstring) and measures it.

  When XLA refuses the program for lack of HBM, the plan says so (fits False, oom set) with the
  sizes XLA names: bytes_per_chip is XLA's total when it gives one, else the state and batch shards
  plus the temporaries it names (the program's own size unknown)."""
  exp = Experiment(config, devices=topology.devices)
  hosts = topology_hosts(topology.devices)
  rows, length, targets, batch = abstract_batch(config, exp, hosts)
  state = exp.abstract_state
  params, optimizer = shard_bytes(state.params), shard_bytes(state.opt_state)
  figures = dict(
      topology=topology.name, chips=topology.chips, hosts=hosts,
      device_kind=topology.devices[0].device_kind, mesh=dict(exp.mesh.shape), rows=rows,
      length=length, target_length=targets, tokens_per_step=rows * targets, rows_note=exp.rows_note(hosts),
      params_bytes=params, optimizer_bytes=optimizer, batch_bytes=shard_bytes(batch),
      other_state_bytes=shard_bytes(state) - params - optimizer,
      hbm_bytes=topology.chip.hbm_bytes, peak_flops=topology.chip.peak_bf16_flops,
      model_flops_per_step=float(rows * train_flops(config.model, length, targets)))
  start = time.perf_counter()
  with captured_stderr() as log:
    try:
      compiled = exp.train_step.lower(state, batch).compile()
    except jax.errors.JaxRuntimeError as e:
      if not is_out_of_memory(e):
        raise
      compiled, oom = None, parse_out_of_memory(e)
  figures.update(compile_s=time.perf_counter() - start, xla_warnings=tuple(log.notable()))
  if compiled is None:
    held = shard_bytes(state) + figures["batch_bytes"]
    return StepPlan(**figures, temp_bytes=oom.temp_bytes or oom.used_bytes - held,
                    bytes_per_chip=oom.used_bytes or held + oom.temp_bytes, program_bytes=None,
                    argument_bytes=None, output_bytes=None, alias_bytes=None, flops_per_chip=None,
                    bytes_accessed_per_chip=None, estimate=None, oom=oom)
  memory, cost = compiled.memory_analysis(), compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost  # older jax: one dict per program
  note = unestimated(config.train.microbatches)
  total = (memory.argument_size_in_bytes + memory.output_size_in_bytes - memory.alias_size_in_bytes
           + memory.temp_size_in_bytes + memory.generated_code_size_in_bytes)
  return StepPlan(
      **figures, temp_bytes=memory.temp_size_in_bytes,
      program_bytes=memory.generated_code_size_in_bytes,
      argument_bytes=memory.argument_size_in_bytes, output_bytes=memory.output_size_in_bytes,
      alias_bytes=memory.alias_size_in_bytes, bytes_per_chip=total,
      flops_per_chip=float(cost["flops"]), bytes_accessed_per_chip=float(cost["bytes accessed"]),
      estimate_note=note,
      estimate=None if note else roofline(cost["flops"], cost["bytes accessed"], topology.chip,
                                          figures["model_flops_per_step"] / topology.chips))
