"""Orbax checkpoints: the train state, every host's data-iterator state and their checksums.

The package owns everything a run keeps on disk to resume or to be evaluated from: this module
(save, restore, verify, the config file), compat.py (a checkpoint against a state that differs by
more than shapes: an older tfm, another optimizer or EMA setting), checksums.py (the arrays'
checksums), best.py (the best checkpoint by a dev metric and early stopping).

Layout of a workdir:
  workdir/config.json                   the resolved experiment config (write_config)
  workdir/checkpoints/<step>/state      TrainState (sharded arrays, written asynchronously)
  workdir/checkpoints/<step>/data       JSON: {"process_count": N, "hosts": [state of host 0, ...]}
  workdir/checkpoints/<step>/manifest   JSON: checksums of every array and of the data JSON

Which checkpoints stay: the last `keep` of the periodic series (steps that are multiples of
train.checkpoint_every, and the final step) -- the series `tfm eval` averages -- plus the latest
checkpoint whatever its step. A preemption save is therefore extra: it lets training resume and
is deleted once a later checkpoint exists, so a preempted and resumed run keeps exactly the
checkpoints of an uninterrupted one.

Restoring takes an abstract state whose leaves are jax.ShapeDtypeStruct with shardings (from
tfm.experiment.Experiment.abstract_state), so each host reads only its shards and a sharded state
comes back sharded. Every restore is verified: the arrays' checksums (checksums.py), the
data JSON's SHA-256, and what the caller checks (`accept`, e.g. that the data iterator takes its
state). If the latest checkpoint fails any of these (a torn write, flipped bytes, a bad data state)
the previous one is tried, with one warning each, and the bad step directory is renamed
`<step>.unreadable[.N]` so that training can write that step again. If none can be read, nothing is
renamed and restore raises: that is a changed model or optimizer config, not a torn write.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Callable, Sequence

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils

from tfm import storage
from tfm.train import distributed
from tfm.train.checkpoint import checksums
from tfm.train.checkpoint.compat import (ema_difference, optimizer_difference,
                                         restore_target)

log = logging.getLogger(__name__)

STATE, DATA, MANIFEST = "state", "data", "manifest"


class CheckpointError(ValueError):
  """No checkpoint of a workdir can be used (a user-facing error: one line, no traceback)."""


class ResumeRefused(CheckpointError):
  """A readable checkpoint that this run must not continue from (not a reason to fall back)."""


class CorruptCheckpoint(RuntimeError):
  """A checkpoint whose bytes do not match its manifest."""


def checkpoint_dir(workdir: str | epath.Path) -> epath.Path:
  """workdir/checkpoints, made absolute (Orbax refuses relative paths; gs:// paths are absolute)."""
  return storage.path(workdir) / "checkpoints"


def write_config(workdir: str | epath.Path, config: dict) -> epath.Path:
  """Writes the resolved config (plain values) as workdir/config.json (process 0 only), atomically."""
  path = epath.Path(workdir) / "config.json"
  if jax.process_index() == 0:
    storage.write_json(path, config, indent=2, sort_keys=True)
  return path


def read_config(workdir: str | epath.Path) -> dict:
  """The config saved by write_config, as plain values (tuples come back as lists)."""
  return storage.read_json(epath.Path(workdir) / "config.json")


def available_steps(workdir: str | epath.Path) -> list[int]:
  """Steps of the finished checkpoints in workdir, ascending."""
  return sorted(ocp.utils.checkpoint_steps(checkpoint_dir(workdir)))


def periodic(steps: Sequence[int], period: int | None, final_step: int | None = None) -> list[int]:
  """The steps of the periodic series: multiples of `period`, and `final_step` (all when no period)."""
  return sorted(s for s in steps if period is None or s % period == 0 or s == final_step)


def _gather_host_states(data_state) -> list:
  """Every host's JSON-serialisable state, on every host (process order)."""
  if jax.process_count() == 1:
    return [data_state]
  encoded = np.frombuffer(json.dumps(data_state).encode(), np.uint8)
  lengths = multihost_utils.process_allgather(np.array([encoded.size], np.int32))
  padded = np.zeros(int(np.max(lengths)), np.uint8)
  padded[:encoded.size] = encoded
  everything = multihost_utils.process_allgather(padded)
  return [json.loads(bytes(row[:int(n)]).decode()) for row, n in zip(everything,
                                                                    np.ravel(lengths))]


def host_data_state(payload: dict) -> dict:
  """This host's part of a saved data item (raises ResumeRefused on a different host count)."""
  if "hosts" not in payload:  # written by a single-host tfm before per-host states
    return payload
  hosts = payload["hosts"]
  if len(hosts) != jax.process_count():
    raise ResumeRefused(
        f"this checkpoint holds the data positions of {len(hosts)} host(s) and this run has "
        f"{jax.process_count()}: each host reads its own shard of the data (train split "
        f"[process_index::process_count]), so the positions cannot be carried over without repeating "
        f"or skipping examples of the current epoch. Resume with {len(hosts)} host(s), or train into "
        "a new --workdir")
  return hosts[jax.process_index()] or {}


class Checkpointer:
  """Saves and restores (TrainState, data state) under workdir/checkpoints.

  keep: how many checkpoints of the periodic series to keep (train.keep_checkpoints); period: its
  step (train.checkpoint_every; None = every saved step is periodic); final_step: train.steps.
  async_save: save in a background thread; `wait()` blocks until the last save is on disk and
  prunes the checkpoints it replaced (so does the next save, before it starts).
  Every process must call save/restore (Orbax coordinates the hosts).
  """

  def __init__(self, workdir: str | epath.Path, keep: int, period: int | None = None,
               final_step: int | None = None, async_save: bool = True):
    if keep < 1:
      raise ValueError(f"config key train.keep_checkpoints: expected >= 1, got {keep}")
    self.keep, self.period, self.final_step = keep, period, final_step
    self.directory = checkpoint_dir(workdir)
    # cleanup_tmp_directories: a save cut short (a process killed mid-save) leaves a partial
    # <step>.orbax-checkpoint-tmp* copy of the state; the next run's Checkpointer removes it. Only
    # writers make one: `tfm train`, which holds the workdir's lock, and `tfm convert`, into its own.
    options = ocp.CheckpointManagerOptions(max_to_keep=None, enable_async_checkpointing=async_save,
                                           create=True, cleanup_tmp_directories=True)
    self.manager = ocp.CheckpointManager(self.directory, options=options,
                                         item_names=(STATE, DATA, MANIFEST))
    self.peers: list[Checkpointer] = []  # a stack's other members' (tfm/loop.py): see _prune

  def save(self, step: int, state: Any, data_state: Any = None, force: bool = True,
           data_payload: dict | None = None) -> bool:
    """Starts saving `state`, every host's JSON-serialisable `data_state` and their checksums as
    checkpoint `step` (every host passes its own data state). data_payload: instead of data_state,
    the data item of another checkpoint as `read_data_state` returns it (every host's state, kept
    as is: tfm convert).

    Returns whether a save was started: False if `step` is already saved (e.g. a final save right
    after a periodic one). The state may be passed to the next (donating) train step right away: the
    checkpoint holds the values at the time of this call.
    """
    if int(step) in self.manager.all_steps():
      return False
    payload = data_payload if data_payload is not None else {
        "process_count": jax.process_count(), "hosts": _gather_host_states(data_state or {})}
    manifest = {"arrays": checksums.array_checksums(state),
                "data": checksums.json_checksum(payload)}
    args = ocp.args.Composite(**{STATE: ocp.args.StandardSave(state),
                                 DATA: ocp.args.JsonSave(payload),
                                 MANIFEST: ocp.args.JsonSave(manifest)})
    self.wait()  # the previous save on disk (Orbax's save waits for it too), then pruned
    return self.manager.save(int(step), args=args, force=force)

  def _prune(self) -> None:
    """Deletes the finished checkpoints outside the last `keep` of the series, but never the
    newest. Called only with no save in flight (wait()), so that a checkpoint is deleted only once
    the one that replaces it is on disk: a kill at any moment leaves `keep` readable ones (a
    best checkpoint, keep=1, is never gone before its successor is written).

    A stack's member (`peers`: the other members' Checkpointers) also keeps the newest step every
    member has on disk, so a kill between the members' saves leaves a step all of them can resume
    from (tfm/loop.py); and `<step>.ahead` copies set aside at a resume go once that step is
    written again."""
    steps = self.all_steps()
    kept = set(periodic(steps, self.period, self.final_step)[-self.keep:]) | set(steps[-1:])
    if self.peers:
      common = set(steps).intersection(*(ocp.utils.checkpoint_steps(p.directory)
                                         for p in self.peers))
      kept |= {max(common)} if common else set()
    for step in steps:
      if step not in kept:
        self.manager.delete(step)
    if jax.process_index() == 0 and self.directory.exists():
      for path in self.directory.iterdir():
        aside = re.fullmatch(r"(\d+)\.ahead(\.\d+)?", path.name)
        if aside and int(aside[1]) in steps:
          path.rmtree()

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    """Steps currently on disk (finished saves only), ascending."""
    return sorted(self.manager.all_steps())

  def restore(self, abstract_state: Any, step: int | None = None,
              accept: Callable[[Any, dict], None] | None = None,
              newest: int | None = None) -> tuple[Any, dict, int] | None:
    """Restores (state, this host's data state, step) onto the shardings of `abstract_state`.

    step None: the latest good checkpoint (of those at most `newest`, where given), None if there
    is no such checkpoint at all. Bad newer ones are skipped with a warning and set aside; if no
    checkpoint can be restored (e.g. the model config changed) this raises and renames nothing.
    An explicit step is restored or raises. accept(state, data_state) may raise to reject a
    checkpoint (e.g. a data state the iterator cannot take).
    """
    self.manager.wait_until_finished()
    if step is not None:
      return self._restore(abstract_state, step, accept) + (step,)
    failed = []
    candidates = [s for s in self.all_steps() if newest is None or s <= newest]
    for candidate in sorted(candidates, reverse=True):
      try:
        restored = self._restore(abstract_state, candidate, accept)
      except ResumeRefused:
        raise
      except Exception as error:  # noqa: BLE001 -- a bad checkpoint falls back to older ones
        failed.append((candidate, error))
        continue
      for bad, error in failed:  # one warning per bad step, once an older one is known to be good
        log.warning("checkpoint %s/%d cannot be restored (%s: %s); using step %d",
                    self.directory, bad, type(error).__name__, error, candidate)
        self._set_aside(bad)
      return restored + (candidate,)
    if failed:
      step, error = failed[0]
      raise CheckpointError(f"no checkpoint in {self.directory} can be restored into this train "
                            f"state (steps {[s for s, _ in failed]}); the latest, {step}, fails with: "
                            f"{type(error).__name__}: {error}") from error
    return None

  def _restore(self, abstract_state: Any, step: int, accept) -> tuple[Any, dict]:
    check_shapes(self.directory / str(step) / STATE, abstract_state)
    target, finish = restore_target(self.directory / str(step) / STATE, abstract_state)
    items = {STATE: ocp.args.StandardRestore(target), DATA: ocp.args.JsonRestore()}
    has_manifest = (self.directory / str(step) / MANIFEST).exists()
    if has_manifest:
      items[MANIFEST] = ocp.args.JsonRestore()
    restored = self.manager.restore(step, args=ocp.args.Composite(**items))
    state, payload = finish(restored[STATE]), dict(restored[DATA] or {})
    if has_manifest:
      verify(restored[MANIFEST], state, payload)
    else:
      log.warning("checkpoint %s/%d has no manifest (an older tfm wrote it): not verified",
                  self.directory, step)
    data_state = host_data_state(payload)
    if accept is not None:
      accept(state, data_state)
    return state, data_state

  def set_aside_after(self, step: int) -> list[int]:
    """Sets aside the checkpoints after `step` (renamed `<step>.ahead`), so that training from
    `step` writes them again; returns their steps. A stack's member a kill left ahead of the
    others resumes with them (tfm/loop.py)."""
    ahead = [s for s in self.all_steps() if s > step]
    for s in ahead:
      self._set_aside(s, "ahead")
    return ahead

  def _set_aside(self, step: int, why: str = "unreadable") -> None:
    """Renames a step directory to `<step>.<why>[.N]` so a later save of the same step does not
    collide."""
    if jax.process_index() == 0:
      path = self.directory / str(step)
      target, n = self.directory / f"{step}.{why}", 1
      while target.exists():
        target, n = self.directory / f"{step}.{why}.{n}", n + 1
      if path.exists():
        path.rename(target)
    distributed.barrier(f"tfm-checkpoint-set-aside-{step}-{why}")
    self.manager.reload()

  def wait(self) -> None:
    """Blocks until pending asynchronous saves are finished, then deletes the checkpoints they
    replaced (keep)."""
    self.manager.wait_until_finished()
    self._prune()

  def close(self) -> None:
    self.manager.close()


def _shapes(tree: Any) -> dict[str, tuple]:
  """Shapes by array name, the names of the manifest's checksums."""
  return {checksums.array_name(path): tuple(leaf.shape)
          for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def saved_shapes(state_dir: epath.Path) -> dict[str, tuple]:
  """The shapes of the arrays a checkpoint's state holds, by name ('params/...', 'opt_state/...'),
  from its metadata (no array is read)."""
  handler = ocp.PyTreeCheckpointHandler()
  try:
    return _shapes(handler.metadata(state_dir).tree)
  finally:
    handler.close()


def check_shapes(state_dir: epath.Path, target: Any, prefix: str = "") -> None:
  """Raises ValueError naming the first array of `target` (ShapeDtypeStructs; prefix: where it
  sits in the saved tree, 'params/' for the parameters alone) that the checkpoint at state_dir
  does not hold with that shape. Read from the checkpoint's metadata before Orbax reads any array:
  Orbax's failed reads of mismatched arrays leave tasks whose errors reach stderr later.
  A whole state's optimizer or EMA kept otherwise than this run's config says (train.optimizer,
  train.adafactor_momentum, train.ema_decay; an older tfm's optax numbering) raises ResumeRefused:
  the config's cause, named alone, which no older checkpoint of the run would resolve (not
  damage to fall back from)."""
  saved = saved_shapes(state_dir)
  wanted = _shapes(target)
  if (any(k.startswith("opt_state/adam/") for k in wanted)
      and any(re.match(r"opt_state/\d+/", k) for k in saved)):
    raise ResumeRefused(f"{state_dir} holds the optimizer state as optax.chain numbered it "
                        "(opt_state/0/...), as older tfm versions wrote it; this tfm keys it by "
                        "part (opt_state/adam/...) and cannot resume it: its parameters still "
                        "evaluate (tfm eval), or train into a new --workdir")
  differs = optimizer_difference(saved, wanted) if not prefix else None
  if differs:
    raise ResumeRefused(f"{differs}: a run resumes with the optimizer it was trained with; to "
                        "change it, start a new run from this one (train.init_from, a fresh "
                        "optimizer)")
  differs = ema_difference(saved, wanted) if not prefix else None
  if differs:
    raise ResumeRefused(f"config key train.ema_decay: {state_dir} {differs}; to change it, "
                        "start a new run from this one (train.init_from)")
  for name, shape in wanted.items():
    held = saved.get(prefix + name)
    if held != shape:
      raise ValueError(f"{state_dir} holds {prefix + name} "
                       f"{'as ' + str(held) if held is not None else 'not at all'}; "
                       f"this model's is {shape} (another model config?)")


def verify(manifest: dict, state: Any, payload: Any | None = None, prefix: str = "") -> None:
  """Raises CorruptCheckpoint unless the arrays of `state` (and the data payload) match the
  manifest's checksums. prefix: where `state` sits in the saved tree ('params/' for params only)."""
  expected = {k: v for k, v in manifest.get("arrays", {}).items() if k.startswith(prefix)}
  actual = checksums.array_checksums({prefix.rstrip("/"): state} if prefix else state)
  bad = checksums.mismatches(expected, actual)
  if bad:
    raise CorruptCheckpoint(f"{len(bad)} array(s) do not match their checksums, e.g. {bad[0]}")
  if payload is not None and checksums.json_checksum(payload) != manifest.get("data"):
    raise CorruptCheckpoint("the data state does not match its checksum")


def read_data_state(workdir: str | epath.Path, step: int) -> dict:
  """The data item saved with checkpoint `step`: {"process_count", "hosts": [...]} (JSON only)."""
  with ocp.Checkpointer(ocp.JsonCheckpointHandler()) as checkpointer:
    payload = dict(checkpointer.restore(checkpoint_dir(workdir) / str(step) / DATA) or {})
  return payload if "hosts" in payload else {"process_count": 1, "hosts": [payload]}


def restore_params(workdir: str | epath.Path, step: int, abstract_params: Any,
                   tree: str = "params") -> Any:
  """Only the parameters of checkpoint `step`, onto the shardings of `abstract_params` (a tree of
  jax.ShapeDtypeStruct, e.g. Experiment.abstract_params), verified against the checkpoint's
  checksums when it has them -- for checkpoint averaging and evaluation. tree='ema': their EMA
  (train.ema_decay), a tree like the parameters."""
  path = checkpoint_dir(workdir) / str(step)
  check_shapes(path / STATE, abstract_params, prefix=f"{tree}/")
  target = {tree: abstract_params}
  restore_args = ocp.checkpoint_utils.construct_restore_args(target)
  with ocp.PyTreeCheckpointer() as checkpointer:
    restored = checkpointer.restore(path / STATE, args=ocp.args.PyTreeRestore(
        item=target, restore_args=restore_args, partial_restore=True))
  if (path / MANIFEST).exists():
    with ocp.Checkpointer(ocp.JsonCheckpointHandler()) as checkpointer:
      manifest = checkpointer.restore(path / MANIFEST)
    verify(manifest, restored[tree], prefix=f"{tree}/")
  return restored[tree]


def restore_state(workdir: str | epath.Path, step: int, abstract_state: Any) -> tuple[Any, dict]:
  """(the TrainState, the data item) of checkpoint `step`: the state onto the shardings of
  `abstract_state`, the data item as `read_data_state` gives it (every host's, whatever host count
  wrote it), both verified against the checkpoint's checksums when it has them. Nothing is set
  aside and no host's data state is picked: for copying a checkpoint (tfm convert)."""
  path = checkpoint_dir(workdir) / str(step)
  check_shapes(path / STATE, abstract_state)
  target, finish = restore_target(path / STATE, abstract_state)
  with ocp.Checkpointer(ocp.StandardCheckpointHandler()) as checkpointer:
    state = finish(checkpointer.restore(path / STATE, args=ocp.args.StandardRestore(target)))
  with ocp.Checkpointer(ocp.JsonCheckpointHandler()) as checkpointer:
    payload = dict(checkpointer.restore(path / DATA) or {})
    if (path / MANIFEST).exists():
      verify(checkpointer.restore(path / MANIFEST), state, payload)
  return state, payload if "hosts" in payload else {"process_count": 1, "hosts": [payload]}
