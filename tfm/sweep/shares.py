"""Device shares for a sweep's runs (--parallel K): each run's disjoint part of this host.

On a host with G >= K GPUs each run sees G / K of them (CUDA_VISIBLE_DEVICES), or, with
--runs_per_gpu R, one GPU and 1 / R of its memory; on CPUs each run is pinned to its 1 / K of this
process's cores (TFM_CPUS, applied by tfm.cli before JAX starts; XLA's thread pool follows the
affinity). A TPU VM's chips belong to one process, so there it is one row per slice
(docs/table3.md).
"""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import subprocess

from tfm.train import backend


@dataclasses.dataclass(frozen=True)
class Share:
  """One slot's part of the machine: environment additions and the CPUs it may use."""
  env: dict[str, str]
  cpus: frozenset[int] | None = None
  name: str = "cpu"


def _gpu_ids() -> list[str]:
  visible = os.environ.get("CUDA_VISIBLE_DEVICES")
  if visible is not None:
    return [g for g in visible.split(",") if g.strip()]
  if shutil.which("nvidia-smi"):
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]
  return []


# The part of a shared GPU's memory its runs may take together (XLA_PYTHON_CLIENT_MEM_FRACTION is
# each one's part of it): the rest is for each process's CUDA context and cuDNN/cuBLAS workspaces.
SHARED_GPU_MEMORY = 0.85


def device_shares(parallel: int, runs_per_gpu: int = 1) -> list[Share]:
  """`parallel` disjoint shares of this host's GPUs, else of its CPU cores.

  runs_per_gpu > 1 (GPUs only): each run gets one GPU and 1 / runs_per_gpu of its memory, up to
  runs_per_gpu runs on each GPU at once. Small models leave most of a GPU idle, and runs of their
  own processes fill it (their kernels interleave; under NVIDIA's MPS they run side by side).
  """
  if parallel < 1:
    raise ValueError(f"--parallel: expected a positive integer, got {parallel}")
  if runs_per_gpu < 1:
    raise ValueError(f"--runs_per_gpu: expected a positive integer, got {runs_per_gpu}")
  gpus = _gpu_ids()
  if runs_per_gpu > 1:
    if not gpus:
      raise ValueError(f"--runs_per_gpu={runs_per_gpu}: this host has no NVIDIA GPU (nvidia-smi "
                       "lists none); it shares GPUs only")
    if parallel > len(gpus) * runs_per_gpu:
      raise ValueError(f"--parallel={parallel} but --runs_per_gpu={runs_per_gpu} on this host's "
                       f"{len(gpus)} GPU(s) holds at most {len(gpus) * runs_per_gpu} runs")
    fraction = f"{SHARED_GPU_MEMORY / runs_per_gpu:.4f}"
    return [Share({"CUDA_VISIBLE_DEVICES": gpus[i % len(gpus)],
                   "XLA_PYTHON_CLIENT_MEM_FRACTION": fraction},
                  name=f"gpu {gpus[i % len(gpus)]} #{i // len(gpus) + 1}") for i in range(parallel)]
  if gpus:
    if len(gpus) < parallel:
      raise ValueError(f"--parallel={parallel} but this host has {len(gpus)} GPU(s): at most one run "
                       "per GPU, or --runs_per_gpu to share them")
    per = len(gpus) // parallel
    return [Share({"CUDA_VISIBLE_DEVICES": ",".join(gpus[i * per:(i + 1) * per])},
                  name=f"gpu {','.join(gpus[i * per:(i + 1) * per])}") for i in range(parallel)]
  if parallel > 1 and backend.present_accelerator() == "rocm":
    raise ValueError("--parallel > 1 on AMD GPUs: tfm gives each run its GPUs through "
                     "CUDA_VISIBLE_DEVICES (NVIDIA) only, so the runs would share every GPU; run "
                     "--parallel 1")
  if parallel > 1 and glob.glob("/dev/accel*"):
    raise ValueError("--parallel > 1 on a TPU VM: one process owns its TPU; run one row per slice "
                     "(docs/table3.md: running a sweep)")
  cpus = sorted(os.sched_getaffinity(0))
  if len(cpus) < parallel:
    raise ValueError(f"--parallel={parallel} but this process may use {len(cpus)} CPU core(s)")
  per = len(cpus) // parallel
  shares = [cpus[i * per:(i + 1) * per] for i in range(parallel)]
  return [Share({"TFM_CPUS": ",".join(map(str, s))}, frozenset(s), name=f"cpu {s[0]}-{s[-1]}")
          for s in shares]
