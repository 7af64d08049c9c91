"""A GPU queue command's settings (experiments/gpu_queue.py's flags, read once by its main) and its
log: what the parts of the queue (tables, on_node, import_call, prepare_call) share."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STOP_SAFETY_S = 15  # beyond the table's stop seconds: the jobs' SIGTERM saves, the packing
PLAN_MARGIN_S = 5  # planned jobs end this much before the stop
SLACK = 0.05  # a table job is planned 5% longer than the table predicts (none with --quick)


@dataclasses.dataclass(frozen=True)
class Options:
  """The command's flags (experiments/gpu_queue.py defines each, with its default), and the
  monotonic and wall clocks at the process's start: a call's deadline counts from `start`."""
  start: float
  epoch0: float
  deadline: float
  quick: bool
  jobs: tuple[str, ...]
  rows: tuple[str, ...] | None
  slots: int | None
  seconds: Path
  results: Path
  bundles: Path
  carry_dir: Path
  root: Path
  set: tuple[str, ...]
  mps: str
  platform_choices: Path

  def bundle(self, name: str) -> Path:
    """The bundle folder `name` (bundle_table3, bundle_positions, ...)."""
    return self.bundles.resolve() / name

  def slot_count(self) -> int:
    """Jobs at once on the GPU: --slots, else 4 (2 with --quick)."""
    return self.slots or (2 if self.quick else 4)


class Log:
  """The queue's lines, each with the seconds since the process started; printed as they come and
  kept for OUT/queue.txt."""

  def __init__(self, start: float):
    self.start, self.lines = start, []

  def say(self, message: str) -> None:
    line = f"[queue {time.monotonic() - self.start:6.1f} s] {message}"
    self.lines.append(line)
    print(line, flush=True)
