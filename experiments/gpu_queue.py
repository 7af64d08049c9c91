"""The GPU queue: one command works through every job that waits for a GPU, in one call of a few
minutes, starting only what is predicted to end before its deadline, publishing each run as it
ends, and leaving the next call what it could not finish (docs/gpu.md).

  python3 experiments/gpu_queue.py --out=$OUT --deadline=9.5    # on the GPU machine
  .venv/bin/python experiments/gpu_queue.py --import_from=OUT    # here: a call's results in
  .venv/bin/python experiments/gpu_queue.py --prepare            # here: bundles, the next call

The jobs, in this order, each skipped once published (experiments/gpu/queue_jobs.py): Table 3 v3's
runs (configs/table3_v3.py), the positions table (configs/positions.py), its language-model form
(configs/positions.py:lm), then the timing jobs (experiments/gpu/timings.py): the stacks probe
(v3 base alone and as stacks of 1, 2, 10), the forms (guard, dropout PRNG, input, at most 90 s;
the GPU's auto set from them on import), the step speed (base and big at the paper's batch in
bfloat16) and the trained loop against the step alone. A table's job is a `tfm sweep --publish`
of a row's seeds as one stack (or its runs, where the stack does not fit), up to --slots of them at
once on the GPU (NVIDIA's MPS where the machine has it), every run under candidate c's kernels
(experiments/gpu/kernels.py); a timing job runs alone.

Planning (experiments/gpu/plan.py, dispatch.py): each job's seconds are predicted from the table
of measured seconds (experiments/gpu/seconds.json), and a job starts only when the call simulated
with it still ends every job before the horizon (the deadline less the stop's seconds and a
margin); big only at a call's start. The queue plans again whenever a job ends.

At the stop (the deadline less its seconds) every running job gets SIGTERM: its runs save their
step; a stack member evaluated before it is published (tfm sweep publishes each member as its
evaluation lands). OUT receives at most 8 plain files: record.json (where the seconds went:
experiments/gpu/call_record.py; the plan; the jobs; the measurements), runs.tar.gz (every run
published in this call, TABLE/RUN/files), logs.tar.gz (every run's log and every job's output),
rows.json (the timing jobs' rows and figures), queue.txt (this command's output) and carry.tgz.N
(the stopped runs worth resuming, experiments/gpu/carry.py).

--import_from=OUT, here: the runs into experiments/results/<table>/ (a run published before under
the same fingerprint kept, another replaced) with each table's report rebuilt and the call's
share of seconds in its gpu_calls.jsonl; the timing figures into experiments/results/gpu/queue/
(rows.json, table.md; the forms' choice into tfm/train/platform_choices.py's GPU_MEASURED); the
record into experiments/results/gpu/queue/calls.jsonl; its measurements into the seconds table;
the carry into experiments/gpu/carry/. Nothing is committed; an OUT imported twice changes nothing
the second time.

--prepare, here: builds each bundle the next call may reach (experiments/gpu/make_bundle.py; the
tables in order while a call simulated from the published runs has room), then prints the call:
its command line, the folders it must carry, and their size with the checkout against the 64 MiB
that may travel.

--quick: the plumbing on the CPU, tiny configs (the tables' two cheapest rows, 12 steps); give
--results (its runs are no results).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

START = time.monotonic()  # the deadline counts from the process's start
EPOCH0 = time.time()

from absl import app, flags  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from experiments.gpu import call_record, carry, dispatch, kernels, queue_jobs  # noqa: E402  pylint: disable=wrong-import-position
from experiments.gpu import plan as plan_lib  # noqa: E402  pylint: disable=wrong-import-position
from experiments.gpu.published import (add_call, check_members, merge_runs,  # noqa: E402  pylint: disable=wrong-import-position
                                       published_fingerprint, rebuild_report)
from experiments.gpu.seconds import TABLE, Seconds  # noqa: E402  pylint: disable=wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "on the GPU machine: where the files that come back go")
flags.DEFINE_float("deadline", 9.5, "minutes for the whole command", lower_bound=0.5)
flags.DEFINE_string("import_from", None, "here: a call's returned files (OUT), imported")
flags.DEFINE_bool("prepare", False, "here: build the bundles the next call may reach and print it")
flags.DEFINE_bool("quick", False, "on the CPU: tiny configs, the plumbing (give --results)")
flags.DEFINE_list("jobs", list(queue_jobs.FAMILIES), "the job families, in the queue's order: "
                  f"{', '.join(queue_jobs.FAMILIES)}")
flags.DEFINE_list("rows", None, "the tables' rows (default: every row; --quick: each table's two "
                  "cheapest)")
flags.DEFINE_integer("slots", None, "jobs at once on the GPU (default 4, measured with MPS on an "
                     "H200: experiments/results/gpu/2026-11-27_h200_kernels; --quick 2)",
                     lower_bound=1)
flags.DEFINE_string("seconds", str(TABLE), "the table of measured seconds")
flags.DEFINE_string("results", str(ROOT / "experiments" / "results"), "the results: each table's "
                    "published runs in RESULTS/<table>, the timings' in RESULTS/gpu/queue")
flags.DEFINE_string("bundles", str(ROOT / "experiments" / "gpu"), "the folder of the bundles "
                    "(bundle_table3, bundle_positions, bundle_positions_lm, bundle)")
flags.DEFINE_string("carry_dir", str(ROOT / "experiments" / "gpu" / "carry"), "what a call leaves "
                    "the next (experiments/gpu/carry.py)")
flags.DEFINE_string("root", "/tmp/tfm_queue", "the runs' workdirs (ROOT/<table>/<run>), the jobs' "
                    "logs and the compilation cache")
flags.DEFINE_list("set", [], "config overrides (key=value) for every run of the tables")
flags.DEFINE_enum("mps", "auto", ["auto", "off"], "auto: NVIDIA's MPS where the machine has it")
flags.DEFINE_string("platform_choices", str(ROOT / "tfm" / "train" / "platform_choices.py"),
                    "--import_from: the file whose GPU_MEASURED line the forms' choice rewrites")

STOP_SAFETY_S = 15  # beyond the table's stop seconds: the jobs' SIGTERM saves, the packing
PLAN_MARGIN_S = 5  # planned jobs end this much before the stop
SLACK = 0.05  # a table job is planned 5% longer than the table predicts (none with --quick)
POLL_S = 2.0
FAILED_FIRST = 3  # jobs failed before any ended well: a broken setup, the queue stops starting
CHOICES_LINE = re.compile(r"^GPU_MEASURED: dict\[str, str\] = \{.*?\}", re.M)
LOG_LINES: list[str] = []


def say(message: str) -> None:
  line = f"[queue {time.monotonic() - START:6.1f} s] {message}"
  LOG_LINES.append(line)
  print(line, flush=True)


# ---------------------------------------------------------------------------------------------
# What the tables need: bundles, data overrides, their runs.

def bundle_of(name: str) -> Path:
  return Path(FLAGS.bundles).resolve() / name


def bundle_data(table: queue_jobs.Table, bundle: Path) -> list[str]:
  """The bundle's data settings as config overrides; they must be the table's (its vocabulary and
  token cache are keyed by them), except with --quick, whose bundle may be the tests'."""
  from tfm import config as config_lib  # pylint: disable=import-outside-toplevel
  hint = (f"build it with python experiments/gpu/make_bundle.py --config={table.config}:"
          f"{table.first_row} --out={bundle} (or --prepare)")
  manifest = bundle / "manifest.json"
  if not manifest.exists():
    raise ValueError(f"{table.name}: no bundle at {bundle}; {hint}")
  data = json.loads(manifest.read_text())["data"]
  wanted = config_lib.load_config(f"{ROOT / table.config}:{table.first_row}").data
  data.setdefault("text_key", None)
  wrong = {k: v for k, v in data.items() if getattr(wanted, k) != v}
  if "text_key" in wrong:
    raise ValueError(f"{table.name}: the bundle {bundle} has data.text_key {data['text_key']!r}, "
                     f"{table.config}'s is {wanted.text_key!r}; {hint}")
  if wrong and not FLAGS.quick:
    raise ValueError(f"{table.name}: the bundle {bundle} has data {wrong}, not {table.config}'s; "
                     f"{hint}")
  overrides = [f"data.data_dir={bundle / 'data'}", f"data.vocab_dir={bundle / 'data' / 'vocab'}"]
  overrides += [f"data.{k}={v}" for k, v in wrong.items() if v is not None]
  return overrides + ([f"model.vocab_size={wrong['vocab_size']}"] if "vocab_size" in wrong else [])


