"""The best checkpoint by a dev metric (train.best_metric) and early stopping (train.patience).

  WORKDIR/best/checkpoints/<step>   the best checkpoint so far (a Checkpointer keeping one), apart
                                    from WORKDIR/checkpoints: keep_checkpoints never deletes it
  WORKDIR/best/best.json            {"metric", "history": [[step, value], ...]}: every evaluation
                                    of the metric, so a resume knows the best so far and how many
                                    evaluations have not improved on it
  WORKDIR/stopped.json              {"step", "reason"}: the run stopped early, a finished run

dev_ppl is lower-is-better (dev perplexity, every train.eval_every); dev_bleu higher-is-better
(sacreBLEU, every eval.bleu_every). Only a strict improvement makes a new best: on a tie the
earlier checkpoint stays. A resumed run drops the evaluations from the step it resumes at on (it
runs them again: tfm/train/runner.py evaluates the step it resumes at first, as an uninterrupted
run evaluated it after saving it), so it sees exactly the evaluations an uninterrupted run sees.
"""

from __future__ import annotations

import math

import jax
from etils import epath

from tfm import storage

BEST = "best"
RECORD = "best.json"
STOPPED = "stopped.json"
# metric -> (the figure's name in the dev evaluation's dict, whether lower is better)
FIGURES = {"dev_ppl": ("perplexity", True), "dev_bleu": ("bleu", False)}


def best_dir(workdir) -> epath.Path:
  """WORKDIR/best: a Checkpointer over it (its checkpoints/ subdirectory) holds the best checkpoint."""
  return storage.path(workdir) / BEST


def read_record(workdir) -> dict | None:
  """best.json of a run (None where it kept no best checkpoint)."""
  path = best_dir(workdir) / RECORD
  return storage.read_json(path) if path.exists() else None


def stopped(workdir) -> dict | None:
  """{"step", "reason"} of a run that stopped early (a finished run), else None."""
  path = storage.path(workdir) / STOPPED
  return storage.read_json(path) if path.exists() else None


def write_stopped(workdir, step: int, reason: str) -> None:
  if jax.process_index() == 0:
    storage.write_json(storage.path(workdir) / STOPPED, {"step": int(step), "reason": reason})


class BestTracker:
  """The best value of train.best_metric so far in one run and the evaluations since it.

  observe(step, figures) takes the dict a dev evaluation returned and says whether it is a new best
  (the caller then saves the state as the best checkpoint); exhausted() says the run should stop
  (patience evaluations without improvement).
  """

  def __init__(self, workdir, metric: str, patience: int, start: int):
    if metric not in FIGURES:
      raise ValueError(f"config key train.best_metric: expected one of {tuple(FIGURES)}, got "
                       f"{metric!r}")
    self.workdir, self.metric, self.patience = workdir, metric, patience
    self.figure, self.lower = FIGURES[metric]
    record = read_record(workdir)
    kept = record["history"] if record is not None and record.get("metric") == metric else []
    self.history = [[int(s), float(v)] for s, v in kept if int(s) < start]

  def _better(self, value: float, than: float) -> bool:
    return value < than if self.lower else value > than

  @property
  def best(self) -> tuple[int, float] | None:
    """(step, value) of the best evaluation so far (the first of equal ones), or None."""
    out = None
    for step, value in self.history:
      if math.isfinite(value) and (out is None or self._better(value, out[1])):
        out = (step, value)
    return out

  @property
  def stale(self) -> int:
    """Evaluations since the best one (all of them when none was finite)."""
    best = self.best
    return sum(1 for step, _ in self.history if best is None or step > best[0])

  def observe(self, step: int, figures: dict) -> bool:
    """Records the evaluation at `step` (figures: DevLoss's or DevBleu's dict); True if it is a
    new best."""
    before = self.best
    value = float(figures[self.figure])
    self.history.append([int(step), value])
    if jax.process_index() == 0:
      best_dir(self.workdir).mkdir(parents=True, exist_ok=True)
      storage.write_json(best_dir(self.workdir) / RECORD,
                         {"metric": self.metric, "history": self.history})
    return math.isfinite(value) and (before is None or self._better(value, before[1]))

  def exhausted(self) -> bool:
    return bool(self.patience) and self.stale >= self.patience

  def reason(self) -> str:
    """Why the run stops (exhausted())."""
    best = self.best
    held = f"its best, {best[1]:.4f} at step {best[0]}" if best else "a finite value"
    return (f"train.best_metric={self.metric} has not improved on {held} in {self.stale} "
            f"evaluations (train.patience={self.patience})")
