"""The published runs of experiments/gpu/table3.py: which are finished, and the import of a GPU
node's OUT into the results here (--import_from).

The import unpacks runs.tar.gz into the published runs (a run published before with the same
fingerprint is kept, one of another fingerprint replaced: it was trained under another config),
appends summary.json to gpu_calls.jsonl once (an OUT imported again adds no GPU time) and
rebuilds the report (tfm sweep --report).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from absl import app

ROOT = Path(__file__).resolve().parents[2]


def finished_runs(publish: Path) -> list[dict]:
  out = []
  for path in sorted(publish.glob("*/sweep_result.json")):
    result = json.loads(path.read_text())
    if result.get("status") == "ok":
      out.append(result)
  return out


def published_fingerprint(folder: Path) -> str | None:
  """The fingerprint of the finished run in `folder`, None where there is none."""
  path = folder / "sweep_result.json"
  if not path.exists():
    return None
  result = json.loads(path.read_text())
  return result.get("fingerprint") if result.get("status") == "ok" else None


def import_runs(source: Path, publish: Path) -> None:
  """A node's OUT into `publish`: its runs and vocabulary, its summary, then the report."""
  archive, summary = source / "runs.tar.gz", source / "summary.json"
  for path in (archive, summary):
    if not path.exists():
      raise app.UsageError(f"--import_from {source}: no {path.name} (the node's OUT is expected)")
  with tarfile.open(archive) as tar:
    members = tar.getmembers()
    bad = [m.name for m in members
           if not m.isfile() or not re.fullmatch(r"[A-Za-z0-9_.=,+-]+/[A-Za-z0-9_.=,+-]+", m.name)]
    if bad:
      raise app.UsageError(f"--import_from {archive}: unexpected members {bad[:3]}")
    staging = publish.with_name(publish.name + f".import-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    tar.extractall(staging, filter="data")
  publish.mkdir(parents=True, exist_ok=True)
  taken = 0
  for folder in sorted(staging.iterdir()):
    target = publish / folder.name
    if folder.name != "vocab":
      kept = published_fingerprint(target)
      if kept == published_fingerprint(folder):
        continue  # the same run, published before (a later call took it, never retrained it)
      if kept is not None:
        print(f"[table3] {folder.name}: the imported run (fingerprint "
              f"{published_fingerprint(folder)[:12]}) replaces the one published under "
              f"{kept[:12]}", flush=True)
      shutil.rmtree(target, ignore_errors=True)  # another fingerprint, or failed or stopped
    target.mkdir(exist_ok=True)
    for path in folder.iterdir():
      os.replace(path, target / path.name)
    taken += folder.name != "vocab"
  shutil.rmtree(staging)
  record = summary.read_text()
  call = hashlib.sha256(record.encode("utf-8")).hexdigest()
  calls_path = publish / "gpu_calls.jsonl"
  known = {json.loads(line).get("summary_sha256") for line in
           (calls_path.read_text().splitlines() if calls_path.exists() else []) if line.strip()}
  if call in known:
    print(f"[table3] {summary}: this call is in {calls_path.name} already; its GPU time is not "
          "counted again")
  else:
    with open(calls_path, "a", encoding="utf-8") as f:
      f.write(json.dumps({**json.loads(record), "summary_sha256": call}) + "\n")
  print(f"[table3] {taken} runs imported into {publish}", flush=True)
  if finished_runs(publish):  # a call that finished no run leaves its GPU time and no report
    subprocess.run([sys.executable, "-m", "tfm.cli", "sweep", "--report", f"--root={publish}"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
