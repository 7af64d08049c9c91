"""NVIDIA's MPS on a GPU node: several processes' kernels run side by side on one GPU instead of
taking turns (experiments/gpu/table3.py's runs share one GPU)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

MPS_DIR = Path("/tmp/tfm-mps")


def start_mps(env: dict[str, str]) -> str:
  """Starts the MPS control daemon and checks that JAX starts under it; what happened, in words.
  Without it (or if JAX fails under it), the runs' kernels take turns on the GPU instead."""
  control = shutil.which("nvidia-cuda-mps-control")
  if control is None:
    return "off: no nvidia-cuda-mps-control on this node"
  MPS_DIR.mkdir(parents=True, exist_ok=True)
  os.environ.update(CUDA_MPS_PIPE_DIRECTORY=str(MPS_DIR / "pipe"),
                    CUDA_MPS_LOG_DIRECTORY=str(MPS_DIR / "log"))
  env.update(CUDA_MPS_PIPE_DIRECTORY=str(MPS_DIR / "pipe"),
             CUDA_MPS_LOG_DIRECTORY=str(MPS_DIR / "log"))
  for d in ("pipe", "log"):
    (MPS_DIR / d).mkdir(exist_ok=True)
  started = subprocess.run([control, "-d"], env=env, capture_output=True, text=True, check=False)
  if started.returncode != 0:
    return f"off: nvidia-cuda-mps-control -d exited {started.returncode}: {started.stderr.strip()}"
  probe = "import jax, jax.numpy as jnp; print(jax.devices(), float(jnp.ones(3).sum()))"
  try:
    ran = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         timeout=90, check=False)
    ok = ran.returncode == 0
    detail = (ran.stdout.strip() or ran.stderr.strip().splitlines()[-1:] or ["?"])
  except subprocess.TimeoutExpired:
    ok, detail = False, "no answer in 90 s"
  if ok:
    return f"on: {detail}"
  stop_mps(env)
  for key in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
    env.pop(key, None)
    os.environ.pop(key, None)
  return f"off: JAX did not start under MPS ({detail})"


def stop_mps(env: dict[str, str]) -> None:
  control = shutil.which("nvidia-cuda-mps-control")
  if control and "CUDA_MPS_PIPE_DIRECTORY" in env:
    try:
      subprocess.run([control], input="quit\n", env=env, text=True, capture_output=True,
                     timeout=10, check=False)
    except subprocess.TimeoutExpired:
      print("[mps] the control daemon did not answer 'quit' in 10 s", flush=True)
