"""The published runs of experiments/gpu/table3.py and experiments/gpu_queue.py: which are
finished, and the import of a GPU node's OUT into the results here (--import_from; the queue uses
merge_runs, add_call and rebuild_report for each of its tables).

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


def check_members(tar: tarfile.TarFile, depth: int, name: str) -> None:
  """Every member a plain file `depth` plain names deep, else one line naming the archive."""
  part = r"[A-Za-z0-9_.=,+-]+"
  bad = [m.name for m in tar.getmembers()
         if not m.isfile() or not re.fullmatch("/".join([part] * depth), m.name)]
  if bad:
    raise app.UsageError(f"--import_from {name}: unexpected members {bad[:3]}")


def merge_runs(staging: Path, publish: Path) -> int:
  """Each run folder of `staging` (and vocab/) into `publish`: a run published before with the same
  fingerprint is kept, one of another fingerprint (or not finished) replaced. Returns how many
  runs it took."""
  publish.mkdir(parents=True, exist_ok=True)
  taken = 0
  for folder in sorted(staging.iterdir()):
    target = publish / folder.name
    if folder.name != "vocab":
      kept = published_fingerprint(target)
      if kept == published_fingerprint(folder):
        continue  # the same run, published before (a later call took it, never retrained it)
      if kept is not None:
        print(f"[import] {folder.name}: the imported run (fingerprint "
              f"{published_fingerprint(folder)[:12]}) replaces the one published under "
              f"{kept[:12]}", flush=True)
      shutil.rmtree(target, ignore_errors=True)  # another fingerprint, or failed or stopped
    target.mkdir(exist_ok=True)
    for path in folder.iterdir():
      if folder.name != "vocab" or not (target / path.name).exists():
        os.replace(path, target / path.name)
    taken += folder.name != "vocab"
  return taken


def add_call(publish: Path, record: dict, sha: str, name: str = "gpu_calls.jsonl") -> bool:
  """The call's record as a line of publish/NAME, once (False: it is there already, and its GPU
  time is not counted again)."""
  calls_path = publish / name
  known = {json.loads(line).get("summary_sha256") for line in
           (calls_path.read_text().splitlines() if calls_path.exists() else []) if line.strip()}
  if sha in known:
    return False
  publish.mkdir(parents=True, exist_ok=True)
  with open(calls_path, "a", encoding="utf-8") as f:
    f.write(json.dumps({**record, "summary_sha256": sha}) + "\n")
  return True


def rebuild_report(publish: Path) -> None:
  """tfm sweep --report over the published runs (none finished: no report)."""
  if finished_runs(publish):
    subprocess.run([sys.executable, "-m", "tfm.cli", "sweep", "--report", f"--root={publish}"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def import_runs(source: Path, publish: Path) -> None:
  """A node's OUT into `publish`: its runs and vocabulary, its summary, then the report."""
  archive, summary = source / "runs.tar.gz", source / "summary.json"
  for path in (archive, summary):
    if not path.exists():
      raise app.UsageError(f"--import_from {source}: no {path.name} (the node's OUT is expected)")
  staging = publish.with_name(publish.name + f".import-{os.getpid()}")
  shutil.rmtree(staging, ignore_errors=True)
  with tarfile.open(archive) as tar:
    check_members(tar, 2, str(archive))
    tar.extractall(staging, filter="data")
  taken = merge_runs(staging, publish)
  shutil.rmtree(staging)
  record = summary.read_text()
  call = hashlib.sha256(record.encode("utf-8")).hexdigest()
  if not add_call(publish, json.loads(record), call):
    print(f"[table3] {summary}: this call is in gpu_calls.jsonl already; its GPU time is not "
          "counted again")
  print(f"[table3] {taken} runs imported into {publish}", flush=True)
  rebuild_report(publish)