def cheapest_rows(table: queue_jobs.Table) -> list[str]:
  from tfm import config as config_lib  # pylint: disable=import-outside-toplevel
  from tfm.train import flops  # pylint: disable=import-outside-toplevel
  rows = list(config_lib.load_config(str(ROOT / table.config)).rows)
  cost = {r: flops.train_flops(config_lib.load_config(f"{ROOT / table.config}:{r}").model, 128, 128)
          for r in rows}
  return sorted(rows, key=lambda r: cost[r])[:2]


@dataclasses.dataclass
class Prepared:
  """A table ready to queue: its overrides, runs and root."""
  table: queue_jobs.Table
  overrides: list[str]
  runs: list[queue_jobs.RunInfo]
  root: Path
  publish: Path


def prepare_table(table: queue_jobs.Table, candidate: kernels.Candidate) -> Prepared:
  """The table's runs under this call's overrides (the bundle's data, --quick's, the kernels'
  precision, --set), each with its fingerprint and whether it is published."""
  overrides = (bundle_data(table, bundle_of(table.bundle))
               + (queue_jobs.QUICK if FLAGS.quick else []) + candidate.overrides() + FLAGS.set)
  if FLAGS.rows:  # the table's rows among them (none: the table runs nothing)
    from tfm import config as config_lib  # pylint: disable=import-outside-toplevel
    rows = [r for r in FLAGS.rows if r in config_lib.load_config(str(ROOT / table.config)).rows]
    if not rows:
      raise ValueError(f"{table.name}: none of --rows is its row")
  else:
    rows = cheapest_rows(table) if FLAGS.quick else None
  publish = Path(FLAGS.results).resolve() / table.name
  eval_limit = queue_jobs.QUICK_EVAL_LIMIT if FLAGS.quick else None
  runs = queue_jobs.table_runs(table, overrides, eval_limit, rows, publish, {})
  return Prepared(table, overrides, runs, Path(FLAGS.root).resolve() / table.name, publish)


