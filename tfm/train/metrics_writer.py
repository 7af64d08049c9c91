"""Training metrics to the console and to TensorBoard event files, from the lead host only.

Event files go to workdir/tensorboard, on any storage (tfm.storage.Staged copies them to a gs://
workdir at most every 30 s and at the end).
"""

from __future__ import annotations

import sys
from typing import Mapping

import jax
from etils import epath

from tfm import storage


class MetricsWriter:
  """write(step, {name: float}, prefix) -> one console line and TensorBoard scalars `prefix/name`."""

  def __init__(self, workdir: str, stream=sys.stdout):
    self.lead = jax.process_index() == 0
    self.stream = stream
    self.tensorboard = None
    if self.lead:
      from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
      self._events = storage.Staged(epath.Path(workdir) / "tensorboard")
      self.tensorboard = SummaryWriter(self._events.local)

  def write(self, step: int, scalars: Mapping[str, float], prefix: str = "train") -> None:
    if not self.lead:
      return
    for name, value in scalars.items():
      if isinstance(value, (int, float)):  # strings (e.g. a BLEU signature) go to the console only
        self.tensorboard.add_scalar(f"{prefix}/{name}", value, step)
    self.tensorboard.flush()
    self._events.sync()
    text = " | ".join(f"{name} {_format(value)}" for name, value in scalars.items())
    print(f"[{prefix}] step {step} | {text}", file=self.stream, flush=True)

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
