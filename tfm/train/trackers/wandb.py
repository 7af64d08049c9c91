"""The 'wandb' tracker: a tfm run as a Weights & Biases run, offline by default.

  mode      train.wandb_mode: 'offline' (the default: no account, no network, what a cluster
            without internet does; the run's files go to WORKDIR/trackers/wandb/offline-run-*/ and
            `wandb sync WORKDIR/trackers/wandb/offline-run-*` uploads them later) or 'online'
            (needs `wandb login` or $WANDB_API_KEY; checked at the start)
  project   train.tracker_experiment, the sweep's, $WANDB_PROJECT or 'tfm'; entity:
            train.wandb_entity or $WANDB_ENTITY; the run named after its workdir, its W&B group a
            sweep's group (the seeds of a row), tagged 'row=...', 'seed=...', 'sweep=...'
  config    the config, flattened ('model.num_layers': 6)
  history   each figure at its step; files kept in the run's files ('eval/eval_dev_...json')

The run's id is kept in WORKDIR/trackers/wandb.json: a resumed run (its `tfm eval`, the sweep's
final figures) continues the same W&B run (resume='allow', so an offline run's later parts sync
into it) and logs a tag only beyond the last step the run's offline files on disk hold
(tfm/train/trackers/wandb_files.py; W&B writes them every FLUSH_S seconds and a step's row once a later step
arrives, so a process killed with SIGKILL loses its last second and its last step's row, which the
resume logs again where it repeats them). A remote workdir's files are written where the process
ran: there, beyond the last step each tag was sent, kept in wandb.json. Each tfm
process makes its own offline-run directory; W&B writes the process's console nowhere (console
'off'): the workdir's log has it.
"""

from __future__ import annotations

import os
import secrets
import shutil
from typing import Any, Mapping

from tfm import storage
from tfm.train.trackers import common as tracker_common, wandb_files

FLUSH_S = 1.0  # W&B's rows reach the run's .wandb file within this many seconds (_flush_setting)


def _wandb():
  return tracker_common.client_package("wandb")


def check(train) -> None:
  """The package is installed; online, the account's key is set and W&B's server answers."""
  wandb = _wandb()
  if train.wandb_mode == "offline":
    return
  base = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
  try:
    wandb.Api(timeout=10).viewer  # pylint: disable=expression-not-assigned
  except Exception as e:  # pylint: disable=broad-except
    reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    raise ValueError(f"train.trackers: wandb (train.wandb_mode='online'): W&B at {base} does not "
                     f"answer or takes no key ({reason[:200]}); run `wandb login` or set "
                     "$WANDB_API_KEY (and $WANDB_BASE_URL for a W&B server of your own), or set "
                     "train.wandb_mode=offline and `wandb sync` later") from None


def files_dir(workdir: str) -> str:
  """Where W&B writes the run's files: WORKDIR/trackers (a local workdir), else $WANDB_DIR or the
  current directory (W&B writes local files only)."""
  if storage.is_remote(workdir):
    return os.environ.get("WANDB_DIR") or os.getcwd()
  return os.fspath(tracker_common.directory(workdir))


def _flush_setting(wandb) -> dict:
  """W&B writes the run's rows to its .wandb file every FLUSH_S seconds (its default, 15 s, loses
  that much of a run killed with SIGKILL); where this wandb has the setting."""
  key = "x_transaction_log_flush_interval"
  return {key: FLUSH_S} if key in getattr(wandb.Settings, "model_fields", {}) else {}