def site_path() -> Path | None:
  """The carried wheels (from the first bundle there is), unpacked once; on this path too."""
  from experiments.gpu.node import carried_site  # pylint: disable=import-outside-toplevel
  for name in ["bundle_table3", "bundle_positions", "bundle_positions_lm", "bundle"]:
    if (bundle_of(name) / "wheels").is_dir():
      site = carried_site(bundle_of(name))
      if site and str(site) not in sys.path:
        sys.path.insert(0, str(site))
      return site
  return None


# ---------------------------------------------------------------------------------------------
# On the GPU machine.

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


def child_env(site: Path | None) -> dict[str, str]:
  paths = [str(ROOT), *([str(site)] if site else []), *filter(None, [os.environ.get("PYTHONPATH")])]
  env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(paths)}
  env["JAX_PLATFORMS"] = "cpu" if FLAGS.quick else "cuda"
  return env


MACHINE_START_S = 600  # a machine up for less when the queue starts was started for this call


def machine_start() -> float:
  """The seconds the machine took to start before this command: its uptime when the queue began,
  where it was started for this call (up for less than MACHINE_START_S); else 0 (a machine that
  ran earlier commands, or this CPU with --quick)."""
  try:
    up = float(Path("/proc/uptime").read_text().split()[0]) - (time.monotonic() - START)
  except (OSError, ValueError, IndexError):
    return 0.0
  return up if 0 < up < MACHINE_START_S and not FLAGS.quick else 0.0


