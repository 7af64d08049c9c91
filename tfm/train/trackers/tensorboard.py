"""The 'tensorboard' tracker: scalars in WORKDIR/tensorboard's event files (events.py beside it).

What tfm has always written: the metrics only (the config, tags and files are the workdir's own:
config.json, curves.png, the eval files; a sweep's HParams records are tfm/sweep/hparams.py's).
Event files go to workdir/tensorboard on any storage (tfm.storage.Staged copies them to a gs://
workdir at most every 30 s and at the end). Where tensorboardX (the event files' writer) is not
installed, as on a GPU node with a preinstalled Python (docs/gpu.md), nothing is written and one
line says so.
"""

from __future__ import annotations

from typing import Any, Mapping

from etils import epath

from tfm import storage
from tfm.train.trackers.events import EventWriter


class TensorBoard:
  """events: the EventWriter (None without tensorboardX)."""
  name = "tensorboard"

  def __init__(self, workdir: str, stream):
    self.events = None
    staged = storage.Staged(epath.Path(workdir) / "tensorboard")
    try:
      self.events = EventWriter(staged.local)
    except ModuleNotFoundError as e:
      if e.name is None or e.name.split(".")[0] != "tensorboardX":
        raise
      staged.close()
      print("[metrics] tensorboardX is not installed: metrics go to the console only (no "
            "TensorBoard event files, no curves.png)", file=stream, flush=True)
    else:
      self._staged = staged

  def params(self, values: Mapping[str, Any]) -> None:
    del values  # the workdir's config.json

  def tags(self, values: Mapping[str, str]) -> None:
    del values

  def metrics(self, step: int, values: Mapping[str, float]) -> None:
    if self.events is not None:
      self.events.scalars(step, values)
      self._staged.sync()

  def artifact(self, path: str, folder: str = "") -> None:
    del path, folder  # already in the workdir

  def sync(self) -> None:
    """Flushes the events and copies them to a remote workdir now."""
    if self.events is not None:
      self._staged.sync(force=True)

  def close(self, ok: bool = True) -> None:
    del ok
    if self.events is not None:
      self.events.close()
      self._staged.close()