class WandB:
  """The W&B run of the tfm run in `workdir` (created, or continued from its wandb.json)."""
  name = "wandb"

  def __init__(self, train, workdir: str, experiment: str, run_name: str, tags: Mapping[str, str],
               stream):
    wandb = _wandb()
    self.workdir, self.stream, self._warned = workdir, stream, False
    state = tracker_common.read_state(workdir, self.name)
    self.run_id = state.get("run_id") or secrets.token_hex(6)  # W&B ids: [a-z0-9]
    self.steps: dict[str, int] = dict(state.get("steps", {}))  # tag -> its last step logged
    directory = files_dir(workdir)
    os.makedirs(directory, exist_ok=True)
    # Logged beyond the last step the run's earlier processes wrote to disk only: a process killed
    # (SIGKILL) had sent steps that W&B had not yet written, which a resume logs again. A remote
    # workdir's files are on the machine that wrote them: the steps its processes sent.
    self.floor = (self.steps if storage.is_remote(workdir) else
                  wandb_files.last_steps(os.path.join(directory, "wandb"), self.run_id)
                  if state.get("run_id") else {})
    # A run continued keeps its project and name (a workdir copied or moved elsewhere, a
    # resume under another train.tracker_experiment: the same W&B run, not renamed or moved).
    experiment, run_name = state.get("project", experiment), state.get("name", run_name)
    labels = [f"{k}={tags[k]}" for k in ("sweep", "row", "seed") if tags.get(k)]
    self.run = wandb.init(
        project=experiment, entity=train.wandb_entity or os.environ.get("WANDB_ENTITY"),
        name=run_name, id=self.run_id, resume="allow", dir=directory, mode=train.wandb_mode,
        group=tags.get("group") or None, tags=labels or None, reinit="create_new",
        settings=wandb.Settings(console="off", silent=True, x_disable_stats=True,
                                **_flush_setting(wandb)))
    tracker_common.write_state(workdir, self.name, {"run_id": self.run_id, "project": experiment,
                                                    "name": run_name, "steps": self.steps})
    where = (f"offline, in {self.run.dir.rsplit(os.sep, 1)[0]}" if train.wandb_mode == "offline"
             else self.run.url)
    print(f"[wandb] run {self.run_id} ({run_name}) of project {experiment!r}: {where}",
          file=stream, flush=True)

  def params(self, values: Mapping[str, Any]) -> None:
    self.run.config.update(dict(values), allow_val_change=True)

  def tags(self, values: Mapping[str, str]) -> None:
    """Tags 'key=value' (none for an empty value; a sweep's group is the run's W&B group)."""
    self.run.tags = tuple(dict.fromkeys([*(self.run.tags or ()),
                                         *(f"{k}={v}" for k, v in values.items()
                                           if v != "" and k != "group")]))

  def metrics(self, step: int, values: Mapping[str, float]) -> None:
    new = {k: float(v) for k, v in values.items() if step > self.floor.get(k, -1)}
    if not new:
      return
    try:
      self.run.log(new, step=int(step))
    except Exception as e:  # pylint: disable=broad-except
      self._warn(f"could not log step {step}", e)  # never stops the training
      return
    self.steps.update({k: int(step) for k in new})
    state = tracker_common.read_state(self.workdir, self.name)
    tracker_common.write_state(self.workdir, self.name, {**state, "steps": self.steps})

  def artifact(self, path: str, folder: str = "") -> None:
    """A copy of the file in the run's files (W&B would link to it, and the file changes)."""
    target = os.path.join(self.run.dir, folder, os.path.basename(path))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
      shutil.copyfile(path, target)
      self.run.save(target, base_path=self.run.dir, policy="now")
    except Exception as e:  # pylint: disable=broad-except
      self._warn(f"could not keep {path}", e)

  def _warn(self, what: str, error: Exception) -> None:
    if not self._warned:
      print(f"[wandb] run {self.run_id}: {what} ({' '.join(str(error).split())[:200]}); training "
            "goes on", file=self.stream, flush=True)
    self._warned = True

  def sync(self) -> None:
    pass

  def close(self, ok: bool = True) -> None:
    try:
      self.run.finish(exit_code=0 if ok else 1)
    except Exception as e:  # pylint: disable=broad-except
      self._warn("could not finish", e)
