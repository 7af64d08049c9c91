"""Experiment trackers: where a run's figures go besides the console (train.trackers).

The package owns every tracker: this interface, common.py (their state files and client imports),
tensorboard.py (with events.py, the event files it writes and `tfm plot` reads), mlflow.py,
wandb.py (with wandb_files.py, what W&B's offline files hold).

One interface, which training (tfm/train/metrics_writer.py), `tfm eval` and `tfm sweep` write
through, on the lead host only:

  params({key: value})          the run's config, flattened ('train.steps': 100); once a run
  tags({name: value})           labels (a sweep's row, group, seed)
  metrics(step, {tag: value})   figures at a step: 'train/loss', 'dev/perplexity', 'sweep/bleu'
  artifact(path, folder)        a file kept with the run (curves.png; eval files under 'eval')
  sync(); close(ok)

Implementations: 'tensorboard' (WORKDIR/tensorboard's event files, as tfm always wrote them: the
metrics only), 'mlflow' (tfm/train/trackers/mlflow.py) and 'wandb' (tfm/train/trackers/wandb.py).
Each tfm run is one tracker run, its id kept in WORKDIR/trackers/<tracker>.json, so a resumed
run, its `tfm eval` and its sweep's final figures continue the same run. A resumed run logs each
tag only at steps beyond the last one that tag reached (a run killed after its last checkpoint
repeats those steps: TensorBoard keeps the value written last, MLflow and W&B the first, equal in
a bit-exact resume but for the timings).

A tracker that cannot be reached stops the run at its start (check(), before any data, compilation
or file), in one line naming the URI and what to set; one that fails mid-run keeps the figures
and tries again at the next log, saying so once, and never stops the training.

Under `tfm sweep`, WORKDIR/trackers/sweep.json (written by the sweep before the run starts) names
the sweep and the run's row, group and seed: the MLflow experiment (W&B project) is the sweep's,
and these are the run's tags.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from typing import Any, Mapping, Protocol

from etils import epath

from tfm import storage
from tfm.train.trackers.common import read_state, write_state

SWEEP_FILE = "sweep.json"
DEFAULT_EXPERIMENT = "tfm"


class Tracker(Protocol):
  """One tracker's run (see the module's docstring)."""
  name: str

  def params(self, values: Mapping[str, Any]) -> None: ...
  def tags(self, values: Mapping[str, str]) -> None: ...
  def metrics(self, step: int, values: Mapping[str, float]) -> None: ...
  def artifact(self, path: str, folder: str = "") -> None: ...
  def sync(self) -> None: ...
  def close(self, ok: bool = True) -> None: ...


def write_sweep_tags(workdir: str, sweep: str, row: str | None, group: str, seed: int) -> None:
  """What `tfm sweep` tells a run's trackers before the run starts (WORKDIR/trackers/sweep.json)."""
  write_state(workdir, SWEEP_FILE[:-len(".json")],
              {"sweep": sweep, "row": row or "", "group": group, "seed": str(seed)})


def run_identity(train, workdir: str, tracker: str) -> tuple[str, str, dict[str, str]]:
  """(experiment or project, run name, tags) of the run in `workdir`: the run's name is the
  workdir's; the experiment train.tracker_experiment, else the sweep's, else $MLFLOW_EXPERIMENT_NAME
  (mlflow) or $WANDB_PROJECT (wandb), else 'tfm'."""
  sweep = read_state(workdir, "sweep")
  env = {"mlflow": "MLFLOW_EXPERIMENT_NAME", "wandb": "WANDB_PROJECT"}[tracker]
  experiment = (train.tracker_experiment or sweep.get("sweep") or os.environ.get(env)
                or DEFAULT_EXPERIMENT)
  name = os.path.basename(os.path.normpath(os.fspath(workdir)))
  tags = {"workdir": os.fspath(workdir), **{k: sweep[k] for k in ("sweep", "row", "group", "seed")
                                             if k in sweep}}
  return experiment, name, tags


def flat_params(config_dict: Mapping[str, Any]) -> dict[str, Any]:
  """A config (Config.to_dict()) as {'section.key': value}, tuples as lists (a tracker that keeps
  text writes lists and mappings as JSON: param_text)."""
  from tfm.config import flatten  # pylint: disable=import-outside-toplevel
  return {key: json.loads(json.dumps(value, default=str))
          for key, value in sorted(flatten(config_dict).items())}


