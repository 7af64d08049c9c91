"""Running a sweep: every unfinished run as `tfm train` then `tfm eval`, K at once on device shares.

Each run is a pair of child processes in its workdir (ROOT/NAME), their output appended to
ROOT/NAME/sweep.log. A run whose ROOT/NAME/sweep_result.json says "ok" for its config's step count
is finished and skipped (a run that stopped early, train.patience, trained to its end); an
interrupted one resumes from its checkpoints (tfm train does that); a
failed one (any non-zero exit) gets status "failed" with the last line of its log, and the sweep goes
on with the others. The dataset and one shared vocabulary (ROOT/vocab, unless data.vocab_dir is set)
are prepared once, before any run starts, so parallel runs never build them concurrently.

Each run has its share of the machine (tfm/sweep/shares.py: --parallel K of its GPUs or cores).

A stack's members are evaluated one after the other, and each run's result is handed on (to
--publish) the moment its evaluation is on disk, before the next member's evaluation starts.
SIGINT / SIGTERM stop the children with SIGTERM (each saves its current step) and end the sweep; a
member whose evaluation had ended is kept, and rerunning the same command resumes the rest.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Callable, Sequence, TextIO

from tfm import config as config_lib
from tfm import storage
from tfm.sweep.result import RunResult
from tfm.sweep import stacking
from tfm.sweep import runs as runs_lib
from tfm.sweep.runs import Run
from tfm.sweep.shares import Share
from tfm.train.progress import duration

RESULT = "sweep_result.json"

# Where a run's figures also go (tfm/train/trackers/__init__.py): they change no figure of the run.
TRACKER_KEYS = ("train.trackers", "train.mlflow_tracking_uri", "train.tracker_experiment",
                "train.wandb_mode", "train.wandb_entity")
# Paths that name this machine's directories: two machines running the same run differ in them;
# and the trackers.
MACHINE_KEYS = ("data.data_dir", "data.manual_dir", "data.cache_dir", "data.vocab_dir",
                "train.compilation_cache_dir") + TRACKER_KEYS
LOG = "sweep.log"
POLL_SECONDS = 0.5  # how often the sweep looks at its children


def read_result(workdir: str) -> RunResult | None:
  path = os.path.join(workdir, RESULT)
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    return RunResult.from_json(json.load(f))


def write_result(workdir: str, result: RunResult) -> None:
  storage.write_json(os.path.join(workdir, RESULT), result.to_json())


def is_finished(workdir: str, steps: int) -> bool:
  result = read_result(workdir)
  return result is not None and result.finished(steps)


# srun's summary of how a task ended ("srun: error: NODE: task 0: Exited with exit code 2") names no
# cause, and in a SLURM task's output it may come after the line that does.
_SRUN_SUMMARY = re.compile(r"^srun: error: \S+: tasks? [\d,-]+: ")


def last_error_line(log_path: str) -> str:
  """What a log says went wrong: its last line naming an error or from tfm, else its last line."""
  try:
    with open(log_path, encoding="utf-8", errors="replace") as f:
      lines = [line.strip() for line in f if line.strip()]
  except OSError:
    return "no log"
  errors = [line for line in lines if ("error" in line.lower() and not _SRUN_SUMMARY.match(line))
            or line.startswith("tfm ")]
  return (errors or lines or ["no output"])[-1][:500]


def eval_argv(workdir: str, eval_limit: int | None) -> list[str]:
  """`tfm eval`'s arguments for a run of the sweep: its dev split, BLEU over the first eval_limit
  pairs (0: every pair; None: an lm or mlm run's, which has no BLEU)."""
  return (["eval", f"--workdir={workdir}", "--split=dev"]
          + ([] if eval_limit is None else [f"--limit={eval_limit}"]))


class Job:
  """The runs of one share: `tfm train` (one run, or a group's seeds as one stack: `tfm train
  --seeds`, tfm/train/stack.py), then `tfm eval` of each run in turn (and `tfm eval --checkpoint
  ema` of a run that keeps an EMA, train.ema_decay); poll() advances it."""

  def __init__(self, runs: Sequence[Run], workdirs: Sequence[str], train_argv: list[str],
               share: Share, eval_limit: int, describe: Callable[[Run, str, float], RunResult],
               steps: int):
    self.runs, self.workdirs, self.share = list(runs), list(workdirs), share
    self.eval_limit, self.describe, self.steps = eval_limit, describe, steps
    self.start = time.time()
    self.phase, self.proc, self.log = None, None, None
    self.results: list[RunResult] = []
    for workdir in self.workdirs:
      os.makedirs(workdir, exist_ok=True)
      if os.path.exists(os.path.join(workdir, RESULT)):
        os.remove(os.path.join(workdir, RESULT))  # a new attempt: no stale verdict meanwhile
    self.train_from = self._log_size(0)
    self._launch("train", train_argv, 0)

  @property
  def name(self) -> str:
    return ", ".join(r.name for r in self.runs)

  def _log_size(self, k: int) -> int:
    path = os.path.join(self.workdirs[k], LOG)
    return os.path.getsize(path) if os.path.exists(path) else 0

  def _launch(self, phase: str, argv: list[str], k: int) -> None:
    """Starts `tfm ARGV`, its output appended to run k's log."""
    self.phase = phase
    self.log = open(os.path.join(self.workdirs[k], LOG), "a", encoding="utf-8")
    self.log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} tfm {' '.join(argv)}\n")
    self.log.flush()
    # Each tfm process its own W&B service (train.trackers), as run alone: W&B names the service
    # the sweep started (recording a finished run's figures) in $WANDB_SERVICE, and a run sharing
    # it would lose its figures when the sweep ends first and hold its run id when killed.
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    self.proc = subprocess.Popen(
        [sys.executable, "-m", "tfm.cli", *argv], stdout=self.log, stderr=subprocess.STDOUT,
        env={**env, **self.share.env, "PYTHONUNBUFFERED": "1"})

  def _ended(self, code: int) -> None:
    """The child's end in its log (`=== TIME tfm PHASE exit CODE`: where a run's seconds went,
    experiments/gpu/run_seconds.py), the log closed; a stack's training output into every
    member's log."""
    if self.log.closed:
      return
    self.log.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} tfm {self.phase} exit {code}\n")
    self.log.close()
    if self.phase == "train":
      self._share_train_log()

  def _share_train_log(self) -> None:
    """A stack's training output, written to its first run's log, into every other run's."""
    if len(self.runs) == 1:
      return
    with open(os.path.join(self.workdirs[0], LOG), encoding="utf-8", errors="replace") as f:
      f.seek(self.train_from)
      text = f.read()
    for workdir in self.workdirs[1:]:
      with open(os.path.join(workdir, LOG), "a", encoding="utf-8") as f:
        f.write(text)

  def _evaluate(self, k: int, checkpoint: str | None = None) -> None:
    """`tfm eval` of run k: its checkpoints averaged, or its EMA (checkpoint 'ema')."""
    self._launch("eval" if checkpoint is None else f"eval_{checkpoint}",
                 eval_argv(self.workdirs[k], self.eval_limit)
                 + ([] if checkpoint is None else [f"--checkpoint={checkpoint}"]), k)

  def _keeps_ema(self, k: int) -> bool:
    """Run k's config keeps an EMA of its parameters (train.ema_decay): the sweep scores it too."""
    try:
      with open(os.path.join(self.workdirs[k], "config.json"), encoding="utf-8") as f:
        return json.load(f)["train"].get("ema_decay", 0) > 0
    except (OSError, ValueError, KeyError):
      return False

  @property
  def done(self) -> bool:
    """Every run of the job has its result (ok, failed or stopped)."""
    return len(self.results) == len(self.runs)

  def poll(self) -> list[RunResult]:
    """The results that ended since the last poll: a stack's members one at a time, each as soon
    as its evaluation is on disk (so a sweep publishes it then, not when the whole stack ends);
    [] while nothing ended. `done` says when every run has its result."""
    ended = len(self.results)
    self._advance()
    return self.results[ended:]

  def _advance(self) -> None:
    if self.done:
      return
    if self.phase == "evaluated":  # the last poll returned a member's result: now the next one
      self._evaluate(len(self.results))
      return
    code = self.proc.poll()
    if code is None:
      return
    self._ended(code)
    k = len(self.results)  # the run being evaluated (the train phase: all of them)
    if code in (-signal.SIGTERM, 128 + signal.SIGTERM):  # a TERM to the group: a preemption
      self._finish_rest("stopped", f"tfm {self.phase} was stopped by SIGTERM; run the sweep "
                        "again to resume it")
      return
    if code != 0:
      self._finish_rest("failed", f"tfm {self.phase} exited with {code}: "
                        f"{last_error_line(os.path.join(self.workdirs[k], LOG))}")
      return
    if self.phase == "train":
      reached = min(stacking.reached(w, self.steps) for w in self.workdirs)
      if reached < self.steps:  # `tfm train` exits 0 after a SIGTERM's save too
        self._finish_rest("stopped", f"tfm train stopped at step {reached} of {self.steps}; "
                          "run the sweep again to resume it")
        return
      self._evaluate(0)
      return
    if self.phase == "eval" and self._keeps_ema(k):  # then its EMA, beside the average
      self._evaluate(k, "ema")
      return
    self.results.append(self._finish(k, "ok", None))
    self.phase = "evaluated"  # the next member's evaluation starts at the next poll, after the
    # sweep has published this one

  def _finish_rest(self, status: str, error: str | None) -> None:
    """Every run without a result yet ends so."""
    for k in range(len(self.results), len(self.runs)):
      self.results.append(self._finish(k, status, error))

  def _finish(self, k: int, status: str, error: str | None) -> RunResult:
    result = self.describe(self.runs[k], self.workdirs[k], time.time() - self.start)
    if status == "ok" and result.dev_ppl is None:
      # tfm eval prints its figures and exits 0 where it cannot save them (a full or read-only
      # disk): without them on disk the run is not finished.
      status, error = "stopped", (f"tfm eval saved no dev figures in {self.workdirs[k]} (the end "
                                  "of its log says why); run the sweep again to evaluate it")
    result = result.ended(status, error)
    write_result(self.workdirs[k], result)
    return result

  def terminate(self) -> None:
    if self.proc.poll() is None:
      self.proc.send_signal(signal.SIGTERM)

  def harvest(self) -> list[RunResult]:
    """After terminate() and its child's end: the member whose evaluation had ended well before the
    stop, ok (as poll would have had it); the others keep no result, and the next sweep resumes
    them."""
    k = len(self.results)
    if self.done or self.phase == "evaluated":
      return []
    self._ended(self.proc.returncode)
    if self.proc.returncode != 0:
      return []
    if self.phase == "eval_ema" or (self.phase == "eval" and not self._keeps_ema(k)):
      self.results.append(self._finish(k, "ok", None))
    return self.results[k:]