def on_node(out: Path) -> int:
  # pylint: disable=import-outside-toplevel
  from experiments.gpu.mps import start_mps, stop_mps
  from experiments.gpu.node import device_name
  node_start = machine_start()
  out.mkdir(parents=True, exist_ok=True)
  root = Path(FLAGS.root).resolve()
  logs = root / "logs"
  logs.mkdir(parents=True, exist_ok=True)
  deadline_at = START + 60 * FLAGS.deadline
  seconds = Seconds.load(Path(FLAGS.seconds))
  slots = FLAGS.slots or (2 if FLAGS.quick else 4)
  stop_at = deadline_at - seconds["stop"] - STOP_SAFETY_S
  horizon_at = stop_at - PLAN_MARGIN_S
  site = site_path()
  from tfm.sweep import stacking  # pylint: disable=import-outside-toplevel  (after the wheels)
  env = child_env(site)
  candidate = next(c for c in kernels.CANDIDATES if c.name == "c")
  env = env if FLAGS.quick else candidate.env(env)
  record: dict = {"device": "CPU (--quick)" if FLAGS.quick else device_name(),
                  "started": datetime.datetime.fromtimestamp(EPOCH0, datetime.timezone.utc)
                  .isoformat(timespec="seconds"), "deadline_min": FLAGS.deadline, "slots": slots,
                  "kernels": candidate.record(), "notes": []}
  record["mps"] = ("off: --quick" if FLAGS.quick else "off: --mps=off" if FLAGS.mps == "off"
                   else start_mps(env))
  told = []  # (signal, when): the call was told to end; its jobs are stopped, OUT written as at
  # the stop time (a node's timeout TERMs the command: what ended published still comes back)

  def on_term(signum, _frame):
    if not told:
      told.append((signal.Signals(signum).name, time.monotonic()))
  signal.signal(signal.SIGTERM, on_term)
  signal.signal(signal.SIGINT, on_term)
  say(f"{record['device']}; MPS {record['mps']}; deadline {FLAGS.deadline} min, stop at "
      f"{stop_at - START:.0f} s, {slots} slots")

  tables = {}
  for table in queue_jobs.TABLES:
    if table.name not in FLAGS.jobs:
      continue
    try:
      tables[table.name] = prepare_table(table, candidate)
    except ValueError as e:
      record["notes"].append(str(e))
      say(f"{table.name}: left out: {e}")
  # What an earlier call left: the carried checkpoints, and this machine's own roots.
  fingerprints = {(p.table.name, r.name): r.fingerprint for p in tables.values() for r in p.runs
                  if not r.published}
  reached = {}
  for p in tables.values():
    p.root.mkdir(parents=True, exist_ok=True)
    for r in p.runs:
      if not r.published and (p.root / r.name).is_dir():
        reached[(p.table.name, r.name)] = stacking.reached(str(p.root / r.name), r.steps)
  carried = Path(FLAGS.carry_dir) / carry.MANIFEST
  record["carry_in"] = json.loads(carried.read_text())["call"] if carried.exists() else None
  seeded, notes = carry.seed(Path(FLAGS.carry_dir), {n: p.root for n, p in tables.items()},
                             fingerprints, reached)
  record["resumed_from_carry"] = {f"{t}/{n}": s for (t, n), s in seeded.items()}
  record["notes"] += notes
  reached.update(seeded)
  jobs, works = [], {}
  for p in tables.values():
    p.runs = [dataclasses.replace(r, resumes_from=reached.get((p.table.name, r.name), 0))
              for r in p.runs]
    got, w = queue_jobs.table_jobs(p.runs, seconds, FLAGS.quick,
                                     0.0 if FLAGS.quick else SLACK)
    jobs += got
    works.update(w)
  timing_names = [n for n in queue_jobs.TIMINGS if n in FLAGS.jobs]
  timing_rows = Path(FLAGS.results).resolve() / "gpu" / "queue" / "rows.json"
  got, w = queue_jobs.timing_jobs(timing_names, seconds, timing_rows)
  jobs += got
  works.update(w)
  published_before = {(n, r.name) for n, p in tables.items() for r in p.runs if r.published}
  setup = time.monotonic() - START
  first = plan_lib.plan(jobs, [], horizon_at - time.monotonic(), slots, seconds.concurrency)
  record["plan"] = [{"job": s.job.name, "start": round(s.start, 1), "end": round(s.end, 1)}
                    for s in first]
  say(f"{len(jobs)} jobs wait; the plan takes {len(first)} "
      f"({', '.join(s.job.name for s in first) or 'none'}); set up in {setup:.0f} s")

  cache = root / "jax_cache"
  ended = {"ok": 0, "failed": 0}
  try:  # the forms job times Table 3 v3's base as its runs train: its bundle, its kernels
    forms_overrides = (bundle_data(queue_jobs.TABLES[0], bundle_of(queue_jobs.TABLES[0].bundle))
                       + (queue_jobs.QUICK if FLAGS.quick else []) + candidate.overrides()
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
      extra = ([f"--bundle={bundle_of(bundle)}"] if bundle else [])
      if work.timing == "forms":
        extra += [f"--set={o}" for o in forms_overrides]
      argv = [sys.executable, "experiments/gpu/timings.py", work.timing,
              f"--out={timing_out[work.timing]}", f"--logs={logs}",
              *(["--quick"] if FLAGS.quick else []), *extra]
    else:
      p = tables[work.table.name]
      argv = queue_jobs.sweep_argv(work, p.root, p.publish, p.overrides, cache, slots, FLAGS.quick)
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
                           poll_s=POLL_S, say=say, stop_now=lambda: bool(told))
  finally:
    if not FLAGS.quick and FLAGS.mps == "auto":
      stop_mps(env)
  stopped_any = any(s.outcome == "stopped" for s in started)
  if told:
    record["notes"].append(f"{told[0][0]} at {told[0][1] - START:.0f} s: every job stopped then")
    say(record["notes"][-1])
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
  room = carry.room(travelling_bytes([bundle_of(p.table.bundle) for p in tables.values()]))
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
      s.job.name, s.start - START, (s.end or time.monotonic()) - START, s.outcome or "?",
      s.planned_end - START, works[s.job.name].table.name if works[s.job.name].table else None,
      works[s.job.name].runs, works[s.job.name].timing) for s in started]
  wall = time.monotonic() - START
  record.update(call_record.build(
      spans, epoch0=EPOCH0, wall=wall, node_start=node_start, setup=setup,
      stop=time.monotonic() - stop_at if stopped_any else None,
      roots={n: p.root for n, p in tables.items()}, published=published_now,
      timings_published=timings_ok, flops_ratio=flops_ratio, seconds=seconds))
  record["published"] = sorted(f"{t}/{n}" for t, n in published_now)
  record["timings_published"] = sorted(timings_ok)
  record["left"] = [j.name for j in jobs if all(s.job is not j and s.job not in j.split
                                                 for s in started)]
  record["wall_s"] = round(wall, 1)
  (out / "record.json").write_text(json.dumps(record, indent=1) + "\n")
  say(f"{len(published_now)} runs and {len(timings_ok)} timing jobs published in {wall:.0f} s "
      f"(published share {record['published_share']:.0%} of {record['total_s']:.0f} s with the "
      f"machine's start; the largest share other than steps: {record['largest_other']}); "
      f"{len(resumed)} stopped runs carried, {len(restarted)} restart")
  (out / "queue.txt").write_text("\n".join(LOG_LINES) + "\n")
  return 0


