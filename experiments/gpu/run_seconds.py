"""Where a sweep run's seconds went, read from its log (ROOT/NAME/sweep.log, tfm/sweep/execute.py):
each `tfm train` and `tfm eval` the sweep started, with its wall seconds and the parts the log
names.

A log is segments, each opened by `=== TIME tfm PHASE ARGS` and closed by `=== TIME tfm PHASE exit
CODE` (a log written before the sweep wrote exit lines ends a segment where the next one starts,
and its last one at the run's end, its start plus sweep_result.json's wall_s). In a segment:

  train  compile   "train step compiled (or loaded from the compilation cache) in X s"
         steps     each logged window's steps x its mean step_s ("[train] step N/T ... step_s S";
                   a stack's members log one line each, the same step: counted once)
         dev       the dev evaluations during training, their eval_s ("[dev] step N ... eval_s E")
         start     the rest of the wall: the process's start, data, checkpoints, its exit
  eval   compile   the beam search's compilation (decode_compile_s)
         beam      the rest of the wall: the beam search, and the process's start, restore and the
                   dev perplexity pass around it (an lm run's eval: its context lengths' passes)

The seconds are wall seconds of that process; stack: how many runs its `tfm train` trained at once.
"""

from __future__ import annotations

import dataclasses
import datetime
import re

HEAD = re.compile(r"^=== (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) tfm (\w+)(.*)$", re.M)
EXIT = re.compile(r"^ exit (-?\d+)$")
NUMBER = r"([-+\d.eE]+)"
COMPILED = re.compile(r"train step compiled \(or loaded from the compilation cache\) in ([\d.]+) s")
TRAIN = re.compile(rf"^\[train(?: (\S+))?\] step (\d+)/\d+ .*?\| step_s {NUMBER}", re.M)
DEV = re.compile(rf"^\[dev(?: (\S+))?\] step (\d+) .*?\| eval_s {NUMBER}", re.M)
RESUMED = re.compile(r"^tfm: resumed from step (\d+) ", re.M)
DECODE_COMPILE = re.compile(rf"^\s*decode_compile_s: {NUMBER}", re.M)
STACK = re.compile(r"^tfm: a stack of (\d+) runs", re.M)


@dataclasses.dataclass
class Segment:
  """One `tfm train` or `tfm eval` of a run's log."""
  phase: str  # train | eval
  head: str  # its === line, which names it (a stack's training is one segment in each member's log)
  start: float  # seconds since the epoch (the log's local time; only differences are used)
  end: float | None = None
  code: int | None = None  # exit code, where the log says
  text: str = ""

  @property
  def wall(self) -> float:
    return max(0.0, (self.end or self.start) - self.start)

  def parts(self) -> dict[str, float]:
    """This process's seconds by part (the module docstring), summing to its wall."""
    if self.phase == "train":
      compiled = COMPILED.search(self.text)
      compile_s = float(compiled.group(1)) if compiled else 0.0
      dev = {}
      for m in DEV.finditer(self.text):
        dev.setdefault(int(m.group(2)), float(m.group(3)))  # a stack's members: the step once
      parts = {"compile": compile_s, "steps": self.steps_seconds(), "dev": sum(dev.values())}
      parts["start"] = max(0.0, self.wall - sum(parts.values()))
      return parts
    compile_s = sum(float(m.group(1)) for m in DECODE_COMPILE.finditer(self.text))
    return {"compile": compile_s, "beam": max(0.0, self.wall - compile_s)}

  def steps_seconds(self) -> float:
    """The logged windows' steps times their step_s (a stack's: once, its first member's lines)."""
    resumed = RESUMED.search(self.text)
    last, total, member = int(resumed.group(1)) if resumed else 0, 0.0, None
    for m in TRAIN.finditer(self.text):
      if member is None:
        member = m.group(1)
      if m.group(1) != member:
        continue
      step = int(m.group(2))
      total += max(0, step - last) * float(m.group(3))
      last = step
    return total

  def median_step_s(self) -> float | None:
    values = sorted(float(m.group(3)) for m in TRAIN.finditer(self.text))
    return values[len(values) // 2] if values else None

  def stack(self) -> int:
    found = STACK.search(self.text)
    return int(found.group(1)) if found else 1

  def trained_steps(self) -> int:
    """Steps this process trained (from where it resumed to its last logged step)."""
    resumed = RESUMED.search(self.text)
    steps = [int(m.group(2)) for m in TRAIN.finditer(self.text)]
    return max(steps, default=0) - (int(resumed.group(1)) if resumed else 0) if steps else 0


def _time(stamp: str) -> float:
  return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp()


def segments(log: str, wall_s: float | None = None) -> list[Segment]:
  """A run's log as its processes; wall_s: its sweep_result.json's, which ends a last segment that
  has no exit line (seconds from its first process's start)."""
  found: list[Segment] = []
  heads = list(HEAD.finditer(log))
  for i, m in enumerate(heads):
    text = log[m.end():heads[i + 1].start() if i + 1 < len(heads) else len(log)]
    ended = EXIT.match(m.group(3))
    if ended:
      if found and found[-1].end is None:
        found[-1].end, found[-1].code = _time(m.group(1)), int(ended.group(1))
      continue
    if found and found[-1].end is None:
      found[-1].end = _time(m.group(1))  # an older log: the next process's start ends it
    found.append(Segment(m.group(2), m.group(0), _time(m.group(1)), text=text))
  if found and found[-1].end is None and wall_s is not None:
    found[-1].end = found[0].start + wall_s
  return found
