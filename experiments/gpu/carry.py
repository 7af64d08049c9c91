"""What one GPU call leaves the next (experiments/gpu_queue.py): the checkpoints of the runs its
stop cut short, where resuming is cheaper than a restart and they fit.

At the stop every running run saves its step (tfm train's SIGTERM save). A run so saved may resume
on the next call's fresh machine only if its workdir travels: back in OUT (at most 8 files of 16
MiB), then with the next call's checkout (64 MiB with everything else that travels). The rule, for
each stopped run with a checkpoint:
  * resumed: its workdir (checkpoints, config.json, event files, log) travels when it fits in the
    room left, the runs taken in order of the seconds they save a byte (the predicted seconds of
    the steps it reached, alone on the GPU);
  * restarted: every other (no room, or nothing reached worth a byte's travel); the next call trains
    it from step 0.
The room: OUT's parts (PARTS files of PART_BYTES) and the next call's carry, CARRY_BYTES less the
checkout and the bundles as they travel now, less MARGIN_BYTES.

OUT gets carry.tgz.0, carry.tgz.1, ...: one tar.gz of TABLE/RUN/... and manifest.json (the runs,
each with its table, step and fingerprint), cut into parts. The import here joins and unpacks them
into experiments/gpu/carry/ (git ignores it; the next call carries it), replacing what an earlier
call left there, never a newer call's; a call that carried it in and left nothing removes it. The
next call copies each carried run whose fingerprint is the run's now into its root, and the sweep
resumes it from its step.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import shutil
import tarfile
from pathlib import Path
from typing import Iterable

PART_BYTES = 15 * 2**20  # under the 16 MiB a file back from OUT may hold
PARTS = 3  # OUT's 8 files: record.json, rows.json, runs.tar.gz, logs.tar.gz, queue.txt and these
CARRY_BYTES = 64 * 2**20  # what travels with a call: the checkout and its carried folders
MARGIN_BYTES = 2 * 2**20  # for the files the next call's checkout may add
MANIFEST = "manifest.json"
PART = re.compile(r"^carry\.tgz\.(\d+)$")


@dataclasses.dataclass(frozen=True)
class Stopped:
  """A run the stop cut short, with what it reached."""
  table: str
  name: str
  workdir: Path
  step: int
  fingerprint: str
  saved_s: float  # the predicted seconds of its steps so far, alone on the GPU
  bytes: int


def needed(workdir: Path) -> list[Path]:
  """The workdir's files a resume needs: all but the checkpoints older than the newest
  train.average_checkpoints (the ones its evaluation averages; config.json says how many)."""
  try:
    keep = max(1, int(json.loads((workdir / "config.json").read_text())["train"]
                      .get("average_checkpoints", 1)))
  except (OSError, ValueError, KeyError):
    keep = 1
  steps = sorted((int(p.name) for p in (workdir / "checkpoints").glob("*") if p.name.isdigit()),
                 reverse=True)
  old = {workdir / "checkpoints" / str(s) for s in steps[keep:]}
  return [p for p in sorted(workdir.rglob("*"))
          if p.is_file() and not any(p.is_relative_to(o) for o in old)]


def size(workdir: Path) -> int:
  """The bytes of what a resume needs of the workdir."""
  return sum(p.stat().st_size for p in needed(workdir))


def choose(stopped: Iterable[Stopped], room: int) -> tuple[list[Stopped], list[tuple[str, str]]]:
  """The rule: (the runs resumed, [(run, why restarted)])."""
  resumed, restarted, left = [], [], room
  for s in sorted(stopped, key=lambda s: -s.saved_s / max(1, s.bytes)):
    if s.saved_s <= 0:
      restarted.append((s.name, "nothing reached to resume"))
    elif s.bytes > left:
      restarted.append((s.name, f"its {s.bytes / 2**20:.1f} MiB do not fit the "
                                f"{left / 2**20:.1f} MiB left to carry"))
    else:
      resumed.append(s)
      left -= s.bytes
  return resumed, restarted


def room(travelling: int) -> int:
  """The bytes a carry may take: OUT's parts, and CARRY_BYTES less what else travels with the next
  call (`travelling`: the checkout and its bundles) and MARGIN_BYTES."""
  return max(0, min(PARTS * PART_BYTES, CARRY_BYTES - travelling - MARGIN_BYTES))


def pack(resumed: list[Stopped], out: Path, call: str) -> list[str]:
  """The runs' workdirs and the manifest as OUT/carry.tgz.N; returns the parts' names."""
  manifest = {"call": call, "runs": [{"table": s.table, "name": s.name, "step": s.step,
                                      "fingerprint": s.fingerprint} for s in resumed]}
  buffer = io.BytesIO()
  with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
    data = json.dumps(manifest, indent=1).encode()
    info = tarfile.TarInfo(MANIFEST)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    for s in resumed:
      for path in needed(s.workdir):
        tar.add(path, arcname=f"{s.table}/{s.name}/{path.relative_to(s.workdir)}")
  blob, names = buffer.getvalue(), []
  for i in range(0, len(blob), PART_BYTES):
    names.append(f"carry.tgz.{i // PART_BYTES}")
    (out / names[-1]).write_bytes(blob[i:i + PART_BYTES])
  return names


def unpack(source: Path, carry_dir: Path) -> dict | None:
  """OUT's carry parts into carry_dir, replacing an older call's carry; returns the manifest (None:
  OUT has no carry, or carry_dir holds this call's or a newer one's)."""
  parts = sorted((int(m.group(1)), p) for p in source.iterdir() if (m := PART.match(p.name)))
  if not parts:
    return None
  if [i for i, _ in parts] != list(range(len(parts))):
    raise ValueError(f"{source}: carry parts {[p.name for _, p in parts]} are not 0..N")
  blob = b"".join(p.read_bytes() for _, p in parts)
  with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
    manifest = json.load(tar.extractfile(MANIFEST))
    now = carry_dir / MANIFEST
    if now.exists() and json.loads(now.read_text())["call"] >= manifest["call"]:
      return None
    bad = [m.name for m in tar.getmembers() if m.name.startswith("/") or ".." in m.name.split("/")]
    if bad:
      raise ValueError(f"{source}: unexpected carry members {bad[:3]}")
    staging = carry_dir.with_name(carry_dir.name + f".import-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    tar.extractall(staging, filter="data")
  shutil.rmtree(carry_dir, ignore_errors=True)
  os.replace(staging, carry_dir)
  return manifest


def seed(carry_dir: Path, roots: dict[str, Path], fingerprints: dict[tuple[str, str], str],
         steps_in_root: dict[tuple[str, str], int]) -> tuple[dict[tuple[str, str], int], list[str]]:
  """The carried runs into their roots (each (table, name) whose fingerprint is the run's now and
  whose root holds an earlier step, or none); returns {(table, name): step} of those seeded and
  a line for each carried run left out."""
  manifest_path = carry_dir / MANIFEST
  if not manifest_path.exists():
    return {}, []
  seeded, notes = {}, []
  for run in json.loads(manifest_path.read_text())["runs"]:
    key = (run["table"], run["name"])
    if key not in fingerprints:
      notes.append(f"{run['table']}/{run['name']}: not a run of this queue now")
    elif fingerprints[key] != run["fingerprint"]:
      notes.append(f"{run['table']}/{run['name']}: its config changed since step {run['step']} "
                   "(another fingerprint): it restarts")
    elif steps_in_root.get(key, 0) >= run["step"]:
      notes.append(f"{run['table']}/{run['name']}: this machine's root has it at step "
                   f"{steps_in_root[key]} already")
    else:
      target = roots[run["table"]] / run["name"]
      shutil.rmtree(target, ignore_errors=True)
      shutil.copytree(carry_dir / run["table"] / run["name"], target)
      seeded[key] = run["step"]
  return seeded, notes
