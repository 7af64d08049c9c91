"""A sweep on a SLURM cluster: its unfinished runs as one job array, and where each run stands.

`tfm sweep --slurm` submits one array whose task i runs the sweep's run i (`tfm sweep ...
--run_index=i`), which trains and evaluates it through tfm/sweep/execute.py exactly as the local
sweep does: the same workdir ROOT/NAME, its sweep.log and its sweep_result.json, finished runs
skipped. The run is the task's job step (tfm/slurm_step.sh), which SLURM's SIGTERM reaches ahead of
the time limit (`--signal=B:TERM@120`: the batch shell passes it on), at a preemption and at a
scancel, and `tfm train` saves its step; a preempted task is requeued (`--requeue`) and resumes
from its checkpoint. --parallel K becomes the array's throttle (%K); the user's sbatch options
come last, so they win. The array is submitted held and released once the data is prepared, so a
refused submission leaves nothing behind and no task starts before its dataset and vocabulary exist.

Each submission is recorded in ROOT/slurm/JOBID.json (every run of the sweep: its array index,
name, step count, and the description its sweep_result.json starts from); the tasks' own output
goes to ROOT/slurm/JOBID_INDEX.out. A run's state (states()) comes from its workdir and squeue,
never from accounting (sacct): done when its result says so, running or queued while squeue lists
its task, failed otherwise, with the error of its result, or, when the task ended without one (it
died before tfm could write it), the last line of the task's output, which is then recorded as the
run's failure.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shlex
import shutil
import subprocess
from typing import Sequence

from tfm import storage
from tfm.sweep import execute
from tfm.sweep.result import RunResult

RECORDS = "slurm"  # ROOT/slurm/: submission records and the array tasks' output
SIGNAL_S = 120  # SIGTERM this many seconds before a task's time limit
RUNNING = {"RUNNING", "COMPLETING", "CONFIGURING", "STAGE_OUT", "SIGNALING", "SUSPENDED", "STOPPED"}


def array_spec(indices: Sequence[int], parallel: int | None) -> str:
  """[0, 1, 2, 5] and 2 -> '0-2,5%2': sbatch's --array of these task indices, K at a time."""
  parts, start = [], None
  for i, index in enumerate(indices):
    start = index if start is None else start
    if i + 1 == len(indices) or indices[i + 1] != index + 1:
      parts.append(str(index) if start == index else f"{start}-{index}")
      start = None
  return ",".join(parts) + (f"%{parallel}" if parallel else "")


# Runs a command as the job's step so that every way SLURM ends a job reaches it with a SIGTERM
# (a preemption signals the job's steps alone, never a batch shell with no step), and requeues a
# preempted job once the step has saved.
STEP_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "slurm_step.sh")


def task_script(python: str, sweep_argv: Sequence[str], step_script: str = STEP_SCRIPT) -> str:
  """The batch script of every array task: this sweep's run number SLURM_ARRAY_TASK_ID, as a
  one-task job step (step_script: tfm/slurm_step.sh)."""
  return ("#!/bin/bash\n# One run of a tfm sweep: the array task's index is the run's index.\n"
          f"exec bash {shlex.quote(step_script)} --ntasks=1 -- {shlex.quote(python)} -m tfm.cli "
          f'{shlex.join(sweep_argv)} --run_index="$SLURM_ARRAY_TASK_ID"\n')


def sbatch_argv(root: str, array: str, user_args: Sequence[str], cwd: str) -> list[str]:
  """sbatch's command line for the array (held: submit() releases it)."""
  return ["sbatch", "--parsable", "--hold", f"--job-name=tfm-{os.path.basename(root)}",
          f"--array={array}", "--ntasks=1", f"--output={os.path.join(root, RECORDS)}/%A_%a.out",
          "--open-mode=append", "--requeue", f"--signal=B:TERM@{SIGNAL_S}", f"--chdir={cwd}",
          *user_args]


def _run(argv: list[str], what: str, stdin: str | None = None) -> str:
  proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
  if proc.returncode != 0:
    message = " ".join(proc.stderr.split()) or f"exit code {proc.returncode}"
    raise ValueError(f"{what}: {message}")
  return proc.stdout


def submit_held(argv: list[str], script: str, user_args: Sequence[str]) -> str:
  """Submits the held array; returns its job id (or raises with sbatch's own message)."""
  given = f" (--sbatch_args={shlex.join(user_args)})" if user_args else ""
  out = _run(argv, f"sbatch refused the sweep's job array{given}", script)
  return out.strip().split(";")[0]  # --parsable: JOBID[;CLUSTER]