def check(train, workdir: str) -> None:
  """Raises ValueError in one line when a tracker of train.trackers cannot be used (a package
  missing, no URI, a server that does not answer): called at the start of a run, before anything
  is prepared, compiled or written."""
  for name in train.trackers:
    if name == "mlflow":
      from tfm.train.trackers import mlflow  # pylint: disable=import-outside-toplevel
      mlflow.check(train)
    elif name == "wandb":
      from tfm.train.trackers import wandb  # pylint: disable=import-outside-toplevel
      wandb.check(train)


class Trackers:
  """The trackers of one run, written together; `tensorboard` is the event writer (None without
  the tensorboard tracker, or without tensorboardX)."""

  def __init__(self, trackers: list, stream=None):
    self.all = trackers
    self.stream = stream or sys.stdout
    self.tensorboard = next((t.events for t in trackers if t.name == "tensorboard"), None)

  def params(self, values: Mapping[str, Any]) -> None:
    for t in self.all:
      t.params(values)

  def tags(self, values: Mapping[str, str]) -> None:
    for t in self.all:
      t.tags(values)

  def metrics(self, step: int, values: Mapping[str, float]) -> None:
    for t in self.all:
      t.metrics(step, values)

  def artifact(self, path, folder: str = "") -> None:
    """Keeps the file `path` (any storage) with each tracker's run, under `folder`."""
    if not any(t.name != "tensorboard" for t in self.all):
      return
    local, staged = os.fspath(path), None
    if storage.is_remote(path):  # the trackers upload local files
      staged = tempfile.mkdtemp(prefix="tfm-artifact-")
      local = os.path.join(staged, epath.Path(path).name)
      with open(local, "wb") as f:
        f.write(epath.Path(path).read_bytes())
    try:
      for t in self.all:
        t.artifact(local, folder)
    finally:
      if staged:
        shutil.rmtree(staged, ignore_errors=True)

  def sync(self) -> None:
    for t in self.all:
      t.sync()

  def close(self, ok: bool = True) -> None:
    for t in self.all:
      t.close(ok)


def open_run(train, workdir: str, params: Mapping[str, Any] | None = None, stream=None,
             only: tuple[str, ...] | None = None) -> Trackers:
  """The trackers train.trackers names for the run in `workdir` (lead host), each run created or
  continued; params: the run's config (flat_params) to record, or None (a later command: `tfm
  eval`, the sweep's final figures). only: a subset of the names (the others are not opened)."""
  stream = stream or sys.stdout
  opened = []
  try:
    for name in train.trackers:
      if only is not None and name not in only:
        continue
      if name == "tensorboard":
        from tfm.train.trackers import tensorboard  # pylint: disable=import-outside-toplevel
        opened.append(tensorboard.TensorBoard(workdir, stream))
        continue
      experiment, run_name, tags = run_identity(train, workdir, name)
      if name == "mlflow":
        from tfm.train.trackers.mlflow import MLflow  # pylint: disable=import-outside-toplevel
        opened.append(MLflow(train, workdir, experiment, run_name, tags, stream))
      else:
        from tfm.train.trackers.wandb import WandB  # pylint: disable=import-outside-toplevel
        opened.append(WandB(train, workdir, experiment, run_name, tags, stream))
      if params is not None:
        opened[-1].params(params)
  except BaseException:
    for t in opened:
      t.close(ok=False)
    raise
  return Trackers(opened, stream)


def record_later(workdir: str, metrics: Mapping[str, float] | None = None, step: int = 0,
                 files: tuple = (), folder: str = "", tags: Mapping[str, str] | None = None,
                 stream=None) -> None:
  """What a command after training adds to the run in `workdir` (its config.json's trackers,
  TensorBoard aside: `tfm eval`'s files, the sweep's final figures and tags)."""
  from tfm.train.config import train_from_mapping  # pylint: disable=import-outside-toplevel
  saved = storage.path(workdir) / "config.json"
  if not saved.exists():  # no run trained there
    return
  train = train_from_mapping(storage.read_json(saved)["train"])
  if not any(n != "tensorboard" for n in train.trackers):
    return
  trackers = open_run(train, workdir, stream=stream,
                      only=tuple(n for n in train.trackers if n != "tensorboard"))
  ok = False
  try:
    if tags:
      trackers.tags(tags)
    if metrics:
      trackers.metrics(step, metrics)
    for path in files:
      trackers.artifact(path, folder)
    ok = True
  finally:
    trackers.close(ok)
