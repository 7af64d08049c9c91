"""The GPU queue's call on the GPU machine (experiments/gpu_queue.py --out=OUT): the tables'
runs and the timing jobs started as the plan allows, stopped at the stop time, and OUT written
(the module docstring of experiments/gpu_queue.py says what it holds)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from experiments.gpu import call_record, carry, dispatch, kernels, queue_jobs
from experiments.gpu import plan as plan_lib
from experiments.gpu.published import published_fingerprint
from experiments.gpu.queue_call import PLAN_MARGIN_S, ROOT, SLACK, STOP_SAFETY_S, Log, Options
from experiments.gpu.queue_tables import bundle_data, prepare_table, site_path
from experiments.gpu.seconds import Seconds
from experiments.gpu.travel import travelling_bytes

POLL_S = 2.0
FAILED_FIRST = 3  # jobs failed before any ended well: a broken setup, the queue stops starting


class Launched:
  """A job's process, its output in the logs folder."""

  def __init__(self, argv: list[str], env: dict[str, str], log: Path):
    self.log = open(log, "a", encoding="utf-8")
    self.log.write(f"$ {' '.join(argv)}\n")
    self.log.flush()
    self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                 start_new_session=True)

  def poll(self) -> str | None:
    code = self.proc.poll()
    if code is None:
      return None
    self.log.close()
    return "ok" if code == 0 else "stopped" if code in (-signal.SIGTERM, 143) else "failed"


def stop_all(handles: list[Launched], kill_at: float) -> None:
  """SIGTERM to each job's process group at once (the sweeps pass it on: the runs save), SIGKILL at
  kill_at to what still runs."""
  for h in handles:
    if h.proc.poll() is None:
      os.killpg(h.proc.pid, signal.SIGTERM)
  for h in handles:
    try:
      h.proc.wait(timeout=max(0.1, kill_at - time.monotonic()))
    except subprocess.TimeoutExpired:
      os.killpg(h.proc.pid, signal.SIGKILL)
      h.proc.wait()


def write_tar(files: list[tuple[Path, str]], target: Path) -> None:
  with tarfile.open(target.with_suffix(".tmp"), "w:gz") as tar:
    for path, name in files:
      tar.add(path, arcname=name)
  os.replace(target.with_suffix(".tmp"), target)


def child_env(o: Options, site: Path | None) -> dict[str, str]:
  paths = [str(ROOT), *([str(site)] if site else []), *filter(None, [os.environ.get("PYTHONPATH")])]
  env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(paths)}
  env["JAX_PLATFORMS"] = "cpu" if o.quick else "cuda"
  return env


MACHINE_START_S = 600  # a machine up for less when the queue starts was started for this call


def machine_start(o: Options) -> float:
  """The seconds the machine took to start before this command: its uptime when the queue began,
  where it was started for this call (up for less than MACHINE_START_S); else 0 (a machine that
  ran earlier commands, or this CPU with --quick)."""
  try:
    up = float(Path("/proc/uptime").read_text().split()[0]) - (time.monotonic() - o.start)
  except (OSError, ValueError, IndexError):
    return 0.0
  return up if 0 < up < MACHINE_START_S and not o.quick else 0.0