def run_all(runs: Sequence[Run], root: str, *, shares: Sequence[Share], vocab_dir: str | None,
            eval_limit_of: Callable[[Run], int], steps_of: Callable[[Run], int],
            describe: Callable[[Run, str, float], RunResult], stream: TextIO | None = None,
            on_result: Callable[[RunResult], None] | None = None,
            stack: bool = False, stack_most: int = 0,
            stack_key: Callable[[Run], str] | None = None) -> list[RunResult]:
  """Runs every unfinished run, len(shares) jobs at a time; returns the results of the runs it ran.
  stream: where progress goes (default: sys.stdout as it is when called); on_result: called with
  each run's result as it ends (tfm sweep --publish); stack: a group's unfinished seeds train as
  one stack (tfm train --seeds) in one share, at most stack_most of them (0: all); stack_key: which
  runs may stack (groups' key; default: a group's seeds)."""
  stream = stream or sys.stdout
  workdir = lambda run: os.path.join(root, run.name)
  pending_runs = [r for r in runs if not is_finished(workdir(r), steps_of(r))]
  pending = stacking.groups(pending_runs, stack, stack_most,
                            stacking.resuming_key(pending_runs, stack_key, workdir, steps_of))
  done_before = len(runs) - len(pending_runs)
  print(f"[sweep] {len(runs)} runs under {root}: {done_before} finished before, "
        f"{len(pending_runs)} to run" + (f" in {len(pending)} stacks" if stack else "")
        + f", {len(shares)} at a time ({', '.join(s.name for s in shares)})", file=stream,
        flush=True)
  active: dict[int, Job] = {}
  results, start, stop = [], time.time(), []

  def interrupt(signum, frame):
    stop.append(signum)

  def train_argv(group: list[Run]) -> list[str]:
    return runs_lib.stack_train_argv(group, root, vocab_dir)  # a group of one: the run's own

  previous = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
  try:
    while (pending or active) and not stop:
      for slot, share in enumerate(shares):
        if slot not in active and pending and not stop:
          group = pending.pop(0)
          active[slot] = Job(group, [workdir(r) for r in group], train_argv(group), share,
                             eval_limit_of(group[0]), describe, steps_of(group[0]))
          print(f"[sweep] start {active[slot].name} on {share.name}", file=stream, flush=True)
      time.sleep(POLL_SECONDS)
      for slot, job in list(active.items()):
        ended = job.poll()  # a stack's members one at a time, each as its evaluation lands
        if job.done:
          del active[slot]
        for result in ended:
          results.append(result)
          if on_result is not None:
            on_result(result)
          failed = sum(not r.ok for r in results)
          done = done_before + len(results)
          elapsed = time.time() - start
          left = sum(len(g) for g in pending)
          eta = eta_seconds([r.wall_s for r in results], left,
                            [time.time() - j.start for j in active.values()], len(shares))
          ppl = float("nan") if result.dev_ppl is None else result.dev_ppl
          print(f"[sweep] {done}/{len(runs)} done ({failed} failed so far) | {result.name} "
                f"{result.status}" + (f": {result.error}" if result.error else
                                      f", dev PPL {ppl:.2f}")
                + f" | elapsed {duration(elapsed)}, ETA {duration(eta)}", file=stream, flush=True)
  finally:
    for job in active.values():
      job.terminate()
    for job in active.values():
      job.proc.wait()
      for result in job.harvest():  # an evaluation that ended just before the stop: kept
        results.append(result)
        if on_result is not None:
          on_result(result)
        print(f"[sweep] {result.name} ok (evaluated before the stop)", file=stream, flush=True)
    for s, handler in previous.items():
      signal.signal(s, handler)
  if stop:
    raise KeyboardInterrupt("sweep interrupted: the running runs saved their step; rerun the same "
                            "command to resume")
  return results


