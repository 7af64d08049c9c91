"""What a GPU call sends: the checkout and the carried folders, counted against the 64 MiB a call
may carry (experiments/gpu/carry.py's CARRY_BYTES)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from experiments.gpu.queue_call import ROOT


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
