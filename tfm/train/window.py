"""A log window: the train steps since the last log line, summarized when it ends.

Its per-step metrics stay on the device until the window ends (fetching them is the loop's one
host sync). Its rates (tokens/s, s/step, MFU) cover the steps it timed: the first step of a process
compiles the train step, so its metrics are in the window but its time and FLOPs are not.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np

from tfm.train import flops as flops_lib
from tfm.train.step import check_nonfinite


def summary(window: list[dict], seconds: float, timed: int) -> dict[str, float]:
  """Per-window figures from the fetched per-step metrics; the rates (tokens/s, s/step) from its
  last `timed` steps, which took `seconds` (none when 0: a window of the compiling step alone).
  Losses, accuracy and gradient norm are means over the applied steps (train.nonfinite='skip'
  leaves out a non-finite step, counted in nonfinite_count; NaN when none was applied)."""
  tokens = lambda steps: sum(float(m["tokens"]) for m in steps)
  applied = [m for m in window if not int(m["nonfinite"])]
  mean = lambda k: float(np.mean([float(m[k]) for m in applied])) if applied else float("nan")
  figures = dict(loss=mean("loss"), nll=mean("nll"), perplexity=float(np.exp(mean("nll"))),
                 accuracy=mean("accuracy"), grad_norm=mean("grad_norm"),
                 learning_rate=float(window[-1]["learning_rate"]), tokens=int(tokens(window)))
  if timed:
    figures.update(target_tokens_per_s=tokens(window[len(window) - timed:]) / seconds,
                   step_s=seconds / timed)
  return {**figures, "nonfinite_count": int(window[-1]["nonfinite_count"])}


class Window:
  """The steps since the last log line: `add` each step's metrics, `end` the window at a log step
  (or before an evaluation or a save), `restart` its clock once the work between windows is done.

  members: a stack's member count (tfm/train/stack.py): each metric is [members], and `end`
  summarizes each member's own; None: one run. Either way `end` gives a list, a summary a run.
  A stack's rates are each member's own tokens over the shared step time, its MFU the stack's (all
  members' FLOPs: `add` takes the step's)."""

  def __init__(self, *, devices: int, peak: float | None, members: int | None = None):
    self.devices, self.peak, self.members = devices, peak, members  # peak None: no MFU
    self.metrics: list[Any] = []
    self.flops = 0  # model FLOPs of the timed steps
    self.untimed = 0  # steps at the window's start whose time is not in it (the compiling step)
    self.start = time.perf_counter()

  def add(self, metrics, flops: int) -> None:
    """A timed step's metrics (device arrays) and model FLOPs."""
    self.metrics.append(metrics)
    self.flops += flops

  def add_compiled(self, metrics) -> None:
    """The step that compiled the train step: its metrics, not its time; the clock starts now."""
    self.metrics.append(metrics)
    self.untimed, self.flops = 1, 0
    self.start = time.perf_counter()

  def end(self, step: int, nonfinite: str) -> tuple[list[dict[str, float]], int, float]:
    """Fetches the metrics of the window that ends at `step`, checks each step's update against
    train.nonfinite, and empties the window; returns (a summary a run, timed steps, their
    seconds)."""
    fetched = jax.device_get(self.metrics)  # the one host sync: this window's metrics
    runs = [fetched] if self.members is None else [
        [{k: v[i] for k, v in m.items()} for m in fetched] for i in range(self.members)]
    seconds, timed = time.perf_counter() - self.start, len(fetched) - self.untimed
    utilisation = (flops_lib.mfu(self.flops / timed, seconds / timed, self.devices, self.peak)
                   if timed else None)
    summaries = []
    for window in runs:
      for offset, m in enumerate(window):
        check_nonfinite(m, step - len(window) + offset + 1, nonfinite)
      figures = summary(window, seconds, timed)
      if utilisation is not None:
        figures["mfu"] = utilisation
      summaries.append(figures)
    self.metrics, self.flops, self.untimed = [], 0, 0
    return summaries, timed, seconds

  def restart(self) -> None:
    """The next window's clock starts now (after the evaluations and saves between windows)."""
    self.start = time.perf_counter()
