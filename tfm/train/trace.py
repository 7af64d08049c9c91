"""train.profile_steps = (a, b): a `jax.profiler` trace of steps a+1..b, viewable in TensorBoard.

The trace goes to WORKDIR/tensorboard (TensorBoard's profile plugin reads it from there). It starts
before step a+1 is dispatched and stops once step b's state is computed. A run resumed inside the
window (a < start < b) would trace only part of it, so it traces nothing and says so; a run that
leaves the loop inside the window (a preemption, an error) stops the trace it started, and the
line it writes names the steps the trace holds.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

import jax

from tfm import storage


class ProfileTrace:
  """Used as `with ProfileTrace(train.profile_steps, start, workdir, writer.text) as trace:` around
  the steps, calling `trace.before(step)` before dispatching step+1 and `trace.after(step, state)`
  once `step` steps are done."""

  def __init__(self, steps: Sequence[int], start: int, workdir: str, say: Callable[[str], None]):
    self.window = tuple(steps)
    self.dir = os.fspath(storage.path(workdir) / "tensorboard")
    self.say = say
    self.running = False
    if self.window and self.window[0] < start < self.window[1]:
      self.say(f"tfm: train.profile_steps={self.window}: this run resumed at step {start}, "
               "inside the window, so it writes no trace")

  def __enter__(self) -> ProfileTrace:
    return self

  def before(self, step: int) -> None:
    if self.window and step == self.window[0]:
      jax.profiler.start_trace(self.dir)
      self.running, self.last = True, step

  def after(self, step: int, state) -> None:
    self.last = step
    if self.running and step == self.window[1]:
      jax.block_until_ready(state)
      self._stop(step)

  def _stop(self, step: int) -> None:
    jax.profiler.stop_trace()
    self.running = False
    self.say(f"tfm: profiler trace of steps {self.window[0] + 1}-{step} in {self.dir}")

  def __exit__(self, *exc) -> None:
    if self.running:  # left the loop inside the window: its trace holds the steps up to here
      self._stop(self.last)
