"""Which JAX backend runs, on what, and whether an accelerator on this machine is left unused.

A CPU-only jax on a GPU node or a TPU VM trains silently on the host CPU, hundreds of times slower;
`./launch.sh setup --accelerator cuda|tpu` installs the matching jax. Every command that runs a
model prints `describe()` at start and the `unused_accelerator()` warning when there is one.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import jax

# What `./launch.sh setup --accelerator X` installs, by the hardware found.
SETUP = {"cuda": "./launch.sh setup --accelerator cuda (jax[cuda12])",
         "tpu": "./launch.sh setup --accelerator tpu (jax[tpu] with the libtpu jax pins)"}


def describe() -> str:
  """'jax 0.10.2 on gpu: 8 x NVIDIA H100 80GB HBM3 (2 hosts)' -- the whole cluster's devices."""
  devices = jax.devices()
  kinds = sorted({d.device_kind for d in devices})
  hosts = f" ({jax.process_count()} hosts)" if jax.process_count() > 1 else ""
  return (f"jax {jax.__version__} on {jax.default_backend()}: {len(devices)} x "
          f"{', '.join(kinds)}{hosts}")


def present_accelerator() -> str | None:
  """'cuda' if this machine has NVIDIA GPUs, 'tpu' if it is a TPU VM, else None."""
  if glob.glob("/dev/nvidia[0-9]*") or _nvidia_smi_lists_gpus():
    return "cuda"
  if glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*") or os.environ.get("TPU_NAME"):
    return "tpu"
  return None


def cpu_only_without_accelerator() -> None:
  """On a machine with neither GPUs nor TPU chips, runs JAX on its CPU backend only (call it before
  JAX's first use: every tfm command and the experiments' scripts do).

  libtpu is installed for `tfm plan` (which loads it itself), and JAX would otherwise try to start
  a TPU backend in every command: on a machine without TPU chips that prints libtpu's warnings to
  the console and, while another process holds libtpu's lockfile, fails after a wait. A
  JAX_PLATFORMS set by the user wins; the variable is set for child processes too.
  """
  if os.environ.get("JAX_PLATFORMS"):
    return
  if present_accelerator() is None:
    os.environ["JAX_PLATFORMS"] = "cpu"
    jax.config.update("jax_platforms", "cpu")


def _nvidia_smi_lists_gpus() -> bool:
  if not shutil.which("nvidia-smi"):
    return False
  try:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
  except (OSError, subprocess.SubprocessError):
    return False
  return any(line.startswith("GPU ") for line in out.splitlines())


def unused_accelerator() -> str | None:
  """A warning when this machine has an accelerator but JAX runs on the CPU, else None."""
  if jax.default_backend() != "cpu":
    return None
  found = present_accelerator()
  if found is None:
    return None
  what = {"cuda": "NVIDIA GPUs", "tpu": "TPU chips"}[found]
  return (f"WARNING: this machine has {what} but JAX runs on the CPU (a CPU-only jax is "
          "installed, or JAX_PLATFORMS=cpu): training would be far slower than it should. "
          f"Install the matching jax with: {SETUP[found]}")