# ---------------------------------------------------------------------------------------------
# Here: the import.

def write_choices(path: Path, chosen: dict[str, str]) -> bool:
  """The forms' choice as platform_choices.py's GPU_MEASURED line; False where it says so already."""
  text = path.read_text()
  line = f"GPU_MEASURED: dict[str, str] = {json.dumps(dict(sorted(chosen.items())))}"
  if not CHOICES_LINE.search(text):
    raise ValueError(f"{path}: no GPU_MEASURED line to write")
  new = CHOICES_LINE.sub(line.replace("\\", "\\\\"), text, count=1)
  if new == text:
    return False
  path.write_text(new)
  return True


def stack_factors(numbers: dict) -> dict[str, list[float]]:
  """stack/K from the stacks job's figures: a stack's step over the solo step's (K > 1: a run
  alone trains as no stack)."""
  solo = numbers.get("solo", {}).get("step_ms")
  if not solo:
    return {}
  stacks = numbers.get("stacks", {})
  return {f"stack/{k}": [round(v["step_ms"] / solo, 4)] for k, v in stacks.items()
          if v.get("step_ms") and int(k) > 1}


def import_call(source: Path) -> int:
  results = Path(FLAGS.results).resolve()
  record_path = source / "record.json"
  if not record_path.exists():
    raise app.UsageError(f"--import_from {source}: no record.json (a queue call's OUT is expected)")
  text = record_path.read_text()
  record, sha = json.loads(text), hashlib.sha256(text.encode("utf-8")).hexdigest()
  staging = results / f".import-{os.getpid()}"
  shutil.rmtree(staging, ignore_errors=True)
  archive = source / "runs.tar.gz"
  if archive.exists():
    with tarfile.open(archive) as tar:
      check_members(tar, 3, str(archive))
      tar.extractall(staging, filter="data")
  tables = {t.name for t in queue_jobs.TABLES}
  for folder in sorted(staging.iterdir()) if staging.exists() else []:
    if folder.name not in tables:
      raise app.UsageError(f"--import_from {archive}: {folder.name} is no table of the queue")
    publish = results / folder.name
    taken = merge_runs(folder, publish)
    share = sum(j["share_s"] for j in record.get("jobs", []) if j.get("table") == folder.name)
    mine = [r for r in record.get("published", []) if r.startswith(folder.name + "/")]
    add_call(publish, {"device": record.get("device"), "started": record.get("started"),
                       "seconds": round(share, 1), "published": mine}, sha)
    rebuild_report(publish)
    print(f"[import] {taken} runs into {publish}", flush=True)
  shutil.rmtree(staging, ignore_errors=True)
  queue_dir = results / "gpu" / "queue"
  queue_dir.mkdir(parents=True, exist_ok=True)
  rows_path = source / "rows.json"
  timing = json.loads(rows_path.read_text()) if rows_path.exists() else {"rows": {}, "numbers": {}}
  kept_path = queue_dir / "rows.json"
  kept = json.loads(kept_path.read_text()) if kept_path.exists() else {"rows": {}, "numbers": {}}
  measured = dict(record.get("measured", {}))
  for name, numbers in timing["numbers"].items():
    if numbers.get("error") and not kept["numbers"].get(name, {}).get("error", True):
      continue  # a failed timing never replaces figures
    kept["rows"][name], kept["numbers"][name] = timing["rows"][name], numbers
    if name == "stacks":
      measured.update(stack_factors(numbers))
    if name == "forms" and numbers.get("chosen") and write_choices(
        Path(FLAGS.platform_choices), numbers["chosen"]):
      print(f"[import] the GPU's auto forms: {numbers['chosen']} in {FLAGS.platform_choices}")
  kept_path.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")
  lines = ["# The GPU queue's timing jobs (experiments/gpu_queue.py), the latest figures of each",
           "", "| job | result |", "|---|---|"]
  lines += [row for name in queue_jobs.TIMINGS for row in kept["rows"].get(name, [])]
  (queue_dir / "table.md").write_text("\n".join(lines) + "\n")
  add_call(queue_dir, {k: v for k, v in record.items() if k != "measured"}, sha, "calls.jsonl")
  seconds = Seconds.load(Path(FLAGS.seconds))
  if record.get("device") != seconds.data.get("device"):
    print(f"[import] the record is of {record.get('device')!r}, the table of measured seconds of "
          f"{seconds.data.get('device')!r}: not refined")
  elif seconds.refine(measured, sha, f"the call of {record.get('started')} "
                      "(experiments/results/gpu/queue/calls.jsonl)"):
    seconds.save(Path(FLAGS.seconds))
    print(f"[import] {FLAGS.seconds}: refined by {sum(map(len, measured.values()))} measurements")
  carry_dir = Path(FLAGS.carry_dir)
  manifest = carry.unpack(source, carry_dir)
  if manifest:
    print(f"[import] {len(manifest['runs'])} stopped runs carried to the next call in {carry_dir}")
  elif (record.get("carry_in") and (carry_dir / carry.MANIFEST).exists() and json.loads(
      (carry_dir / carry.MANIFEST).read_text())["call"] == record["carry_in"]):
    shutil.rmtree(carry_dir)  # the call took this carry and left none: its runs resumed, or restart
    print(f"[import] {carry_dir}: the call resumed what it carried and left nothing to carry")
  print(f"[import] {source}: {len(record.get('published', []))} runs, timings "
        f"{record.get('timings_published', [])}; published share "
        f"{record.get('published_share')} of {record.get('total_s')} s", flush=True)
  return 0


