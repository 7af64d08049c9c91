"""One run per workdir: checks, a lock, the saved config's compatibility, and no litter on failure.

  with Workdir(path) as w:            # refuses a file, an unwritable path, a live run's workdir
    w.check_config(config_dict)       # a resume must be the same model and data
    ...                               # restore or init
    w.commit(config_dict)             # config.json written now, never before the state is known

The lock is workdir/.lock, created exclusively by the lead host with the owner's pid, host name
and start time. A lock whose process is dead (same host) is stale and taken over with a warning;
a live one is an error naming its owner. If the workdir did not exist and the run fails before
`commit`, what the run created is removed again, so a bad input leaves the workdir as it was.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time

import jax
from etils import epath

from tfm import config as config_lib

log = logging.getLogger(__name__)

LOCK = ".lock"
# Keys a resumed run may change; any other difference means another model or other data.
# (data.cache / data.cache_dir / data.num_workers change how batches are made, not which; the
# evaluation sets, their masks' rate and the dev/test files what is evaluated, not what is trained;
# model.layer_norm_grad how the same gradients are computed, and a config.json written before it
# existed lacks it.)
RESUMABLE_PREFIXES = ("train.", "eval.", "mesh.", "data.num_workers", "data.cache",
                      "data.eval_max_examples", "data.eval_mask_rate", "data.eval_sets",
                      "data.dev_files", "data.test_files", "data.data_dir", "data.manual_dir",
                      "data.vocab_dir", "model.layer_norm_grad", "rows", "row", "paper")


def incompatible_keys(saved: dict, new: dict) -> list[str]:
  """Keys whose values differ between two config dicts and that a resume may not change."""
  a, b = ({**config_lib.ADDED_LATER, **config_lib.flatten(c)} for c in (saved, new))
  normal = lambda v: json.loads(json.dumps(v))  # tuples vs lists
  return sorted(k for k in set(a) | set(b) if normal(a.get(k)) != normal(b.get(k))
                and not k.startswith(RESUMABLE_PREFIXES))


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def dead_owner(path) -> dict | None:
  """The owner ({pid, host, since}) of the lock in directory `path` when it is a process of this
  host that is gone (killed before it could remove its lock), else None (no lock, a live owner,
  or another host's, whose processes this host cannot see)."""
  lock = epath.Path(path) / LOCK
  if not lock.exists():
    return None
  held = Workdir._owner(lock)  # pylint: disable=protected-access
  if held.get("host") != socket.gethostname() or _pid_alive(int(held.get("pid", -1))):
    return None
  return held


class Workdir:
  """The lead host's hold on a training workdir (other hosts only check it)."""

  def __init__(self, path: str):
    self.path = epath.Path(path)
    self.lead = jax.process_index() == 0
    self.existed = self.path.exists()
    self.committed = False
    self._lock = None
    if self.existed and not self.path.is_dir():
      raise ValueError(f"--workdir {path}: is a file; expected a directory (new or written by "
                       "tfm train)")

  def __enter__(self) -> "Workdir":
    if self.lead:
      try:
        self.path.mkdir(parents=True, exist_ok=True)
      except OSError as e:
        raise ValueError(f"--workdir {self.path}: cannot be created ({e.strerror or e})") from None
      self._acquire()
    return self

  def _create(self, lock: epath.Path, owner: dict) -> None:
    """Creates the lock file, failing with FileExistsError if it exists (atomically on local
    disks; on object stores, whose writes cannot be exclusive, after a check)."""
    if "://" in os.fspath(lock):
      if lock.exists():
        raise FileExistsError(os.fspath(lock))
      lock.write_text(json.dumps(owner))
      return
    fd = os.open(os.fspath(lock), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    with os.fdopen(fd, "w") as f:
      json.dump(owner, f)

  def _acquire(self) -> None:
    lock = self.path / LOCK
    owner = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%c")}
    for _ in range(2):
      try:
        self._create(lock, owner)
      except FileExistsError:
        held = self._owner(lock)
        if held.get("host") == owner["host"] and not _pid_alive(int(held.get("pid", -1))):
          log.warning("taking over the stale lock of %s (pid %s is gone)", self.path, held.get("pid"))
          lock.unlink(missing_ok=True)
          continue
        raise ValueError(f"--workdir {self.path}: in use by another tfm train (pid {held.get('pid')} "
                         f"on {held.get('host')}, since {held.get('since')}); one run per workdir") \
            from None
      except PermissionError:
        raise ValueError(f"--workdir {self.path}: not writable") from None
      except OSError as e:
        if e.errno in (30,):  # read-only file system
          raise ValueError(f"--workdir {self.path}: not writable ({e.strerror})") from None
        raise
      self._lock = lock
      return
    raise ValueError(f"--workdir {self.path}: could not take its lock")

  @staticmethod
  def _owner(lock: epath.Path) -> dict:
    try:
      return json.loads(lock.read_text())
    except (OSError, ValueError):
      return {}

  def check_config(self, config: dict) -> None:
    """Raises naming the keys if config.json exists and describes another model or other data."""
    path = self.path / "config.json"
    if not path.exists():
      return
    try:
      saved = json.loads(path.read_text())
    except ValueError as e:
      raise ValueError(f"{path}: not valid JSON ({e}); expected the config tfm train wrote; move "
                       "the workdir aside or train into a new --workdir") from None
    bad = incompatible_keys(saved, config)
    if bad:
      flat_saved, flat_new = config_lib.flatten(saved), config_lib.flatten(config)
      shown = "; ".join(f"{k}: {flat_saved.get(k)!r} -> {flat_new.get(k)!r}" for k in bad[:6])
      raise ValueError(f"--workdir {self.path} was trained with another model or data ({shown}); "
                       "its checkpoints cannot continue with this config: use a new --workdir")

  def commit(self, config: dict) -> None:
    """The run is on: write config.json (lead host) and keep what it writes from now on."""
    from tfm.train.checkpoint import write_config  # pylint: disable=import-outside-toplevel
    write_config(self.path, config)
    self.committed = True

  def __exit__(self, exc_type, exc, tb) -> None:
    if not self.lead:
      return
    if self._lock is not None:
      self._lock.unlink(missing_ok=True)
    if exc_type is not None and not self.committed and not self.existed and self.path.exists():
      self.path.rmtree(missing_ok=True)  # leave no half-made workdir behind
