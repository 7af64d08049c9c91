"""The forms accelerators may run (tfm/train/platform_choices.py), on 2 processes (jax.distributed
over gloo, through launch.sh): a TERM to the whole process group, as Ctrl-C, a VM's shutdown or
SLURM's proctrack/pgid send it, saves the step the hosts agree on before launch.sh returns, and the
run resumes bit-exact; saves at every step in the background never hang."""

import os
import pathlib
import signal
import subprocess
import sys

import pytest

from experiments import soak
from tests.integration.conftest import command_lines, tiny_flags

pytestmark = pytest.mark.long  # outside the README's fast command; CI runs it after

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = {**os.environ, "TFM_VENV": sys.prefix, "PYTHONUNBUFFERED": "1"}  # launch.sh runs this venv
CPU = ()
ACCELERATOR = ("train.input=process", "train.saves=background", "train.guard=select",
               "train.dropout_prng=rbg")


def _attempt(corpus, workdir, log, choices, *extra):
  argv = soak.launch_argv(2, tiny_flags(corpus, "train.steps=12", "train.log_every=1",
                                        "train.checkpoint_every=6", *choices, *extra), workdir)
  return soak.Attempt(argv, log, ENV)


def _workers_of(workdir) -> list[int]:
  """The pids of the `tfm train` processes training into `workdir`."""
  return [pid for pid, words in command_lines()
          if b"train" in words and f"--workdir={workdir}".encode() in words]


@pytest.mark.slow
@pytest.mark.parametrize("choices", [CPU, ACCELERATOR], ids=["cpu", "accelerator"])
def test_a_group_term_saves_before_launch_returns_and_resumes_bit_exact(corpus, tmp_path, choices):
  reference = _attempt(corpus, tmp_path / "a", tmp_path / "a.log", choices)
  assert reference.wait(300) == 0
  stopped = tmp_path / "b"
  attempt = _attempt(corpus, stopped, tmp_path / "b.log", choices)
  assert attempt.wait_until(lambda: attempt.last_step() >= 2), attempt.lines[-5:]
  os.killpg(attempt.proc.pid, signal.SIGTERM)  # launch.sh, both workers, the batch processes
  assert attempt.wait(300) == 0, attempt.lines[-10:]
  # launch.sh returned: no worker is left, and the agreed step is on disk, saved once a host.
  assert _workers_of(stopped) == []
  saved = [int(line.split("saved step ")[1].split(",")[0]) for _, line in attempt.lines
           if "SIGTERM: saved step" in line]
  assert len(saved) == 1 and 2 <= saved[0] < 12, attempt.lines[-10:]
  assert (stopped / "checkpoints" / str(saved[0])).is_dir()
  final = _attempt(corpus, stopped, tmp_path / "b.log", choices)
  assert final.wait(300) == 0 and final.first(f"resumed from step {saved[0]}") is not None
  result = soak.compare(tmp_path / "a", stopped, 12)
  assert not result["differing_leaves"] and result["data_state_equal"], result
  assert result["kept_steps"][0] == result["kept_steps"][1]


def test_saves_at_every_step_in_the_background_never_hang(corpus, tmp_path):
  """100 steps on 2 processes, a checkpoint after each, written in the background while the next
  steps run their collectives: every save's collectives run on the training thread in step order,
  so the hosts never wait on each other in different orders."""
  argv = soak.launch_argv(2, tiny_flags(corpus, "train.steps=100", "train.log_every=20",
                                        "train.checkpoint_every=1", "train.keep_checkpoints=2",
                                        "train.eval_every=100", *ACCELERATOR), tmp_path / "w")
  done = subprocess.run(argv, env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=600,
                        check=False)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  assert "[train] step 100/100" in done.stdout
  steps = sorted(int(p.name) for p in (tmp_path / "w" / "checkpoints").iterdir()
                 if p.name.isdigit())
  assert steps[-1] == 100 and len(steps) <= 3, steps