# ---------------------------------------------------------------------------------------------
# What travels, and --prepare.

def folder_bytes(path: Path) -> int:
  """A carried folder's bytes as it travels: the wheels unpacked on a machine (site-cp3XY) left
  out, as --prepare removes them here before a call."""
  return sum(p.stat().st_size for p in Path(path).rglob("*")
             if p.is_file() and not any(part.startswith("site-cp") for part in p.parts))


def tree_bytes() -> int:
  """The checkout as a call sends it: git's tracked and untracked-not-ignored files; where there
  is no git (on the GPU machine, whose copy is what travelled), every file but the carried
  folders, the roots and caches."""
  listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                           "--exclude-standard"], capture_output=True, check=False)
  if listed.returncode == 0:
    files = (ROOT / f for f in listed.stdout.decode().split("\0") if f)
    return sum(f.stat().st_size for f in files if f.is_file())
  skip = ("carry", "site-cp", "bundle", "__pycache__")
  return sum(p.stat().st_size for p in ROOT.rglob("*") if p.is_file() and not any(
      part.startswith(skip) for part in p.relative_to(ROOT).parts))


def travelling_bytes(bundles: list[Path]) -> int:
  """The checkout and these bundles (each once)."""
  return tree_bytes() + sum(folder_bytes(b) for b in {b.resolve() for b in bundles} if b.exists())


