"""The GPU queue's loop (experiments/gpu_queue.py): plan, start what the plan starts now, watch the
jobs, plan again when one ends, stop everything at the stop time. The clock, the sleep and the jobs
are given, so that tests drive it with a fake clock and fake jobs (tests/integration/
test_gpu_plan.py); the queue gives it time.monotonic and its job processes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from experiments.gpu.plan import Cost, Job, Running, advance, plan

OVERRUN_S = 10.0  # a job past its predicted end is expected to need this much more, at least


@dataclasses.dataclass
class Started:
  """A job the loop started: when, the end its plan predicted, and (once ended) how it ended."""
  job: Job
  handle: Any
  start: float
  planned_end: float
  end: float | None = None
  outcome: str | None = None  # ok | failed | stopped


def left_of(job: Job, elapsed: float, stretch: float) -> Cost:
  """A running job's predicted parts left after `elapsed` seconds at `stretch`; one already past its
  predicted end is given OVERRUN_S more."""
  left = advance(job.cost, elapsed, stretch)
  return left if left.alone > 0 else Cost(0.0, 0.0, OVERRUN_S)


def _take(pending: list[Job], job: Job) -> None:
  """`job` leaves `pending`; where it is a part of a pending job, that job gives way to its other
  parts, in its place."""
  if job in pending:
    pending.remove(job)
    return
  whole = next(j for j in pending if job in j.split)
  at = pending.index(whole)
  pending[at:at + 1] = [p for p in whole.split if p is not job]


def run(queue: Sequence[Job], *, slots: int, horizon_at: float, stop_at: float,
        concurrency: Callable[[int], float], clock: Callable[[], float],
        sleep: Callable[[float], None], launch: Callable[[Job], Any],
        poll: Callable[[Any], str | None], stop: Callable[[list[Any]], None],
        poll_s: float = 2.0, say: Callable[[str], None] = lambda _: None,
        halt: Callable[[], bool] = lambda: False,
        stop_now: Callable[[], bool] = lambda: False) -> list[Started]:
  """Works through `queue` until nothing more fits before horizon_at or stop_at comes: at every
  change (a job ended, or first) it plans (experiments/gpu/plan.py) and launches the jobs the plan
  starts now. launch(job) -> handle; poll(handle) -> None while it runs, else 'ok', 'failed' or
  'stopped'; stop(handles): the running jobs at stop_at (they save and end); halt() -> True: start
  nothing more (a setup that fails every job); stop_now() -> True: the stop comes now (the command
  was told to end). Returns every started job, in start order."""
  pending, started = list(queue), []
  running: list[Started] = []
  packed, changed = False, True
  while True:
    now = clock()
    for s in list(running):
      outcome = poll(s.handle)
      if outcome is not None:
        s.end, s.outcome = now, outcome
        running.remove(s)
        changed = True
        say(f"{s.job.name}: {outcome} after {now - s.start:.0f} s (planned "
            f"{s.planned_end - s.start:.0f} s)")
    if now >= stop_at or stop_now():
      if running:
        say(f"stop time: stopping {', '.join(s.job.name for s in running)}")
        stop([s.handle for s in running])
        for s in running:  # whatever its exit code after the TERM: stopped, unless it ended well
          s.end, s.outcome = clock(), "ok" if poll(s.handle) == "ok" else "stopped"
      return started
    if changed and halt():
      if not running:
        say("every job so far failed: starting no more")
        return started
      changed = False
    if changed:
      stretch = concurrency(max(1, len(running)))
      current = [Running(s.job, left_of(s.job, now - s.start, stretch)) for s in running]
      planned = plan(pending, current, horizon_at - now, slots, concurrency, packed)
      changed = False
      for slot in planned:
        if slot.start > 1e-6:
          continue
        handle = launch(slot.job)
        entry = Started(slot.job, handle, now, now + slot.end)
        running.append(entry)
        started.append(entry)
        _take(pending, slot.job)
        packed = packed or not slot.job.exclusive
        changed = True  # plan again at once: a start can let a later job in
        say(f"start {slot.job.name}: predicted {slot.end:.0f} s, to end "
            f"{horizon_at - now - slot.end:.0f} s before the horizon")
      if not running and not changed:
        return started
      if changed:
        continue
    sleep(poll_s)
