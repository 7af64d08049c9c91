"""launch.sh on a TPU VM slice (through a stand-in gcloud that records its calls) and the SLURM
template's XLA flags (every flag must be one this jaxlib knows: XLA aborts on an unknown one)."""

import os
import pathlib
import re
import shlex
import subprocess
import sys
import tarfile

ROOT = pathlib.Path(__file__).resolve().parents[2]

FAKE_GCLOUD = """#!/usr/bin/env bash
# Records each call; `tpu-vm scp SRC ...` also keeps a copy of what would be sent.
printf '%s\\n' "$*" >> "$FAKE_GCLOUD_LOG"
if [ "$3" = tpu-vm ] && [ "$4" = scp ]; then cp "$5" "$FAKE_GCLOUD_LOG.tar"; fi
"""


def test_tpu_slice_gets_the_checkout_then_setup_and_the_command_on_every_worker(tmp_path):
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "gcloud").write_text(FAKE_GCLOUD)
  (bin_dir / "gcloud").chmod(0o755)
  log = tmp_path / "gcloud.log"
  env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_GCLOUD_LOG": str(log)}
  command = ["train", "--config=configs/base.py", "--config.mesh.fsdp=16",
             "--workdir=gs://bucket/runs/base 1"]  # a space, to check the quoting
  proc = subprocess.run(["bash", str(ROOT / "launch.sh"), "--tpu", "my-pod", "--zone",
                         "us-central2-b", "--project", "proj", *command],
                        capture_output=True, text=True, timeout=120, env=env)
  assert proc.returncode == 0, proc.stderr
  scp, ssh = log.read_text().splitlines()
  assert scp.startswith("compute tpus tpu-vm scp ") and " my-pod:tfm.tar --worker=all" in scp
  assert "--zone us-central2-b --project proj" in scp
  assert ssh.startswith("compute tpus tpu-vm ssh my-pod --worker=all --zone us-central2-b "
                        "--project proj --command ")
  remote = ssh.split("--command ", 1)[1]
  setup, _, run = remote.partition(" && ./launch.sh --tpu-worker ")
  assert setup.endswith("cd ~/tfm && ./launch.sh setup --accelerator tpu")
  assert shlex.split(run) == command
  with tarfile.open(f"{log}.tar") as sent:  # the checkout itself, not the venv
    names = set(sent.getnames())
  assert {"launch.sh", "tfm/cli.py", "pyproject.toml", "configs/base.py"} <= names
  assert not any(n.startswith(".venv") for n in names)


def test_slurm_template_xla_flags_are_known_to_this_jaxlib():
  text = (ROOT / "slurm.sbatch").read_text()
  flags = re.findall(r"--xla_[a-z0-9_]+=\w+", text)
  assert len(flags) >= 5 and "#SBATCH --ntasks-per-node=8" in text and "--gpus-per-task=1" in text
  proc = subprocess.run([sys.executable, "-c", "import jax.numpy as jnp; jnp.ones(2).block_until_ready()"],
                        env={**os.environ, "XLA_FLAGS": " ".join(flags), "JAX_PLATFORMS": "cpu"},
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert 'exec ./launch.sh --slurm "$@"' in text
