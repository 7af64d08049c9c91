"""A GPU call's record (OUT/record.json, experiments/gpu_queue.py): where its seconds went, and the
measurements that refine the table of measured seconds (experiments/gpu/seconds.py).

The call's seconds are the machine's start before the command (its uptime when the queue began)
and the queue's wall. While n jobs run at once each has 1/n of each second; a job's share is split
by its processes' logs (experiments/gpu/run_seconds.py) into:
  start     the machine's start, the queue's own start, every process's start, data, checkpoints
            and exit, a sweep's own time around its processes
  compile   the train step's and the beam search's compilations
  steps     training steps
  dev       dev evaluations during training
  beam      the runs' `tfm eval`: beam search, restore, the dev pass (an lm run's context lengths)
  timings   the timing jobs (their processes' whole time)
  idle      no job running: waiting for the stop, the stop itself and the packing
published_share: the steps, dev evaluations, beam search and timings of the runs and timing jobs
that ended published, over the call's seconds (the goal: at least 0.85).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Sequence

from experiments.gpu import run_seconds
from experiments.gpu.seconds import Seconds

PARTS = ("start", "compile", "steps", "dev", "beam", "timings", "idle")
MIN_STEPS = 50  # a train process that stepped fewer measures no step time


@dataclasses.dataclass
class JobSpan:
  """One job of the call: its seconds since the queue's start, and what it ran."""
  name: str
  start: float
  end: float
  outcome: str
  planned_end: float
  table: str | None = None  # a sweep job's table; None: a timing job
  runs: tuple[str, ...] = ()
  timing: str | None = None


def weights(spans: Sequence[JobSpan], end: float) -> tuple[dict[str, float], dict[str, float],
                                                           float]:
  """Each job's mean share of the seconds it ran (1/n while n ran), its mean n, and the seconds
  from the first start to `end` when none ran."""
  edges = sorted({0.0, end, *(s.start for s in spans), *(s.end for s in spans)})
  share = {s.name: 0.0 for s in spans}
  crowd = {s.name: 0.0 for s in spans}
  idle = 0.0
  for a, b in zip(edges, edges[1:]):
    on = [s for s in spans if s.start <= a and s.end >= b]
    if not on:
      idle += b - a
    for s in on:
      share[s.name] += (b - a) / len(on)
      crowd[s.name] += (b - a) * len(on)
  life = {s.name: max(1e-9, s.end - s.start) for s in spans}
  return ({n: share[n] / life[n] for n in share}, {n: crowd[n] / life[n] for n in crowd}, idle)


def run_segments(workdir: Path, since: float) -> list[run_seconds.Segment]:
  """A run's processes that started at `since` (seconds since the epoch) or later."""
  log = workdir / "sweep.log"
  if not log.exists():
    return []
  result = workdir / "sweep_result.json"
  wall = json.loads(result.read_text()).get("wall_s") if result.exists() else None
  return [s for s in run_seconds.segments(log.read_text(errors="replace"), wall)
          if s.start >= since - 1]


def build(spans: Sequence[JobSpan], *, epoch0: float, wall: float, node_start: float, setup: float,
          stop: float | None, roots: dict[str, Path], published: set[tuple[str, str]],
          timings_published: set[str], flops_ratio: dict[tuple[str, str], float],
          seconds: Seconds) -> dict:
  """The record's seconds, shares and measurements. epoch0: the queue's start (seconds since the
  epoch); spans: seconds since it; wall: the queue's seconds; roots: each table's root;
  published: (table, run) that ended published in this call."""
  share, crowd, idle = weights(spans, wall)
  parts = dict.fromkeys(PARTS, 0.0)
  parts["start"] = node_start + setup
  parts["idle"] = max(0.0, idle - setup)
  useful = 0.0
  measured: dict[str, list[float]] = {}
  runs_out = []
  for span in spans:
    w, life = share[span.name], span.end - span.start
    if span.timing:
      parts["timings"] += w * life
      useful += w * life if span.timing in timings_published else 0.0
      if span.outcome == "ok":
        measured.setdefault(f"job/{span.timing}", []).append(round(life, 1))
      continue
    counted, seen = 0.0, set()
    for name in span.runs:
      segs = run_segments(roots[span.table] / name, epoch0 + span.start)
      mine = {"run": f"{span.table}/{name}", "published": (span.table, name) in published}
      for seg in segs:
        if seg.head in seen:  # a stack's training, in each member's log: counted once
          continue
        seen.add(seg.head)
        got = seg.parts()
        counted += seg.wall
        for part, value in got.items():
          parts[part] += w * value
          mine[part] = mine.get(part, 0.0) + value
        if seg.phase == "train":
          stack, n = seg.stack(), crowd[span.name]
          trained = seg.trained_steps()
          measured.setdefault("process_start", []).append(round(got["start"], 2))
          measured.setdefault("train_compile", []).append(round(got["compile"], 2))
          if trained >= MIN_STEPS and got["steps"] > 0:
            alone = got["steps"] / trained / (max(1.0, flops_ratio[(span.table, name)])
                                              * seconds.stack(stack) * seconds.concurrency(n))
            measured.setdefault(f"step_s/{span.table}", []).append(round(alone, 7))
          dev_count = len({m.group(2) for m in run_seconds.DEV.finditer(seg.text)})
          if dev_count:
            measured.setdefault(f"dev_eval/{span.table}", []).append(
                round(got["dev"] / dev_count, 4))
          share_useful = (got["steps"] + got["dev"]) * sum(
              (span.table, r) in published for r in span.runs) / max(1, len(span.runs))
        elif seg.code == 0 or (seg.code is None and (span.table, name) in published):
          measured.setdefault(f"eval_compile/{span.table}", []).append(round(got["compile"], 2))
          measured.setdefault(f"eval_rest/{span.table}", []).append(round(got["beam"], 2))
          share_useful = got["beam"] if (span.table, name) in published else 0.0
        else:
          share_useful = 0.0
        useful += w * share_useful
      runs_out.append({k: round(v, 1) if isinstance(v, float) else v for k, v in mine.items()})
    parts["start"] += w * max(0.0, life - counted)  # the sweeps' own time around their processes
  if stop is not None:
    measured["stop"] = [round(stop, 1)]
  measured["queue_start"] = [round(setup, 1)]
  total = node_start + wall
  others = {k: v for k, v in parts.items() if k not in ("steps", "timings")}
  return {"seconds": {k: round(v, 1) for k, v in parts.items()}, "total_s": round(total, 1),
          "shares": {k: round(v / total, 3) for k, v in parts.items()} if total else {},
          "published_share": round(useful / total, 3) if total else 0.0,
          "largest_other": max(others, key=others.get),
          "jobs": [{**dataclasses.asdict(s), "mean_concurrency": round(crowd[s.name], 2),
                    "share_s": round(share[s.name] * (s.end - s.start), 1)} for s in spans],
          "runs": runs_out, "measured": measured}
