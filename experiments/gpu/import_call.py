"""A GPU call's returned files imported here (experiments/gpu_queue.py --import_from=OUT): the runs
into their tables' results, the timing figures, the record, the measured seconds and the carry."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
from pathlib import Path

from absl import app

from experiments.gpu import carry, queue_jobs
from experiments.gpu.published import add_call, check_members, merge_runs, rebuild_report
from experiments.gpu.queue_call import Options
from experiments.gpu.seconds import Seconds

CHOICES_LINE = re.compile(r"^GPU_MEASURED: dict\[str, str\] = \{.*?\}", re.M)


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


def import_call(o: Options, source: Path) -> int:
  """Imports a call's OUT (the module docstring); 0 when done."""
  results = o.results.resolve()
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
        o.platform_choices, numbers["chosen"]):
      print(f"[import] the GPU's auto forms: {numbers['chosen']} in {o.platform_choices}")
  kept_path.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")
  lines = ["# The GPU queue's timing jobs (experiments/gpu_queue.py), the latest figures of each",
           "", "| job | result |", "|---|---|"]
  lines += [row for name in queue_jobs.TIMINGS for row in kept["rows"].get(name, [])]
  (queue_dir / "table.md").write_text("\n".join(lines) + "\n")
  add_call(queue_dir, {k: v for k, v in record.items() if k != "measured"}, sha, "calls.jsonl")
  seconds = Seconds.load(o.seconds)
  if record.get("device") != seconds.data.get("device"):
    print(f"[import] the record is of {record.get('device')!r}, the table of measured seconds of "
          f"{seconds.data.get('device')!r}: not refined")
  elif seconds.refine(measured, sha, f"the call of {record.get('started')} "
                      "(experiments/results/gpu/queue/calls.jsonl)"):
    seconds.save(o.seconds)
    print(f"[import] {o.seconds}: refined by {sum(map(len, measured.values()))} measurements")
  carry_dir = o.carry_dir
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
