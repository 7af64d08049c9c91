"""Before a GPU call, here (experiments/gpu_queue.py --prepare): the bundles the next call may reach
built, and the call printed with what it must carry and its size against what may travel."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

from experiments.gpu import carry, kernels, queue_jobs
from experiments.gpu import plan as plan_lib
from experiments.gpu.queue_call import PLAN_MARGIN_S, ROOT, SLACK, STOP_SAFETY_S, Log, Options
from experiments.gpu.queue_tables import Prepared, prepare_table
from experiments.gpu.seconds import Seconds
from experiments.gpu.travel import folder_bytes, tree_bytes


def bundle_fresh(o: Options, table_or_config: str, row: str, bundle: Path) -> bool:
  """The bundle exists with the config's data settings (--quick: exists)."""
  from tfm import config as config_lib  # pylint: disable=import-outside-toplevel
  manifest = bundle / "manifest.json"
  if not manifest.exists():
    return False
  if o.quick:
    return True
  data = json.loads(manifest.read_text())["data"]
  wanted = config_lib.load_config(f"{ROOT / table_or_config}:{row}").data
  return all(getattr(wanted, k) == v for k, v in data.items())


def build_bundle(log: Log, config: str, row: str, bundle: Path) -> None:
  log.say(f"building {bundle} (make_bundle.py --config={config}:{row})")
  subprocess.run([sys.executable, "experiments/gpu/make_bundle.py", f"--config={config}:{row}",
                  f"--out={bundle}"], cwd=ROOT, check=True)


def carried_resumes(o: Options, tables: dict[str, Prepared]) -> dict[tuple[str, str], int]:
  """The carry's runs whose fingerprints are their runs' now: {(table, run): step}."""
  manifest = o.carry_dir / carry.MANIFEST
  if not manifest.exists():
    return {}
  now = {(n, r.name): r.fingerprint for n, p in tables.items() for r in p.runs}
  return {(r["table"], r["name"]): r["step"] for r in json.loads(manifest.read_text())["runs"]
          if now.get((r["table"], r["name"])) == r["fingerprint"]}


def prepare(o: Options, log: Log) -> int:
  """Builds the bundles the next call may reach and prints the call (the module docstring)."""
  seconds = Seconds.load(o.seconds)
  slots = o.slot_count()
  candidate = next(c for c in kernels.CANDIDATES if c.name == "c")
  horizon = (60 * o.deadline - seconds["queue_start"] - seconds["stop"] - STOP_SAFETY_S
             - PLAN_MARGIN_S)
  jobs: list[plan_lib.Job] = []
  reached: dict[str, Path] = {}  # the job families the call may reach, and their bundles
  tables: dict[str, Prepared] = {}
  resumes: dict[tuple[str, str], int] = {}
  for table in queue_jobs.TABLES:  # each table's bundle once the call has room for its jobs
    if table.name not in o.jobs:
      continue
    bundle = o.bundle(table.bundle)
    if not bundle_fresh(o, table.config, table.first_row, bundle):
      build_bundle(log, table.config, table.first_row, bundle)
    tables[table.name] = p = prepare_table(o, table, candidate)
    resumes.update(carried_resumes(o, {table.name: p}))
    p.runs = [dataclasses.replace(r, resumes_from=resumes.get((table.name, r.name), 0))
              for r in p.runs]
    got, _ = queue_jobs.table_jobs(p.runs, seconds, o.quick,
                                     0.0 if o.quick else SLACK)
    jobs += got
    if got:
      reached[table.name] = bundle
    if len(plan_lib.plan(jobs, [], horizon, slots, seconds.concurrency)) < len(jobs):
      break  # the call is full before the next table
  else:  # every table fits: the timing jobs the plan takes, each with its bundle
    timing_rows = o.results.resolve() / "gpu" / "queue" / "rows.json"
    got, _ = queue_jobs.timing_jobs([n for n in queue_jobs.TIMINGS if n in o.jobs], seconds,
                                    timing_rows)
    jobs += got
    taken = {s.job.name for s in plan_lib.plan(jobs, [], horizon, slots, seconds.concurrency)}
    for job in got:
      if job.name not in taken:
        continue
      name = job.name.split(":", 1)[1]
      bundle = queue_jobs.TIMINGS[name] or "bundle_table3"  # the wheels, at least
      if not (o.bundle(bundle) / "manifest.json").exists():
        if bundle == "bundle":  # configs/bible_base.py's corpus, make_bundle.py's default
          log.say(f"building {o.bundle(bundle)} (make_bundle.py: configs/bible_base.py)")
          subprocess.run([sys.executable, "experiments/gpu/make_bundle.py",
                          f"--out={o.bundle(bundle)}"], cwd=ROOT, check=True)
        else:
          build_bundle(log, "configs/table3_v3.py", "base", o.bundle(bundle))
      reached[name] = o.bundle(bundle)
  planned = plan_lib.plan(jobs, [], horizon, slots, seconds.concurrency)
  for bundle in set(reached.values()):
    for site in bundle.glob("site-cp*"):
      shutil.rmtree(site)  # unpacked on the machine that runs the call
  paths = sorted({str(b.relative_to(ROOT)) if b.is_relative_to(ROOT) else str(b)
                  for b in reached.values()})
  carry_dir = o.carry_dir.resolve()
  if (carry_dir / carry.MANIFEST).exists() and resumes:
    paths.append(str(carry_dir.relative_to(ROOT)) if carry_dir.is_relative_to(ROOT)
                 else str(carry_dir))
  tree = tree_bytes()
  carried = {p: folder_bytes(ROOT / p) for p in paths}
  total = tree + sum(carried.values())
  print(f"[prepare] the plan for one call of {o.deadline:g} minutes ({slots} slots, "
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
          ("deadline", f"{o.deadline:g}", "9.5"), ("slots", o.slots, None),
          ("jobs", ",".join(o.jobs), ",".join(queue_jobs.FAMILIES)),
          ("rows", ",".join(o.rows or []), ""), ("set", ",".join(o.set), ""))
      if value not in (default, None))
  options += " --quick" if o.quick else ""
  print("[prepare] the call:")
  print(f'run(command="python3 experiments/gpu_queue.py --out=$OUT{options}", '
        f"carry={json.dumps(paths)}, timeout_s=600)")
  print("[prepare] then here, with the returned files' folder (files_at):")
  print(".venv/bin/python experiments/gpu_queue.py --import_from=FILES_AT")
  return 0
