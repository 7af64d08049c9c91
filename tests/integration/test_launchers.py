"""launch.sh on a TPU VM slice (through a stand-in gcloud that records its calls) and the SLURM
template's XLA flags (every flag must be one this jaxlib knows: XLA aborts on an unknown one)."""

import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tarfile

ROOT = pathlib.Path(__file__).resolve().parents[2]

FAKE_GCLOUD = """#!/usr/bin/env bash
# Records each call; `tpu-vm scp SRC ...` also keeps a copy of what would be sent.
printf '%s\\n' "$*" >> "$FAKE_GCLOUD_LOG"
if [ "$3" = tpu-vm ] && [ "$4" = scp ]; then cp "$5" "$FAKE_GCLOUD_LOG.tar"; fi
"""


def fake_gcloud(tmp_path: pathlib.Path) -> tuple[dict, pathlib.Path]:
  """An environment whose `gcloud` is FAKE_GCLOUD, and the log it writes (LOG.tar: what scp sent)."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "gcloud").write_text(FAKE_GCLOUD)
  (bin_dir / "gcloud").chmod(0o755)
  log = tmp_path / "gcloud.log"
  return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_GCLOUD_LOG": str(log)}, log


def test_tpu_slice_gets_the_checkout_then_setup_and_the_command_on_every_worker(tmp_path):
  env, log = fake_gcloud(tmp_path)
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
  assert len(flags) >= 5 and "#SBATCH --ntasks-per-node=8" in text
  proc = subprocess.run([sys.executable, "-c", "import jax.numpy as jnp; jnp.ones(2).block_until_ready()"],
                        env={**os.environ, "XLA_FLAGS": " ".join(flags), "JAX_PLATFORMS": "cpu"},
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert 'exec ./launch.sh --slurm "$@"' in text


def test_slurm_tasks_see_every_gpu_of_their_node_as_jax_expects():
  """jax.distributed.initialize() under SLURM gives task SLURM_LOCALID the GPU of that number
  among those it sees (its local_device_ids). With --gpus-per-task=1 a task sees one GPU, so task
  5 would ask for a device 5 that does not exist: the template must show each task every GPU of
  its node. Checked against this jax's own SLURM detection, in a process with a SLURM task's
  environment (task 13 of 16, the sixth on the second node)."""
  text = (ROOT / "slurm.sbatch").read_text()
  tasks = int(re.search(r"^#SBATCH --ntasks-per-node=(\d+)", text, re.M)[1])
  assert re.search(rf"^#SBATCH --gpus-per-node={tasks}\b", text, re.M)
  assert not re.search(r"^#SBATCH --gpus-per-task", text, re.M)
  slurm = {"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "16", "SLURM_PROCID": "13",
           "SLURM_LOCALID": "5", "SLURM_STEP_NODELIST": "node[001-002]",
           "SLURM_NODELIST": "node[001-002]"}
  probe = ("from jax._src.clusters import ClusterEnv; "
           "print(ClusterEnv.auto_detect_unset_distributed_params(None, None, None, None, None, 30))")
  proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                        env={**os.environ, **slurm, "JAX_PLATFORMS": "cpu"})
  assert proc.returncode == 0, proc.stderr[-2000:]
  address, processes, index, local_devices = eval(proc.stdout.strip().splitlines()[-1])
  assert address.startswith("node001:") and (processes, index) == (16, 13)
  assert list(local_devices) == [5]  # a GPU number on the node, hence every GPU visible


def test_tpu_slice_gets_uncommitted_changes_and_untracked_files(tmp_path):
  """A researcher's new config, not yet committed or even added, reaches the workers, as do edits
  to tracked files; ignored paths (.venv, workdirs) do not."""
  repo = tmp_path / "checkout"
  subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True, timeout=120)
  shutil.copy(ROOT / "launch.sh", repo / "launch.sh")  # this checkout's, committed or not
  (repo / "configs" / "mine.py").write_text("# a new config\n")
  with open(repo / "configs" / "base.py", "a") as f:
    f.write("# an edit\n")
  (repo / ".venv").mkdir()
  (repo / ".venv" / "big").write_text("x")
  env, log = fake_gcloud(tmp_path)
  proc = subprocess.run(["bash", str(repo / "launch.sh"), "--tpu", "pod", "--zone", "z", "train"],
                        capture_output=True, text=True, timeout=120, env=env)
  assert proc.returncode == 0, proc.stderr
  with tarfile.open(f"{log}.tar") as sent:
    names = set(sent.getnames())
    assert sent.extractfile("configs/mine.py").read() == b"# a new config\n"
    assert sent.extractfile("configs/base.py").read().endswith(b"# an edit\n")
  assert not any(n.startswith(".venv") for n in names)


def test_runs_get_huge_pages_for_large_blocks_unless_the_user_chose(tmp_path):
  """launch.sh adds glibc.malloc.hugetlb=1 to GLIBC_TUNABLES for the tfm it runs, after the user's
  own tunables, and leaves a hugetlb the user set alone (tfm here is a stand-in printing it)."""
  venv = tmp_path / "venv"
  (venv / "bin").mkdir(parents=True)
  (venv / "bin" / "tfm").write_text('#!/usr/bin/env bash\nprintf "%s" "${GLIBC_TUNABLES-unset}"\n')
  (venv / "bin" / "tfm").chmod(0o755)

  def tunables(given):
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    env["TFM_VENV"] = str(venv)
    if given is not None:
      env["GLIBC_TUNABLES"] = given
    return subprocess.run([str(ROOT / "launch.sh"), "train"], env=env, capture_output=True,
                          text=True, check=True).stdout

  assert tunables(None) == "glibc.malloc.hugetlb=1"
  assert tunables("") == "glibc.malloc.hugetlb=1"
  assert tunables("glibc.malloc.arena_max=2") == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
  assert tunables("glibc.malloc.hugetlb=0") == "glibc.malloc.hugetlb=0"
