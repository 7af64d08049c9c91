"""Files on any storage epath reaches: local paths, gs://, s3://, ... (the lowest layer of tfm).

Every file tfm writes to a user path (workdir, vocabulary, outputs) goes through these helpers or
through Orbax, never through `open` or `os.path`: a workdir on gs:// must work like a local one.
Writes are atomic, so a reader (another host, a restarted run) sees the old file or the new one,
never half of one: a local file is written under a temporary name beside the target and renamed
over it; an object store (gs://, s3://) makes an object visible only once its upload is complete,
so there the object is written in place (a rename there is a copy and a delete, not atomic).

On Google Cloud, epath reads gs:// with TensorFlow's gfile when TensorFlow is installed (as it is
here) and with gcsfs otherwise; EPATH_USE_TF=false selects gcsfs, which also honours
STORAGE_EMULATOR_HOST (the tests run against a local GCS emulator that way).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from typing import Any

from etils import epath

PathLike = str | os.PathLike


def path(value: PathLike) -> epath.Path:
  """An epath for a user path; a relative local path is made absolute (Orbax needs that)."""
  p = epath.Path(value)
  return p if p.is_absolute() else epath.Path(os.path.abspath(os.fspath(p)))


def is_remote(value: PathLike) -> bool:
  """True for an object store's URL (gs://bucket/..., s3://...), False for a local path."""
  return "://" in os.fspath(value)


def write_atomically(target: PathLike, data: bytes | str) -> epath.Path:
  """Writes `data` (str: UTF-8) to `target` whole: an object store's upload in place, a local file
  through a temporary file beside it, renamed over the target. Returns the target's epath."""
  target = epath.Path(target)
  data = data.encode("utf-8") if isinstance(data, str) else data
  if is_remote(target):  # one upload, visible whole or not at all
    target.write_bytes(data)
    return target
  target.parent.mkdir(parents=True, exist_ok=True)
  tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
  try:
    tmp.write_bytes(data)
    tmp.replace(target)
  except BaseException:  # e.g. the target is a directory: nothing half written stays behind
    tmp.unlink(missing_ok=True)
    raise
  return target


def write_json(target: PathLike, value: Any, **kwargs) -> epath.Path:
  """Writes `value` as JSON (indent=1 unless given) atomically."""
  kwargs.setdefault("indent", 1)
  return write_atomically(target, json.dumps(value, **kwargs) + "\n")


def read_json(source: PathLike) -> Any:
  return json.loads(epath.Path(source).read_text(encoding="utf-8"))


class Staged:
  """A local directory standing for `target` (any epath), for writers that need local files.

  For a local target the directory is the target itself. For a remote one (gs://...) it is a
  local temporary directory whose files are copied to the target, whole and atomically, when
  sync() is called at least every_s seconds after the last copy, and on close().
  """

  def __init__(self, target: PathLike, every_s: float = 30.0):
    self.target = epath.Path(target)
    self.remote = is_remote(self.target)
    self.every_s = every_s
    self.local = (tempfile.mkdtemp(prefix="tfm-staged-") if self.remote
                  else os.fspath(self.target))
    os.makedirs(self.local, exist_ok=True)
    self._synced = time.monotonic()

  def sync(self, force: bool = False) -> None:
    if not self.remote or not (force or time.monotonic() - self._synced >= self.every_s):
      return
    for name in sorted(os.listdir(self.local)):
      with open(os.path.join(self.local, name), "rb") as f:  # our own staging file
        write_atomically(self.target / name, f.read())
    self._synced = time.monotonic()

  def close(self) -> None:
    self.sync(force=True)
    if self.remote:
      shutil.rmtree(self.local, ignore_errors=True)