def release(job: str) -> None:
  _run(["scontrol", "release", job], f"scontrol could not release job {job}")


def cancel(job: str) -> None:
  subprocess.run(["scancel", job], capture_output=True, check=False)


def write_record(root: str, job: str, runs: list[dict]) -> str:
  """ROOT/slurm/JOB.json: the job and every run of the sweep ({index, name, steps, submitted,
  description}); written whole or not at all."""
  path = os.path.join(root, RECORDS, f"{job}.json")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  storage.write_json(path, dict(job=job, runs=runs))
  return path


@dataclasses.dataclass(frozen=True)
class RunState:
  name: str
  state: str  # done, running, queued or failed
  detail: str  # the scores, the array task and its squeue state, or the error


def _records(root: str) -> list[dict]:
  """The submissions under root, oldest first (job ids grow)."""
  records = []
  for path in glob.glob(os.path.join(root, RECORDS, "*.json")):
    with open(path, encoding="utf-8") as f:
      records.append(json.load(f))
  return sorted(records, key=lambda r: int(r["job"]))


def _queue() -> dict[tuple[str, str], tuple[str, str]]:
  """(job, array index) -> (state, reason) of every array task squeue lists."""
  if shutil.which("squeue") is None:
    raise ValueError("no squeue on PATH: where each run of a --slurm sweep stands comes from squeue "
                     "(run it where the sweep was submitted)")
  out = _run(["squeue", "--array", "--noheader", "--format=%F|%K|%T|%r"], "squeue failed")
  tasks = {}
  for line in out.splitlines():
    job, index, state, reason = line.strip().split("|", 3)
    tasks[(job, index)] = (state, reason)
  return tasks


def task_log(root: str, job: str, index: int | str) -> str:
  """Where array task JOB_INDEX's output goes (sbatch --output)."""
  return os.path.join(root, RECORDS, f"{job}_{index}.out")


def states(root: str) -> list[RunState]:
  """Every run submitted under root, in sweep order: done, running, queued or failed. A task
  that ended without a result has its run's failure recorded from the task's output."""
  records = _records(root)
  if not records:
    raise ValueError(f"--root {root}: no sweep submitted with --slurm here (expected "
                     f"{os.path.join(root, RECORDS, 'JOBID.json')}, written by tfm sweep --slurm)")
  latest: dict[str, tuple[dict, dict | None]] = {}  # name -> (run, the record that submitted it)
  for record in records:
    for run in record["runs"]:
      submitted = record if run["submitted"] else latest.get(run["name"], (None, None))[1]
      latest[run["name"]] = (run, submitted)
  queue = _queue()
  return [_state(root, run, record, queue) for run, record in
          sorted(latest.values(), key=lambda item: item[0]["index"])]


def in_queue(root: str) -> set[str]:
  """The runs under root whose array task squeue lists (queued or running): not to submit again."""
  if not _records(root):
    return set()
  return {s.name for s in states(root) if s.state in ("queued", "running")}


def _state(root: str, run: dict, record: dict | None, queue) -> RunState:
  workdir = os.path.join(root, run["name"])
  task = None if record is None else (record["job"], str(run["index"]))
  label = None if task is None else "_".join(task)
  result = execute.read_result(workdir)
  if execute.is_finished(workdir, run["steps"]):
    return RunState(run["name"], "done", _scores(result))
  if task in queue:
    state, reason = queue[task]
    if state in RUNNING:
      return RunState(run["name"], "running", f"job {label} {state.lower()}")
    return RunState(run["name"], "queued", f"job {label} {state.lower()} ({reason})")
  if result is not None:
    return RunState(run["name"], "failed", result.error or result.status)
  if task is None:
    return RunState(run["name"], "failed", "not finished and never submitted: run tfm sweep "
                    "--slurm again")
  log = task_log(root, *task)
  error = (f"job {label} ended without a result: {execute.last_error_line(log)}"
           if os.path.exists(log) else f"job {label} ended without starting (no {log})")
  os.makedirs(workdir, exist_ok=True)
  execute.write_result(workdir, RunResult.from_json(run["description"]).ended("failed", error))
  return RunState(run["name"], "failed", error)


def _scores(result: RunResult) -> str:
  if result.dev_ppl is None:
    return "no dev evaluation"
  return f"dev PPL {result.dev_ppl:.2f}, BLEU {result.bleu:.2f}"
