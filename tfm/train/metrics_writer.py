"""Training metrics to the console and to the run's trackers (train.trackers), from the lead host.

The trackers (tfm/train/trackers/__init__.py: TensorBoard's event files in WORKDIR/tensorboard by default,
MLflow, W&B) get every numeric figure as `prefix/name` at its step; strings (an ETA, a BLEU
signature) go to the console only.
"""

from __future__ import annotations

import sys
from typing import Mapping

import jax

from tfm.train import trackers as trackers_lib


class MetricsWriter:
  """write(step, {name: float}, prefix) -> one console line and each tracker's `prefix/name`.

  Train lines read '[train] step 500/1500 (33%) | loss ...' when total_steps is given. name: a
  stack member's (tfm/train/stack.py), which tags its lines, '[train base-s1] step ...', as the
  stack's runs share the console. config: the run's Config (its train.trackers, and the params the
  trackers record); None: TensorBoard alone. A context manager: an exception closes the trackers'
  runs as failed."""

  def __init__(self, workdir: str, stream=None, total_steps: int | None = None,
               name: str | None = None, config=None):
    from tfm.train.config import TrainConfig  # pylint: disable=import-outside-toplevel
    self.name = name
    self.lead = jax.process_index() == 0
    self.stream = stream or sys.stdout  # looked up now, not when the module was imported
    self.total_steps = total_steps
    train = TrainConfig() if config is None else config.train
    self.trackers = trackers_lib.Trackers([], self.stream)
    if self.lead:
      self.trackers = trackers_lib.open_run(
          train, workdir, None if config is None else trackers_lib.flat_params(config.to_dict()),
          self.stream)
    self.tensorboard = self.trackers.tensorboard  # the EventWriter, or None

  def write(self, step: int, scalars: Mapping[str, float], prefix: str = "train") -> None:
    if not self.lead:
      return
    self.trackers.metrics(step, {f"{prefix}/{name}": value for name, value in scalars.items()
                                 if isinstance(value, (int, float))})  # strings: console only
    text = " | ".join(f"{name} {_format(value)}" for name, value in scalars.items())
    where = f"{step}" if prefix != "train" or not self.total_steps else (
        f"{step}/{self.total_steps} ({100 * step // self.total_steps}%)")
    tag = prefix if self.name is None else f"{prefix} {self.name}"
    print(f"[{tag}] step {where} | {text}", file=self.stream, flush=True)

  def artifact(self, path, folder: str = "") -> None:
    """Keeps a file of the workdir (curves.png) with the trackers' runs (lead host)."""
    if self.lead:
      self.trackers.artifact(path, folder)

  def sync(self) -> None:
    """Flushes the events and copies them to a remote workdir now (lead host)."""
    self.trackers.sync()

  def text(self, message: str) -> None:
    if self.lead:
      print(message, file=self.stream, flush=True)

  def close(self, ok: bool = True) -> None:
    trackers, self.trackers = self.trackers, trackers_lib.Trackers([], self.stream)
    trackers.close(ok)

  def __enter__(self) -> "MetricsWriter":
    return self

  def __exit__(self, exc_type, exc, tb) -> None:
    self.close(ok=exc_type is None)


def _format(value) -> str:
  if isinstance(value, (int, str)):
    return str(value)
  if value != 0 and (abs(value) < 1e-2 or abs(value) >= 1e5):
    return f"{value:.3e}"
  return f"{value:.4f}"
