"""The GPU table's time box: each job's processes run with a limit, their output streamed to a file
of the job's own, and stopped (the whole process group) when the limit or the deadline comes, so a
job that hangs costs its own time and no one else's (experiments/gpu_table.py)."""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path


@dataclasses.dataclass
class Run:
  """One process of a job: what it printed, how it ended."""
  name: str
  output: str = ""
  returncode: int | None = None
  seconds: float = 0.0
  timed_out: bool = False

  @property
  def ok(self) -> bool:
    return self.returncode == 0 and not self.timed_out

  def last_line(self) -> str:
    """The last error line of the output (a Python exception or a tfm error), else its last line."""
    lines = [line.strip() for line in self.output.splitlines() if line.strip()]
    errors = [line for line in lines
              if re.match(r"^([\w.]+(Error|Exception)|tfm \w+|preflight): ", line)]
    return (errors or lines or ["(no output)"])[-1][:200]

  def failure(self) -> str:
    if self.timed_out:
      return f"timed out after {self.seconds:.0f} s; last line: {self.last_line()}"
    return f"failed (exit {self.returncode}): {self.last_line()}"


class Runner:
  """Runs processes from `cwd` with the table's environment, output appended to OUT/<job>.txt as
  it comes, each stopped (its whole process group) at its job's end time or the deadline."""

  def __init__(self, out: Path, env: dict[str, str], deadline_at: float, cwd: Path):
    self.out, self.env, self.deadline_at, self.cwd = out, env, deadline_at, cwd

  def left(self) -> float:
    return self.deadline_at - time.monotonic()

  def run(self, job: str, name: str, argv: list[str], ends_at: float) -> Run:
    log = self.out / f"{job}.txt"
    with open(log, "a", encoding="utf-8") as f:
      f.write(f"$ {shlex.join(argv)}\n# {name}, started {datetime.datetime.now():%H:%M:%S}\n")
      f.flush()
      offset = f.tell()
      start = time.monotonic()
      process = subprocess.Popen(argv, cwd=self.cwd, stdout=f, stderr=subprocess.STDOUT,
                                 env=self.env, start_new_session=True)
      run = Run(name)
      try:
        run.returncode = process.wait(timeout=max(0.1, min(ends_at, self.deadline_at) - start))
      except subprocess.TimeoutExpired:
        run.timed_out = True
        _stop(process)
        run.returncode = process.returncode
      run.seconds = time.monotonic() - start
      with open(log, encoding="utf-8", errors="replace") as written:
        written.seek(offset)
        run.output = written.read()
      f.seek(0, os.SEEK_END)
      f.write(f"\n# {name}: {'timed out, stopped' if run.timed_out else 'exit'} "
              f"{run.returncode} after {run.seconds:.0f} s\n\n")
    return run


def _stop(process: subprocess.Popen) -> None:
  """SIGTERM to the process's group, SIGKILL 10 s later if it still runs."""
  for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 30)):
    try:
      os.killpg(process.pid, sig)
    except ProcessLookupError:
      return
    try:
      process.wait(timeout=wait)
      return
    except subprocess.TimeoutExpired:
      continue
