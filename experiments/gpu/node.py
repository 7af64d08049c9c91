"""What experiments/gpu_table.py and experiments/gpu/table3.py need of a GPU node: the bundle's
wheels on the path (the packages the node's preinstalled Python lacks,
experiments/gpu/node-requirements.txt, carried by experiments/gpu/make_bundle.py) and the GPU's
name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path


def carried_site(bundle: Path) -> Path | None:
  """The bundle's wheels unpacked into bundle/site-cp3XY (once; None without wheels). A wheel is
  a zip of its files as installed, so unpacking is installing without pip; its compiled parts
  must be for this Python, which the tag in its name says."""
  wheels = sorted((bundle / "wheels").glob("*.whl"))
  if not wheels:
    return None
  tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
  wrong = [w.name for w in wheels if "-cp" in w.name and f"-{tag}-" not in w.name]
  if wrong:
    raise ValueError(f"{bundle}/wheels: {', '.join(wrong)} are not for this Python ({tag}); "
                         "build the bundle with make_bundle.py --python_version="
                         f"{sys.version_info.major}.{sys.version_info.minor}")
  site = bundle / f"site-{tag}"
  stamp = site / ".wheels"
  names = "\n".join(w.name for w in wheels)
  if not stamp.exists() or stamp.read_text() != names:
    tmp = bundle / f"site-{tag}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    for wheel in wheels:
      with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp)
    (tmp / ".wheels").write_text(names)
    shutil.rmtree(site, ignore_errors=True)
    os.rename(tmp, site)
  return site


def device_name() -> str:
  """The GPU's name from nvidia-smi (no jax here: this process must not take the GPU's memory)."""
  try:
    names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                           capture_output=True, text=True, check=True, timeout=30).stdout
    return names.split("\n")[0].strip() or "no GPU"
  except (OSError, subprocess.SubprocessError):
    return "no GPU (nvidia-smi found none)"