def eta_seconds(durations: list[float], pending: int, running_for: list[float],
                slots: int) -> float:
  """Seconds left of a sweep whose finished runs took `durations` (> 0 of them), with `pending`
  runs to start and runs that have been running for `running_for` seconds, `slots` at a time:
  the work left at the mean duration (a running run has the mean less its time so far), shared
  by the slots."""
  mean = sum(durations) / len(durations)
  return (pending * mean + sum(max(mean - t, 0.0) for t in running_for)) / slots


def collect(root: str) -> list[RunResult]:
  """Every run result under root (finished or failed), in sweep order."""
  results = [read_result(os.path.dirname(path))
             for path in glob.glob(os.path.join(root, "*", RESULT))]
  return sorted(results, key=lambda r: (_row_order(r.row), r.index, r.name))


def _row_order(row: str | None) -> tuple:
  """Table rows in the paper's order (base, A1..E9, then the rest, e.g. big) whichever invocations
  of the sweep ran them; runs of a grid (no row) keep their sweep order."""
  if row is None:
    return (0,)
  if row == "base":
    return (1,)
  letter, number = row[:1], row[1:]
  if len(row) <= 3 and letter.isupper() and (number.isdigit() or not number):
    return (2, letter, int(number or 0))
  return (3, row)


def changed_keys(config: config_lib.Config, reference: config_lib.Config,
                 ignore: Sequence[str] = MACHINE_KEYS) -> dict:
  """{'section.key': value} of every value of `config` that differs from `reference`, less the
  paths that name this machine's directories."""
  out = {}
  for section in config_lib.SECTIONS:
    ours, theirs = config.to_dict()[section], reference.to_dict()[section]
    for key, value in ours.items():
      name = f"{section}.{key}"
      if value != theirs.get(key) and name not in ignore:
        out[name] = list(value) if isinstance(value, tuple) else value
  return out
