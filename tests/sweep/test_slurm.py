"""tfm sweep's SLURM parts that need no cluster: the array's indices and script, and the bad input
that is refused before anything reaches SLURM (tests/cluster/ runs the rest on a real cluster)."""

import os
import shutil
import subprocess

import pytest

from tfm import cli
from tfm.sweep import slurm


@pytest.mark.parametrize("indices, parallel, spec", [
    ([0, 1, 2, 3], 2, "0-3%2"),
    ([0, 1, 2, 5, 7, 8], None, "0-2,5,7-8"),
    ([4], 1, "4%1"),
])
def test_array_spec_names_the_unfinished_runs_k_at_a_time(indices, parallel, spec):
  assert slurm.array_spec(indices, parallel) == spec


def test_task_script_runs_the_sweep_run_of_its_array_index(tmp_path):
  """The script, run by bash with SLURM's array index set, execs the step script with one task
  and exactly the sweep's flags plus --run_index (stand-ins that print their arguments, one per
  line)."""
  python, step = tmp_path / "bin dir" / "python", tmp_path / "bin dir" / "step"
  python.parent.mkdir()
  for stand_in in (python, step):
    stand_in.write_text('#!/bin/bash\nprintf "%s\\n" "$@"\n')
    stand_in.chmod(0o755)
  argv = ["sweep", "--config=configs/quickstart.py", "--config.train.steps=3",
          "--grid=model.num_heads=1,2", "--root=/shared/my sweep"]
  script = slurm.task_script(str(python), argv, str(step))
  out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                       env={**os.environ, "SLURM_ARRAY_TASK_ID": "3"}).stdout
  assert out.splitlines() == ["--ntasks=1", "--", str(python), "-m", "tfm.cli", *argv,
                              "--run_index=3"]
  assert os.path.isfile(slurm.STEP_SCRIPT)  # the step script every task runs, shipped with tfm


@pytest.mark.parametrize("argv, env, line", [
    (["--ntasks=1", "python"], {"SLURM_JOB_ID": "7"},
     "slurm_step.sh: expected [SRUN OPTIONS...] -- COMMAND [ARGS...], got no command"),
    (["--", "python"], {},
     "slurm_step.sh: SLURM_JOB_ID is not set: run it from a batch script (sbatch), not directly"),
])
def test_the_step_script_refuses_bad_use_in_one_line(argv, env, line):
  """Without `--` and a command, or outside a SLURM job, tfm/slurm_step.sh starts nothing."""
  base = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
  proc = subprocess.run(["bash", slurm.STEP_SCRIPT, *argv], capture_output=True, text=True,
                        env={**base, **env}, check=False)
  assert proc.returncode == 2 and proc.stderr.splitlines() == [line] and not proc.stdout, proc


def test_sbatch_options_put_the_users_last_so_they_win():
  argv = slurm.sbatch_argv("/shared/sweeps/t3", "0-3%2", ["--time=1:00:00", "--requeue"], "/code")
  assert argv[:2] == ["sbatch", "--parsable"] and "--hold" in argv and "--requeue" in argv
  assert "--array=0-3%2" in argv and "--signal=B:TERM@120" in argv and "--chdir=/code" in argv
  assert "--output=/shared/sweeps/t3/slurm/%A_%a.out" in argv
  assert argv[-2:] == ["--time=1:00:00", "--requeue"]


def _one_line(capsys) -> list[str]:
  return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


QS = ["--config=configs/quickstart.py", "--config.train.steps=3"]


def test_slurm_without_sbatch_on_path_is_one_line(tmp_path, monkeypatch, capsys):
  monkeypatch.setenv("PATH", str(tmp_path / "empty"))
  code = cli.main(["tfm", "sweep", *QS, f"--root={tmp_path / 'sweep'}", "--slurm"])
  err = _one_line(capsys)
  assert code == 2 and len(err) == 1, err
  assert err[0].startswith("tfm sweep: --slurm: no sbatch on PATH") and "slurm" in err[0]
  assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("make", [
    lambda root: None,  # no directory at all
    lambda root: root.mkdir(),  # an empty one
    lambda root: (root / "base-s0").mkdir(parents=True),  # a local sweep's: no --slurm record
])
def test_status_of_a_root_without_a_slurm_sweep_is_one_line(make, tmp_path, capsys):
  root = tmp_path / "sweep"
  make(root)
  code = cli.main(["tfm", "sweep", "--status", f"--root={root}"])
  err = _one_line(capsys)
  assert code == 1 and len(err) == 1, err
  assert err[0] == (f"tfm sweep: error: --root {root}: no sweep submitted with --slurm here "
                    f"(expected {root}/slurm/JOBID.json, written by tfm sweep --slurm)")


def test_sbatch_args_without_slurm_is_one_line(tmp_path, capsys):
  code = cli.main(["tfm", "sweep", *QS, f"--root={tmp_path}",
                   "--sbatch_args=--partition=gpu"])
  err = _one_line(capsys)
  assert code == 2 and err == ["tfm sweep: --sbatch_args goes with --slurm (the options of the "
                               "sweep's SLURM job array)"]


def test_unbalanced_quotes_in_sbatch_args_are_one_line(tmp_path, capsys):
  code = cli.main(["tfm", "sweep", *QS, f"--root={tmp_path / 'sweep'}", "--slurm",
                   "--sbatch_args=--comment='a b"])
  err = _one_line(capsys)
  assert code == 2 and len(err) == 1, err
  assert err[0] == "tfm sweep: --sbatch_args \"--comment='a b\": No closing quotation"
  assert not (tmp_path / "sweep").exists()


def test_run_index_beyond_the_sweep_is_one_line(tmp_path, capsys):
  code = cli.main(["tfm", "sweep", *QS, "--grid=model.num_heads=1,2", f"--root={tmp_path}",
                   "--run_index=2"])
  err = _one_line(capsys)
  assert code == 2 and err == ["tfm sweep: --run_index=2: this sweep has runs 0..1"], err


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="--slurm needs sbatch on PATH: apt-get "
                    "install slurm-wlm munge")
def test_dry_run_prints_the_sbatch_command_and_the_task_script(tmp_path, capsys):
  """--slurm --dry_run submits nothing and writes nothing (no root): it prints sbatch's command line
  with the array of the unfinished runs and the script every task runs."""
  root = tmp_path / "sweep"
  code = cli.main(["tfm", "sweep", *QS, "--grid=model.num_heads=1,2", "--seeds=2",
                   f"--root={root}", "--slurm", "--parallel=3", "--dry_run",
                   "--sbatch_args=--partition=gpu --time=2:00:00"])
  out = capsys.readouterr().out
  assert code == 0 and not root.exists()
  command, script = out.split(" <<'EOF'\n")
  assert command.startswith("sbatch --parsable --hold ") and "--array=0-3%3" in command
  assert command.endswith("--partition=gpu --time=2:00:00")
  assert script.splitlines()[-2].endswith(
      f"--root={root} --grid=model.num_heads=1,2 --seeds=2 --run_index=\"$SLURM_ARRAY_TASK_ID\"")
