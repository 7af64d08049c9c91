"""Training metrics to the console and to TensorBoard event files, from the lead host only.

Event files go to workdir/tensorboard, on any storage (tfm.storage.Staged copies them to a gs://
workdir at most every 30 s and at the end). Where tensorboardX (the event files' writer) is not
installed, as on a GPU node with a preinstalled Python (docs/gpu.md), the metrics go to the console
only, and one line says so.
"""

from __future__ import annotations

import sys
from typing import Mapping

import jax
from etils import epath

from tfm import storage
from tfm.train.events import EventWriter


class MetricsWriter:
  """write(step, {name: float}, prefix) -> one console line and TensorBoard scalars `prefix/name`.

  Train lines read '[train] step 500/1500 (33%) | loss ...' when total_steps is given; strings (an
  ETA, a BLEU signature) go to the console only. name: a stack member's (tfm/train/stack.py),
  which tags its lines, '[train base-s1] step ...', as the stack's runs share the console."""

  def __init__(self, workdir: str, stream=None, total_steps: int | None = None,
               name: str | None = None):
    self.name = name
    self.lead = jax.process_index() == 0
    self.stream = stream or sys.stdout  # looked up now, not when the module was imported
    self.total_steps = total_steps
    self.tensorboard = None
    if self.lead:
      events = storage.Staged(epath.Path(workdir) / "tensorboard")
      try:
        self.tensorboard = EventWriter(events.local)
      except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] != "tensorboardX":
          raise
        events.close()
        print("[metrics] tensorboardX is not installed: metrics go to the console only (no "
              "TensorBoard event files, no curves.png)", file=self.stream, flush=True)
      else:
        self._events = events

  def write(self, step: int, scalars: Mapping[str, float], prefix: str = "train") -> None:
    if not self.lead:
      return
    if self.tensorboard is not None:
      self.tensorboard.scalars(step, {f"{prefix}/{name}": value for name, value in scalars.items()
                                      if isinstance(value, (int, float))})  # strings: console only
      self._events.sync()
    text = " | ".join(f"{name} {_format(value)}" for name, value in scalars.items())
    where = f"{step}" if prefix != "train" or not self.total_steps else (
        f"{step}/{self.total_steps} ({100 * step // self.total_steps}%)")
    tag = prefix if self.name is None else f"{prefix} {self.name}"
    print(f"[{tag}] step {where} | {text}", file=self.stream, flush=True)

  def sync(self) -> None:
    """Flushes the events and copies them to a remote workdir now (lead host)."""
    if self.tensorboard is not None:
      self._events.sync(force=True)

  def text(self, message: str) -> None:
    if self.lead:
      print(message, file=self.stream, flush=True)

  def close(self) -> None:
    if self.tensorboard is not None:
      self.tensorboard.close()
      self._events.close()


def _format(value) -> str:
  if isinstance(value, (int, str)):
    return str(value)
  if value != 0 and (abs(value) < 1e-2 or abs(value) >= 1e5):
    return f"{value:.3e}"
  return f"{value:.4f}"
