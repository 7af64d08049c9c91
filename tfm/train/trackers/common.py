"""What the trackers (tfm/train/trackers/: the interface and each tracker's module) share: their
state files in WORKDIR/trackers/ (run ids, the steps already sent, a sweep's tags), params as
text, and the import of a tracker's client package with its one-line error."""

from __future__ import annotations

import json
from typing import Any, Mapping

from etils import epath

from tfm import storage

DIRECTORY = "trackers"  # WORKDIR/trackers


def directory(workdir: str) -> epath.Path:
  return storage.path(workdir) / DIRECTORY


def read_state(workdir: str, name: str) -> dict:
  """WORKDIR/trackers/<name>.json ({} where absent)."""
  path = directory(workdir) / f"{name}.json"
  return storage.read_json(path) if path.exists() else {}


def write_state(workdir: str, name: str, state: Mapping[str, Any]) -> None:
  storage.write_json(directory(workdir) / f"{name}.json", dict(state))


def param_text(value: Any) -> str:
  """A param as text: str() of a scalar ('0.1', 'True', 'None'), JSON of a list or mapping."""
  return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def client_package(name: str, module: str = ""):
  """The tracker's client package `name` (or its `module`), imported; ValueError in one line where
  it is not installed (a missing dependency of the package itself still raises as it is)."""
  import importlib  # pylint: disable=import-outside-toplevel
  try:
    return importlib.import_module(module or name)
  except ModuleNotFoundError as e:
    if e.name is None or e.name.split(".")[0] != name:
      raise
    raise ValueError(f"train.trackers names {name}, but the {name} package is not installed: "
                     f"pip install 'tfm[{name}]' (or drop {name} from train.trackers)") from None
