"""Which JAX backend runs, on what, and whether an accelerator on this machine is left unused.

A CPU-only jax on a GPU node or a TPU VM trains silently on the host CPU, hundreds of times slower;
`./launch.sh setup --accelerator cuda|tpu` installs the matching jax. Every command that runs a
model prints `describe()` at start and the `unused_accelerator()` warning when there is one.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

import jax

# What `./launch.sh setup --accelerator X` installs, by the hardware found.
SETUP = {"cuda": "./launch.sh setup --accelerator cuda (jax[cuda12])",
         "tpu": "./launch.sh setup --accelerator tpu (jax[tpu] with the libtpu jax pins)",
         "rocm": "pip install 'jax[rocm7-local]' into the environment, with ROCm 7 installed "
                 "(launch.sh sets up CUDA and TPU only)"}


def describe() -> str:
  """'jax 0.10.2 on gpu: 8 x NVIDIA H100 80GB HBM3 (2 hosts)' -- the whole cluster's devices, and
  the XLA_FLAGS the process was given (they choose kernels: a run's log says which)."""
  devices = jax.devices()
  kinds = sorted({d.device_kind for d in devices})
  hosts = f" ({jax.process_count()} hosts)" if jax.process_count() > 1 else ""
  flags = os.environ.get("XLA_FLAGS", "").strip()
  return (f"jax {jax.__version__} on {jax.default_backend()}: {len(devices)} x "
          f"{', '.join(kinds)}{hosts}" + (f"; XLA_FLAGS={flags}" if flags else ""))


def present_accelerator() -> str | None:
  """'cuda' if this machine has NVIDIA GPUs, 'rocm' if AMD GPUs, 'tpu' if it is a TPU VM, else None."""
  if glob.glob("/dev/nvidia[0-9]*") or _nvidia_smi_lists_gpus():
    return "cuda"
  if os.path.exists("/dev/kfd") and glob.glob("/dev/dri/renderD*"):
    return "rocm"
  if glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*") or os.environ.get("TPU_NAME"):
    return "tpu"
  return None


def gpu_plugins() -> set[str]:
  """The GPU platforms ('cuda', 'rocm') that an installed jax plugin registers.

  jax's own plugin discovery decides where its internals are the ones this was written for
  (jax 0.10.2 and 0.11.x: xla_bridge's `_discover_and_register_pjrt_plugins` and
  `_backend_factories`): it imports the plugins and calls their initialize(), which registers a
  backend only where the plugin's library loads; no backend is started. Where a jax release has
  moved them, the installed plugin distributions (jax-cuda13-plugin, jax-rocm7-plugin, ...)
  answer instead, without the check that their library loads.
  """
  try:
    from jax._src import xla_bridge  # pylint: disable=import-outside-toplevel
    discover = xla_bridge._discover_and_register_pjrt_plugins  # pylint: disable=protected-access
    factories = xla_bridge._backend_factories  # pylint: disable=protected-access
  except (ImportError, AttributeError):
    return installed_gpu_plugins()
  discover()
  return {platform for platform in ("cuda", "rocm") if platform in factories}


def installed_gpu_plugins() -> set[str]:
  """'cuda' / 'rocm' for each jax GPU plugin distribution installed (jax-cuda12-plugin, ...)."""
  from importlib import metadata  # pylint: disable=import-outside-toplevel
  found = set()
  for dist in metadata.distributions():
    match = re.fullmatch(r"jax[-_](cuda|rocm)\d+[-_]plugin", (dist.metadata["Name"] or "").lower())
    if match:
      found.add(match.group(1))
  return found


def limit_platforms() -> None:
  """Names the platforms JAX may start (call it before JAX's first use: every tfm command and the
  experiments' scripts do): the CPU only on a machine with neither GPUs nor TPU chips, the GPU and
  the CPU on a GPU machine whose jax has that GPU's plugin, the CPU only on a GPU machine whose jax
  has none (and `unused_accelerator` says so); a TPU VM is left to JAX.

  libtpu is installed for `tfm plan` (which loads it itself), and JAX would otherwise try to start
  a TPU backend in every command, GPU machines included: that prints libtpu's warnings to the
  console and, while another process holds libtpu's lockfile, fails after a wait. A JAX_PLATFORMS
  set by the user wins; the variable is set for child processes too.
  """
  if os.environ.get("JAX_PLATFORMS"):
    return
  found = present_accelerator()
  if found == "tpu":
    return
  platforms = f"{found},cpu" if found is not None and found in gpu_plugins() else "cpu"
  os.environ["JAX_PLATFORMS"] = platforms
  jax.config.update("jax_platforms", platforms)


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
  what = {"cuda": "NVIDIA GPUs", "rocm": "AMD GPUs", "tpu": "TPU chips"}[found]
  return (f"WARNING: this machine has {what} but JAX runs on the CPU (a CPU-only jax is "
          "installed, or JAX_PLATFORMS=cpu): training would be far slower than it should. "
          f"Install the matching jax with: {SETUP[found]}")