def bundle_fresh(table_or_config: str, row: str, bundle: Path) -> bool:
  """The bundle exists with the config's data settings (--quick: exists)."""
  from tfm import config as config_lib  # pylint: disable=import-outside-toplevel
  manifest = bundle / "manifest.json"
  if not manifest.exists():
    return False
  if FLAGS.quick:
    return True
  data = json.loads(manifest.read_text())["data"]
  wanted = config_lib.load_config(f"{ROOT / table_or_config}:{row}").data
  return all(getattr(wanted, k) == v for k, v in data.items())


def build_bundle(config: str, row: str, bundle: Path) -> None:
  say(f"building {bundle} (make_bundle.py --config={config}:{row})")
  subprocess.run([sys.executable, "experiments/gpu/make_bundle.py", f"--config={config}:{row}",
                  f"--out={bundle}"], cwd=ROOT, check=True)


def carried_resumes(tables: dict[str, Prepared]) -> dict[tuple[str, str], int]:
  """The carry's runs whose fingerprints are their runs' now: {(table, run): step}."""
  manifest = Path(FLAGS.carry_dir) / carry.MANIFEST
  if not manifest.exists():
    return {}
  now = {(n, r.name): r.fingerprint for n, p in tables.items() for r in p.runs}
  return {(r["table"], r["name"]): r["step"] for r in json.loads(manifest.read_text())["runs"]
          if now.get((r["table"], r["name"])) == r["fingerprint"]}


