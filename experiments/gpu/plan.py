"""The GPU queue's planner (experiments/gpu_queue.py): which jobs a call starts, and when, so that
nothing is started that is predicted to end after the deadline.

A job's predicted seconds are three parts (experiments/gpu/seconds.py): `before` (its processes'
start and compilation), `work` (its training steps' seconds alone on the GPU) and `after` (its
evaluations). The parts before and after take their seconds whatever else runs; the work is
stretched by concurrency(n) while n jobs run at once (several processes sharing one GPU, each
slower, together faster). The planner simulates the call, exactly for these piecewise-constant
rates: jobs start in order as slots free, each running job advancing at its rate, until every job
has ended.

The rules, applied to the jobs in the queue's order (the most wanted first):
  * A job is taken when the simulated call with it, and with every job taken before it, still ends
    every job (the running ones too) by the horizon (the deadline less the stop's seconds). A job
    that does not fit is tried as its parts (a stack as its runs, each on its own), else left for
    a later call, and the jobs after it are tried: small jobs pack around a long one.
  * An exclusive job (a timing, which needs the GPU alone) runs with nothing beside it; the taken
    exclusive jobs run first in the call, before the slots fill (none waits for the slots to
    drain).
  * A `first` job (Table 3's big) starts only at the start of the call's slots (no other job has
    started there yet), so it has the whole call; others are packed beside it only where big
    still ends in time.
The queue plans again whenever a job ends, from what runs then and the clock: a job runs longer
than predicted, and what was planned after it moves or drops out.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence


@dataclasses.dataclass(frozen=True)
class Cost:
  """A job's predicted seconds: `before` and `after` at any concurrency, `work` alone on the GPU."""
  before: float
  work: float
  after: float

  @property
  def alone(self) -> float:
    return self.before + self.work + self.after


@dataclasses.dataclass(frozen=True)
class Job:
  name: str
  cost: Cost
  exclusive: bool = False  # needs the GPU alone
  first: bool = False  # starts only at the start of a call's slots
  split: tuple["Job", ...] = ()  # where it does not fit: these parts, each alone (a stack's runs)


@dataclasses.dataclass
class Running:
  """A job that runs now: its predicted parts left (the queue's estimate from its elapsed time)."""
  job: Job
  left: Cost


@dataclasses.dataclass(frozen=True)
class Slot:
  """One job of a simulated call: when it starts and ends (seconds from the plan's now)."""
  job: Job
  start: float
  end: float


def advance(cost: Cost, seconds: float, stretch: float) -> Cost:
  """What is left of `cost` after `seconds` of running while its work is stretched by `stretch`."""
  before = min(cost.before, seconds)
  seconds -= before
  work = min(cost.work * stretch, seconds)
  seconds -= work
  after = min(cost.after, seconds)
  return Cost(cost.before - before, max(0.0, cost.work - work / stretch), cost.after - after)


def _finish_in(cost: Cost, stretch: float) -> float:
  return cost.before + cost.work * stretch + cost.after


def simulate(running: Sequence[Running], order: Sequence[Job], slots: int,
             concurrency: Callable[[int], float], started: bool = False) -> list[Slot]:
  """The call from now: `running` go on, `order` start in turn as slots free (an exclusive job
  only when nothing runs, and nothing beside it; a `first` job only while nothing but exclusive
  jobs has started in the call's slots: `started` says whether something had before now).
  Returns every job's slot, the running ones' with start 0; a job that can never start (a first
  job after the slots started) ends at infinity."""
  active = {id(r.job): (r.job, r.left) for r in running}
  starts = {id(r.job): 0.0 for r in running}
  out: dict[int, Slot] = {}
  queue = list(order)
  now, packed = 0.0, started or any(not r.job.exclusive for r in running)
  while queue or active:
    while queue and len(active) < slots:  # start what may start now, in order
      job = queue[0]
      alone = any(j.exclusive for j, _ in active.values())
      if alone or (job.exclusive and active):
        break
      if job.first and packed:
        queue.pop(0)
        out[id(job)] = Slot(job, float("inf"), float("inf"))
        continue
      queue.pop(0)
      active[id(job)] = (job, job.cost)
      starts[id(job)] = now
      packed = packed or not job.exclusive
      if job.exclusive:
        break
    if not active:
      break
    stretch = concurrency(len(active))
    step = min(_finish_in(left, stretch) for _, left in active.values())
    now += step
    for key, (job, left) in list(active.items()):
      left = advance(left, step, stretch)
      if _finish_in(left, stretch) <= 1e-9:
        del active[key]
        out[key] = Slot(job, starts[key], now)
      else:
        active[key] = (job, left)
  return [out[id(j)] for j in [r.job for r in running] + list(order) if id(j) in out]


def arrange(jobs: Sequence[Job]) -> list[Job]:
  """A call's start order: the exclusive jobs first, then the others, each in the queue's order."""
  return [j for j in jobs if j.exclusive] + [j for j in jobs if not j.exclusive]


def plan(queue: Sequence[Job], running: Sequence[Running], horizon: float, slots: int,
         concurrency: Callable[[int], float], started: bool = False) -> list[Slot]:
  """The jobs of `queue` (in its order) that this call takes, with their predicted starts and
  ends, seconds from now; horizon: the seconds from now by which every job must end. The rules:
  the module docstring."""
  if slots < 1:
    raise ValueError(f"slots: expected at least 1, got {slots}")
  # A running job already predicted past the horizon is stopped there whatever starts; no job
  # is taken that would push one predicted in time past it.
  late = {id(s.job) for s in simulate(running, [], slots, concurrency, started) if s.end > horizon}
  taken: list[Job] = []
  best: list[Slot] = []

  def take(job: Job) -> bool:
    nonlocal best
    if job.cost.alone > horizon:
      return False
    trial = simulate(running, arrange(taken + [job]), slots, concurrency, started)
    if all(s.end <= horizon for s in trial if id(s.job) not in late):
      taken.append(job)
      best = trial
      return True
    return False

  for job in queue:
    if not take(job):
      for part in job.split:
        take(part)
  names = {id(j) for j in taken}
  return sorted((s for s in best if id(s.job) in names), key=lambda s: s.start)
