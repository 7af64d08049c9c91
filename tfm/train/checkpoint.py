"""Orbax checkpoints: the train state plus a JSON item (the data iterator's state), the last K kept.

Layout of a workdir:
  workdir/config.json                 the resolved experiment config (write_config)
  workdir/checkpoints/<step>/state    TrainState (sharded arrays, written asynchronously)
  workdir/checkpoints/<step>/data     JSON, e.g. the data iterator state

Restoring takes an abstract state whose leaves are jax.ShapeDtypeStruct with shardings (from
tfm.train.state.abstract_train_state), so each host reads only its shards and a sharded state comes
back sharded. If the latest checkpoint cannot be read (a partial write, a corrupt file) the previous
one is used, with a warning, and the unreadable step directory is renamed `<step>.unreadable` so that
training can write that step again. If none can be read, nothing is renamed and restore raises: that
is a changed model or optimizer config, not a torn write.
"""

from __future__ import annotations

import json
import os
import logging
from typing import Any

import jax
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils

log = logging.getLogger(__name__)

STATE, DATA = "state", "data"


def checkpoint_dir(workdir: str | epath.Path) -> epath.Path:
  """workdir/checkpoints, made absolute (Orbax refuses relative paths; gs:// paths are absolute)."""
  path = epath.Path(workdir)
  if not path.is_absolute():
    path = epath.Path(os.path.abspath(os.fspath(path)))
  return path / "checkpoints"


def write_config(workdir: str | epath.Path, config: dict) -> epath.Path:
  """Writes the resolved config (plain values) as workdir/config.json (process 0 only)."""
  path = epath.Path(workdir) / "config.json"
  if jax.process_index() == 0:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
  return path


def read_config(workdir: str | epath.Path) -> dict:
  """The config saved by write_config, as plain values (tuples come back as lists)."""
  return json.loads((epath.Path(workdir) / "config.json").read_text())


def available_steps(workdir: str | epath.Path) -> list[int]:
  """Steps of the finished checkpoints in workdir, ascending (for checkpoint averaging)."""
  return sorted(ocp.utils.checkpoint_steps(checkpoint_dir(workdir)))


class Checkpointer:
  """Saves and restores (TrainState, data state) under workdir/checkpoints.

  keep: how many of the latest checkpoints to keep (config key train.keep_checkpoints).
  async_save: save in a background thread; `wait()` blocks until the last save is on disk.
  Every process must call save/restore (Orbax coordinates the hosts).
  """

  def __init__(self, workdir: str | epath.Path, keep: int, async_save: bool = True):
    if keep < 1:
      raise ValueError(f"config key train.keep_checkpoints: expected >= 1, got {keep}")
    self.directory = checkpoint_dir(workdir)
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=async_save,
                                           create=True)
    self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=(STATE, DATA))

  def save(self, step: int, state: Any, data_state: dict | None = None, force: bool = True) -> bool:
    """Starts saving `state` and the JSON-serialisable `data_state` as checkpoint `step`.

    Returns whether a save was started: False if `step` is already saved (e.g. a final save right
    after a periodic one). The state may be passed to the next (donating) train step right away: the
    checkpoint holds the values at the time of this call.
    """
    if int(step) in self.manager.all_steps():
      return False
    args = ocp.args.Composite(**{STATE: ocp.args.StandardSave(state),
                                 DATA: ocp.args.JsonSave(data_state or {})})
    return self.manager.save(int(step), args=args, force=force)

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    """Steps currently on disk (finished saves only), ascending."""
    return sorted(self.manager.all_steps())

  def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, dict, int] | None:
    """Restores (state, data_state, step) onto the shardings of `abstract_state`.

    step None: the latest readable checkpoint, None if there is no checkpoint at all. Unreadable newer
    ones are skipped with a warning and set aside; if no checkpoint can be restored (e.g. the model
    config changed) this raises and renames nothing. An explicit step is restored or raises.
    """
    self.wait()
    if step is not None:
      return self._restore(abstract_state, step) + (step,)
    failed = []
    for candidate in sorted(self.all_steps(), reverse=True):
      try:
        restored = self._restore(abstract_state, candidate)
      except Exception as error:  # noqa: BLE001 -- an unreadable checkpoint falls back to older ones
        log.warning("checkpoint %s/%d cannot be restored (%s: %s); trying the previous one",
                    self.directory, candidate, type(error).__name__, error)
        failed.append((candidate, error))
        continue
      for bad, _ in failed:
        self._set_aside(bad)
      return restored + (candidate,)
    if failed:
      step, error = failed[0]
      raise RuntimeError(f"no checkpoint in {self.directory} can be restored into this train state "
                         f"(steps {[s for s, _ in failed]}); the latest, {step}, fails with: "
                         f"{type(error).__name__}: {error}") from error
    return None

  def _restore(self, abstract_state: Any, step: int) -> tuple[Any, dict]:
    args = ocp.args.Composite(**{STATE: ocp.args.StandardRestore(abstract_state),
                                 DATA: ocp.args.JsonRestore()})
    restored = self.manager.restore(step, args=args)
    return restored[STATE], dict(restored[DATA] or {})

  def _set_aside(self, step: int) -> None:
    """Renames an unreadable step directory so a later save of the same step does not collide."""
    if jax.process_index() == 0:
      path = self.directory / str(step)
      if path.exists():
        path.rename(self.directory / f"{step}.unreadable")
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices(f"tfm_checkpoint_set_aside_{step}")
    self.manager.reload()

  def wait(self) -> None:
    """Blocks until pending asynchronous saves are finished."""
    self.manager.wait_until_finished()

  def close(self) -> None:
    self.manager.close()


def read_data_state(workdir: str | epath.Path, step: int) -> dict:
  """The data-iterator state saved with checkpoint `step` (a JSON item; no arrays are read)."""
  with ocp.Checkpointer(ocp.JsonCheckpointHandler()) as checkpointer:
    return dict(checkpointer.restore(checkpoint_dir(workdir) / str(step) / DATA) or {})


def restore_params(workdir: str | epath.Path, step: int, abstract_params: Any) -> Any:
  """Only the parameters of checkpoint `step`, onto the shardings of `abstract_params` (a tree of
  jax.ShapeDtypeStruct, e.g. abstract_state.params) -- for checkpoint averaging and evaluation."""
  path = checkpoint_dir(workdir) / str(step) / STATE
  target = {"params": abstract_params}
  restore_args = ocp.checkpoint_utils.construct_restore_args(target)
  with ocp.PyTreeCheckpointer() as checkpointer:
    restored = checkpointer.restore(path, args=ocp.args.PyTreeRestore(
        item=target, restore_args=restore_args, partial_restore=True))
  return restored["params"]