def prepare() -> int:
  """Builds the bundles the next call may reach and prints the call (the module docstring)."""
  seconds = Seconds.load(Path(FLAGS.seconds))
  slots = FLAGS.slots or (2 if FLAGS.quick else 4)
  candidate = next(c for c in kernels.CANDIDATES if c.name == "c")
  horizon = (60 * FLAGS.deadline - seconds["queue_start"] - seconds["stop"] - STOP_SAFETY_S
             - PLAN_MARGIN_S)
  jobs: list[plan_lib.Job] = []
  reached: dict[str, Path] = {}  # the job families the call may reach, and their bundles
  tables: dict[str, Prepared] = {}
  resumes: dict[tuple[str, str], int] = {}
  for table in queue_jobs.TABLES:  # each table's bundle once the call has room for its jobs
    if table.name not in FLAGS.jobs:
      continue
    bundle = bundle_of(table.bundle)
    if not bundle_fresh(table.config, table.first_row, bundle):
      build_bundle(table.config, table.first_row, bundle)
    tables[table.name] = p = prepare_table(table, candidate)
    resumes.update(carried_resumes({table.name: p}))
    p.runs = [dataclasses.replace(r, resumes_from=resumes.get((table.name, r.name), 0))
              for r in p.runs]
    got, _ = queue_jobs.table_jobs(p.runs, seconds, FLAGS.quick,
                                     0.0 if FLAGS.quick else SLACK)
    jobs += got
    if got:
      reached[table.name] = bundle
    if len(plan_lib.plan(jobs, [], horizon, slots, seconds.concurrency)) < len(jobs):
      break  # the call is full before the next table
  else:  # every table fits: the timing jobs the plan takes, each with its bundle
    timing_rows = Path(FLAGS.results).resolve() / "gpu" / "queue" / "rows.json"
    got, _ = queue_jobs.timing_jobs([n for n in queue_jobs.TIMINGS if n in FLAGS.jobs], seconds,
                                    timing_rows)
    jobs += got
    taken = {s.job.name for s in plan_lib.plan(jobs, [], horizon, slots, seconds.concurrency)}
    for job in got:
      if job.name not in taken:
        continue
      name = job.name.split(":", 1)[1]
      bundle = queue_jobs.TIMINGS[name] or "bundle_table3"  # the wheels, at least
      if not (bundle_of(bundle) / "manifest.json").exists():
        if bundle == "bundle":  # configs/bible_base.py's corpus, make_bundle.py's default
          say(f"building {bundle_of(bundle)} (make_bundle.py: configs/bible_base.py)")
          subprocess.run([sys.executable, "experiments/gpu/make_bundle.py",
                          f"--out={bundle_of(bundle)}"], cwd=ROOT, check=True)
        else:
          build_bundle("configs/table3_v3.py", "base", bundle_of(bundle))
      reached[name] = bundle_of(bundle)
  planned = plan_lib.plan(jobs, [], horizon, slots, seconds.concurrency)
  for bundle in set(reached.values()):
    for site in bundle.glob("site-cp*"):
      shutil.rmtree(site)  # unpacked on the machine that runs the call
  paths = sorted({str(b.relative_to(ROOT)) if b.is_relative_to(ROOT) else str(b)
                  for b in reached.values()})
  carry_dir = Path(FLAGS.carry_dir).resolve()
  if (carry_dir / carry.MANIFEST).exists() and resumes:
    paths.append(str(carry_dir.relative_to(ROOT)) if carry_dir.is_relative_to(ROOT)
                 else str(carry_dir))
  tree = tree_bytes()
  carried = {p: folder_bytes(ROOT / p) for p in paths}
  total = tree + sum(carried.values())
  print(f"[prepare] the plan for one call of {FLAGS.deadline:g} minutes ({slots} slots, "
        f"{horizon:.0f} s to plan in): {len(planned)} of {len(jobs)} jobs")
  for s in planned:
    print(f"[prepare]   {s.start:5.0f}-{s.end:5.0f} s  {s.job.name}")
  print(f"[prepare] travels: the checkout {tree / 2**20:.1f} MiB + "
        + " + ".join(f"{p} {b / 2**20:.1f} MiB" for p, b in carried.items())
        + f" = {total / 2**20:.1f} MiB of {carry.CARRY_BYTES / 2**20:.0f} MiB")
  if total > carry.CARRY_BYTES:
    print(f"[prepare] over the {carry.CARRY_BYTES / 2**20:.0f} MiB a call may send: fewer "
          "folders, or the carry left out (its runs restart)", file=sys.stderr)
    return 1
  options = "".join(
      f" --{name}={value}" for name, value, default in (
          ("deadline", f"{FLAGS.deadline:g}", "9.5"), ("slots", FLAGS.slots, None),
          ("jobs", ",".join(FLAGS.jobs), ",".join(queue_jobs.FAMILIES)),
          ("rows", ",".join(FLAGS.rows or []), ""), ("set", ",".join(FLAGS.set), ""))
      if value not in (default, None))
  options += " --quick" if FLAGS.quick else ""
  print("[prepare] the call:")
  print(f'run(command="python3 experiments/gpu_queue.py --out=$OUT{options}", '
        f"carry={json.dumps(paths)}, timeout_s=600)")
  print("[prepare] then here, with the returned files' folder (files_at):")
  print(".venv/bin/python experiments/gpu_queue.py --import_from=FILES_AT")
  return 0


def main(argv):
  del argv
  os.environ["JAX_PLATFORMS"] = "cpu"  # this process never takes the GPU; its jobs do
  unknown = sorted(set(FLAGS.jobs) - set(queue_jobs.FAMILIES))
  if unknown:
    raise app.UsageError(f"--jobs: unknown {', '.join(unknown)}; expected some of "
                         f"{', '.join(queue_jobs.FAMILIES)}")
  if FLAGS.quick and FLAGS.results == str(ROOT / "experiments" / "results"):
    raise app.UsageError("--quick: give --results (its runs are no results)")
  try:
    if FLAGS.import_from:
      return import_call(Path(FLAGS.import_from).resolve())
    if FLAGS.prepare:
      return prepare()
    if not FLAGS.out:
      raise app.UsageError("--out=DIR is required (or --import_from=OUT, or --prepare)")
    out = Path(FLAGS.out).resolve()
    if out.is_dir() and any(out.iterdir()):  # an earlier call's carry parts would join this one's
      raise app.UsageError(f"--out={out}: not empty; a call writes its files into an empty folder")
    return on_node(out)
  except ValueError as e:
    raise app.UsageError(str(e)) from None


if __name__ == "__main__":
  app.run(main)
