"""Which of a sweep's pending runs train together as one stack (tfm sweep --stack), and from which
step each resumes: runs of one stack class (tfm/train/stack.py) resuming from one step, at most a
cap a stack."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from tfm.sweep.runs import Run
from tfm.train.checkpoint import best as best_lib
from tfm.train import checkpoint as ckpt_lib


def reached(workdir: str, steps: int) -> int:
  """How far a run's training got: its latest checkpoint's step, or `steps` for a run that stopped
  early (train.patience, tfm/train/checkpoint/best.py: a finished run)."""
  latest = max(ckpt_lib.available_steps(workdir), default=0)
  ended = best_lib.stopped(workdir)
  return steps if ended is not None and latest >= ended["step"] else latest


def groups(runs: Sequence[Run], stack: bool, most: int = 0,
           key: Callable[[Run], Any] | None = None) -> list[list[Run]]:
  """The runs a Job takes: one each, or with `stack` the runs of equal `key` together (default:
  each group's seeds; the sweep's key is tfm/train/stack.py's stack_class, so Table 3's base and
  D1-D4 stack too; a run whose key is None trains alone), at most `most` a stack (0: no cap), in
  the order of each stack's first run."""
  if not stack:
    return [[r] for r in runs]
  key = key or (lambda r: r.group)
  by_key: dict[Any, list[Run]] = {}
  for i, r in enumerate(runs):
    k = key(r)
    by_key.setdefault(("alone", i) if k is None else k, []).append(r)
  size = most or max((len(g) for g in by_key.values()), default=1)
  return [g[i:i + size] for g in by_key.values() for i in range(0, len(g), size)]


def resuming_key(runs: Sequence[Run], stack_key: Callable[[Run], Any] | None,
                 workdir: Callable[[Run], str], steps_of: Callable[[Run], int]
                 ) -> Callable[[Run], Any]:
  """groups' key for the pending `runs`: stack_key (default: a group's seeds) and the step a run
  resumes from. A stack steps its runs together, so only runs at one step may stack: a rerun with
  more seeds stacks the new runs apart from those halfway through. One exception keeps a stack
  whole: members a kill left one checkpoint apart (their asynchronous saves of one step end
  apart) resume together from the older step, which the loop restores for all of them
  (tfm/loop.py). A run whose stack_key is None trains alone."""
  class_of = stack_key or (lambda r: r.group)
  at = {r: reached(workdir(r), steps_of(r)) for r in runs}
  def key(r: Run):
    c = class_of(r)
    if c is None:
      return None
    held = [s for s in ckpt_lib.available_steps(workdir(r)) if s < at[r]]
    behind = {at[q] for q in runs if q is not r and class_of(q) == c}
    return c, held[-1] if held and held[-1] in behind else at[r]
  return key