def on_node(o: Options, log: Log, out: Path) -> int:
  """The call (the module docstring): 0 once OUT is written."""
  # pylint: disable=import-outside-toplevel
  from experiments.gpu.mps import start_mps, stop_mps
  from experiments.gpu.node import device_name
  node_start = machine_start(o)
  out.mkdir(parents=True, exist_ok=True)
  root = o.root.resolve()
  logs = root / "logs"
  logs.mkdir(parents=True, exist_ok=True)
  deadline_at = o.start + 60 * o.deadline
  seconds = Seconds.load(o.seconds)
  slots = o.slot_count()
  stop_at = deadline_at - seconds["stop"] - STOP_SAFETY_S
  horizon_at = stop_at - PLAN_MARGIN_S
  site = site_path(o)
  from tfm.sweep import stacking  # pylint: disable=import-outside-toplevel  (after the wheels)
  env = child_env(o, site)
  candidate = next(c for c in kernels.CANDIDATES if c.name == "c")
  env = env if o.quick else candidate.env(env)
  record: dict = {"device": "CPU (--quick)" if o.quick else device_name(),
                  "started": datetime.datetime.fromtimestamp(o.epoch0, datetime.timezone.utc)
                  .isoformat(timespec="seconds"), "deadline_min": o.deadline, "slots": slots,
                  "kernels": candidate.record(), "notes": []}
  record["mps"] = ("off: --quick" if o.quick else "off: --mps=off" if o.mps == "off"
                   else start_mps(env))
  told = []  # (signal, when): the call was told to end; its jobs are stopped, OUT written as at
  # the stop time (a node's timeout TERMs the command: what ended published still comes back)

  def on_term(signum, _frame):
    if not told:
      told.append((signal.Signals(signum).name, time.monotonic()))
  signal.signal(signal.SIGTERM, on_term)
  signal.signal(signal.SIGINT, on_term)
  log.say(f"{record['device']}; MPS {record['mps']}; deadline {o.deadline} min, stop at "
          f"{stop_at - o.start:.0f} s, {slots} slots")

  tables = {}
  for table in queue_jobs.TABLES:
    if table.name not in o.jobs:
      continue
    try:
      tables[table.name] = prepare_table(o, table, candidate)
    except ValueError as e:
      record["notes"].append(str(e))
      log.say(f"{table.name}: left out: {e}")
  # What an earlier call left: the carried checkpoints, and this machine's own roots.
  fingerprints = {(p.table.name, r.name): r.fingerprint for p in tables.values() for r in p.runs
                  if not r.published}
  reached = {}
  for p in tables.values():
    p.root.mkdir(parents=True, exist_ok=True)
    for r in p.runs:
      if not r.published and (p.root / r.name).is_dir():
        reached[(p.table.name, r.name)] = stacking.reached(str(p.root / r.name), r.steps)
  carried = o.carry_dir / carry.MANIFEST
  record["carry_in"] = json.loads(carried.read_text())["call"] if carried.exists() else None
  seeded, notes = carry.seed(o.carry_dir, {n: p.root for n, p in tables.items()},
                             fingerprints, reached)
  record["resumed_from_carry"] = {f"{t}/{n}": s for (t, n), s in seeded.items()}
  record["notes"] += notes
  reached.update(seeded)
  jobs, works = [], {}
  for p in tables.values():
    p.runs = [dataclasses.replace(r, resumes_from=reached.get((p.table.name, r.name), 0))
              for r in p.runs]
    got, w = queue_jobs.table_jobs(p.runs, seconds, o.quick,
                                     0.0 if o.quick else SLACK)
    jobs += got
    works.update(w)
  timing_names = [n for n in queue_jobs.TIMINGS if n in o.jobs]
  timing_rows = o.results.resolve() / "gpu" / "queue" / "rows.json"
  got, w = queue_jobs.timing_jobs(timing_names, seconds, timing_rows)
  jobs += got
  works.update(w)
  published_before = {(n, r.name) for n, p in tables.items() for r in p.runs if r.published}
  setup = time.monotonic() - o.start
  first = plan_lib.plan(jobs, [], horizon_at - time.monotonic(), slots, seconds.concurrency)
  record["plan"] = [{"job": s.job.name, "start": round(s.start, 1), "end": round(s.end, 1)}
                    for s in first]
  log.say(f"{len(jobs)} jobs wait; the plan takes {len(first)} "
          f"({', '.join(s.job.name for s in first) or 'none'}); set up in {setup:.0f} s")

  cache = root / "jax_cache"
  ended = {"ok": 0, "failed": 0}
  try:  # the forms job times Table 3 v3's base as its runs train: its bundle, its kernels
    forms_overrides = (bundle_data(o, queue_jobs.TABLES[0], o.bundle(queue_jobs.TABLES[0].bundle))
                       + (queue_jobs.QUICK if o.quick else []) + candidate.overrides()
                       + [f"train.compilation_cache_dir={cache}"])  # a form's repeat: loaded
  except ValueError:
    forms_overrides = []
  timing_out = {}

  def launch(job: plan_lib.Job) -> Launched:
    work = works[job.name]
    log = logs / re.sub(r"[^A-Za-z0-9_.-]+", "_", job.name)[:120]
    if work.timing:
      timing_out[work.timing] = logs / f"timing_{work.timing}.json"
      bundle = queue_jobs.TIMINGS[work.timing]
      extra = ([f"--bundle={o.bundle(bundle)}"] if bundle else [])
      if work.timing == "forms":
        extra += [f"--set={o}" for o in forms_overrides]
      argv = [sys.executable, "experiments/gpu/timings.py", work.timing,
              f"--out={timing_out[work.timing]}", f"--logs={logs}",
              *(["--quick"] if o.quick else []), *extra]
    else:
      p = tables[work.table.name]
      argv = queue_jobs.sweep_argv(work, p.root, p.publish, p.overrides, cache, slots, o.quick)
    return Launched(argv, env, log.with_suffix(".txt"))

  def poll(handle: Launched) -> str | None:
    outcome = handle.poll()
    if outcome in ended:
      ended[outcome] += 1
    return outcome

  def halt() -> bool:  # a setup that fails every job should not spend the call
    return ended["failed"] >= FAILED_FIRST and not ended["ok"]

  try:
    started = dispatch.run(jobs, slots=slots, horizon_at=horizon_at, stop_at=stop_at,
                           concurrency=seconds.concurrency, clock=time.monotonic, sleep=time.sleep,
                           launch=launch, poll=poll, halt=halt,
                           stop=lambda hs: stop_all(hs, min(deadline_at - 5,
                                                            time.monotonic() + STOP_SAFETY_S)),
                           poll_s=POLL_S, say=log.say, stop_now=lambda: bool(told))
  finally:
    if not o.quick and o.mps == "auto":
      stop_mps(env)
  stopped_any = any(s.outcome == "stopped" for s in started)
  if told:
    record["notes"].append(f"{told[0][0]} at {told[0][1] - o.start:.0f} s: every job stopped then")
    log.say(record["notes"][-1])
    stop_at = min(stop_at, told[0][1])

  # What ended published, and the files that come back.
  published_now, run_files = set(), []
  flops_ratio = {}
  for name, p in tables.items():
    for r in p.runs:
      flops_ratio[(name, r.name)] = r.flops_ratio
      if published_fingerprint(p.publish / r.name) == r.fingerprint and (name, r.name) not in (
          published_before):
        published_now.add((name, r.name))
        run_files += [(f, f"{name}/{r.name}/{f.name}")
                      for f in sorted((p.publish / r.name).iterdir())]
    vocab = p.publish / "vocab"
    if vocab.is_dir():
      run_files += [(f, f"{name}/vocab/{f.name}") for f in sorted(vocab.iterdir()) if f.is_file()]
  write_tar(run_files, out / "runs.tar.gz")
  rows = {"rows": {}, "numbers": {}}
  timings_ok = set()
  for name, path in timing_out.items():
    if path.exists():
      got = json.loads(path.read_text())
      rows["rows"][name], rows["numbers"][name] = got["rows"], got["numbers"]
      if not got["numbers"].get("error"):
        timings_ok.add(name)
  (out / "rows.json").write_text(json.dumps(rows, indent=1) + "\n")
  # The stopped runs: resumed by the next call, or restarted (experiments/gpu/carry.py).
  stopped = []
  for name, p in tables.items():
    for r in p.runs:
      workdir = p.root / r.name
      if (name, r.name) in published_now or r.published or not workdir.is_dir():
        continue
      step = stacking.reached(str(workdir), r.steps)
      if step:
        saved = step * seconds[f"step_s/{name}"] * max(1.0, r.flops_ratio)
        stopped.append(carry.Stopped(name, r.name, workdir, step, r.fingerprint, saved,
                                     carry.size(workdir)))
  room = carry.room(travelling_bytes([o.bundle(p.table.bundle) for p in tables.values()]))
  resumed, restarted = carry.choose(stopped, room)
  record["carry"] = {"room_mib": round(room / 2**20, 1),
                     "resumed": [{"run": f"{s.table}/{s.name}", "step": s.step,
                                  "mib": round(s.bytes / 2**20, 1)} for s in resumed],
                     "restarted": [{"run": n, "why": why} for n, why in restarted]}
  if resumed:
    carry.pack(resumed, out, record["started"])
  log_files = [(f, f"jobs/{f.name}") for f in sorted(logs.glob("*.txt"))]
  for name, p in tables.items():
    log_files += [(p.root / r.name / "sweep.log", f"{name}/{r.name}.log") for r in p.runs
                  if (p.root / r.name / "sweep.log").exists()]
  write_tar(log_files, out / "logs.tar.gz")
  spans = [call_record.JobSpan(
      s.job.name, s.start - o.start, (s.end or time.monotonic()) - o.start, s.outcome or "?",
      s.planned_end - o.start, works[s.job.name].table.name if works[s.job.name].table else None,
      works[s.job.name].runs, works[s.job.name].timing) for s in started]
  wall = time.monotonic() - o.start
  record.update(call_record.build(
      spans, epoch0=o.epoch0, wall=wall, node_start=node_start, setup=setup,
      stop=time.monotonic() - stop_at if stopped_any else None,
      roots={n: p.root for n, p in tables.items()}, published=published_now,
      timings_published=timings_ok, flops_ratio=flops_ratio, seconds=seconds))
  record["published"] = sorted(f"{t}/{n}" for t, n in published_now)
  record["timings_published"] = sorted(timings_ok)
  record["left"] = [j.name for j in jobs if all(s.job is not j and s.job not in j.split
                                                 for s in started)]
  record["wall_s"] = round(wall, 1)
  (out / "record.json").write_text(json.dumps(record, indent=1) + "\n")
  log.say(f"{len(published_now)} runs and {len(timings_ok)} timing jobs published in {wall:.0f} s "
          f"(published share {record['published_share']:.0%} of {record['total_s']:.0f} s with the "
          f"machine's start; the largest share other than steps: {record['largest_other']}); "
          f"{len(resumed)} stopped runs carried, {len(restarted)} restart")
  (out / "queue.txt").write_text("\n".join(log.lines) + "\n")
  return 0
