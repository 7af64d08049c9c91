"""tfm on a real SLURM cluster (tests/cluster/slurm_cluster.py: slurmctld and slurmd on this host).

slurm.sbatch trains on 2 tasks with jax.distributed, as `launch.sh --processes 2` does on one
machine, bit for bit, also when the job is ended mid-run each way SLURM ends jobs (the time limit's
signal, scancel --full, preemption, scancel) and resumed; `tfm sweep
--slurm` runs a sweep as a throttled job array whose results are the local sweep's, and --status
follows each run through queued, running and done, or failed when a task dies before training.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

from experiments import soak
from tests.integration.conftest import tiny_flags, tiny_overrides
from tfm import cli

pytestmark = pytest.mark.long  # outside the README's fast command; CI runs it after

ROOT = pathlib.Path(__file__).resolve().parents[2]
# slurm.sbatch's 8 GPU tasks per node, as 2 CPU tasks on the test node (command-line options win
# over its #SBATCH lines); appended output keeps a requeued job's first attempt.
TWO_TASKS = ["--ntasks-per-node=2", "--cpus-per-task=1", "--gpus-per-node=0", "--open-mode=append"]
STEPS = 80  # room to end a run four times, 2 steps after each resume, before it ends


def _env() -> dict:
  """This process's environment (SLURM_CONF: the test cluster), launch.sh running this venv."""
  return {**os.environ, "TFM_VENV": sys.prefix, "PYTHONUNBUFFERED": "1"}


def _slurm(*argv: str) -> str:
  proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=_env())
  assert proc.returncode == 0, f"{' '.join(argv)}: {proc.stderr}"
  return proc.stdout


def _in_queue(job: str) -> bool:
  return bool(_slurm("squeue", "--noheader", "--array", f"--jobs={job}").strip())


def _wait(condition, what: str, timeout: float = 300, logs=()) -> None:
  end = time.monotonic() + timeout
  while not condition():
    if time.monotonic() > end:
      tails = "\n".join(f"--- {p}\n{p.read_text()[-3000:]}" for p in map(pathlib.Path, logs)
                        if p.exists())
      pytest.fail(f"timed out waiting for {what}\n{tails}")
    time.sleep(0.2)


def _text(path: pathlib.Path) -> str:
  return path.read_text(errors="replace") if path.exists() else ""


def _training_flags(corpus, *extra) -> list[str]:
  return tiny_flags(corpus, f"train.steps={STEPS}", "train.log_every=1", *extra)


def _sbatch_training(corpus, tmp_path: pathlib.Path, name: str, *extra: str,
                     env: dict | None = None) -> tuple[str, pathlib.Path]:
  """sbatch slurm.sbatch train ... --workdir=TMP/NAME (extra: config overrides): its job id and
  its output file."""
  log = tmp_path / f"{name}.out"
  proc = subprocess.run(["sbatch", "--parsable", *TWO_TASKS, f"--output={log}", "slurm.sbatch",
                         "train", *_training_flags(corpus, *extra), f"--workdir={tmp_path / name}"],
                        cwd=ROOT, env=env or _env(), capture_output=True, text=True, timeout=60)
  assert proc.returncode == 0, proc.stderr
  return proc.stdout.strip(), log


def _last_step(log: pathlib.Path) -> int:
  """The last training step the job's output logged (0 before the first)."""
  steps = re.findall(r"^\[train\] step (\d+)/", _text(log), re.M)
  return int(steps[-1]) if steps else 0


def _saved(log: pathlib.Path) -> list[int]:
  """The steps saved at a SIGTERM, in order (one line per save, from the first task)."""
  return [int(s) for s in re.findall(r"SIGTERM: saved step (\d+)", _text(log))]


def _signal_step(text: str, since: int) -> int:
  """The last training step logged before the first line from `since` on that shows a SIGTERM (a
  task's or the batch shell's)."""
  first = re.compile(r"SIGTERM caught|^slurm_step\.sh: SIGTERM", re.M).search(text, since)
  assert first, text[since:][-3000:]
  steps = re.findall(r"^\[train\] step (\d+)/", text[:first.start()], re.M)
  return int(steps[-1]) if steps else 0


def _end_and_resume(log: pathlib.Path, end, resume, after: int, logs) -> tuple[int, int]:
  """Waits for step after + 2, then ends the job with end() and, once the step it saved is
  written, brings it back with resume(); returns (the step at which the signal came: the last one
  logged before it, the step saved), once the job has resumed from that step."""
  _wait(lambda: _last_step(log) >= after + 2, f"step {after + 2}", logs=logs)
  saves, offset = len(_saved(log)), len(_text(log))
  end()
  _wait(lambda: len(_saved(log)) > saves, "the save at the signal", logs=logs)
  saved = _saved(log)[-1]
  signalled = _signal_step(_text(log), offset)
  resume()
  _wait(lambda: f"resumed from step {saved} in " in _text(log),
        f"the job to resume from step {saved}", logs=logs)
  return signalled, saved


@pytest.mark.slow
def test_two_tasks_ended_every_way_and_resumed_end_bit_exact_with_two_local_processes(
    cluster, corpus, tmp_path):
  """sbatch slurm.sbatch with 2 tasks (launch.sh --slurm: srun, jax.distributed from SLURM's
  environment), ended in mid-run every way SLURM ends a job, each time 2 steps after it resumed,
  ends with the checkpoint of an uninterrupted `launch.sh --processes 2`, bit for bit. The ways:
  SIGTERM to its steps (what --signal sends before the time limit), then requeued; SIGTERM to the
  whole job, batch shell included (scancel --full), then requeued; preempted by a job in the high
  partition, which SLURM runs while the job, requeued, waits; a plain scancel, then submitted
  again. Each time both tasks save one step, at or after the step at which the signal came, and
  the job resumes from it."""
  job, job_log = _sbatch_training(corpus, tmp_path, "ended")
  logs = [job_log]
  local = soak.Attempt(soak.launch_argv(2, _training_flags(corpus), tmp_path / "local"),
                       tmp_path / "local.log", _env())
  requeue = lambda: _slurm("scontrol", "requeue", job)
  gone = lambda job: _wait(lambda: not _in_queue(job), f"job {job} to end", logs=logs)
  ends, saved = {}, 0

  def steps_alone():
    _slurm("scancel", "--signal=TERM", job)
    gone(job)
  ends["steps"] = _end_and_resume(job_log, steps_alone, requeue, saved, logs)

  def whole_job():
    _slurm("scancel", "--full", "--signal=TERM", job)
    gone(job)
  ends["full"] = _end_and_resume(job_log, whole_job, requeue, ends["steps"][1], logs)
  assert "forcing job termination" not in _text(job_log), _text(job_log)[-3000:]

  high = []
  def preempt():
    high.append(_slurm("sbatch", "--parsable", "--partition=high", "--ntasks=1",
                       f"--output={tmp_path / 'high.out'}", "--wrap=sleep 5").strip())
  ends["preempted"] = _end_and_resume(job_log, preempt, lambda: None, ends["full"][1], logs)
  assert f"job {job} was preempted: requeued" in _text(job_log), _text(job_log)[-3000:]
  assert not _in_queue(high[0])  # the job resumed once the preemptor had ended

  def cancel():
    _slurm("scancel", job)
    gone(job)
  def submit_again():
    nonlocal job
    job = _sbatch_training(corpus, tmp_path, "ended")[0]
  ends["cancelled"] = _end_and_resume(job_log, cancel, submit_again, ends["preempted"][1], logs)

  gone(job)
  assert local.wait(300) == 0, local.lines[-10:]
  print("ends (signal step, saved step):", ends)
  for kind, (signalled, at) in ends.items():
    assert signalled <= at < STEPS, (kind, ends)
  assert "2 host(s), 2 device(s)" in _text(job_log), _text(job_log)[-3000:]
  assert re.search(rf"^\[train\] step {STEPS}/{STEPS} ", _text(job_log), re.M), (
      _text(job_log)[-3000:])
  result = soak.compare(tmp_path / "local", tmp_path / "ended", STEPS)
  assert result["leaves"] > 20 and not result["differing_leaves"], result
  assert result["data_state_equal"] and result["kept_steps"][0] == result["kept_steps"][1], result


# The forms accelerators may run (tfm/train/platform_choices.py).
ACCELERATOR = ("train.input=process", "train.saves=background", "train.guard=select",
               "train.dropout_prng=rbg")


@pytest.mark.slow
def test_two_tasks_on_the_accelerator_forms_preempted_and_requeued_end_bit_exact(
    cluster, corpus, tmp_path):
  """The 2-task job with batches made in processes of their own (which a TERM to the job's
  processes reaches too), background saves, the select guard and rbg dropout keys: preempted by
  a job of the high partition, it saves, is requeued and resumes, and ends bit for bit as
  `launch.sh --processes 2` with the same forms."""
  job, job_log = _sbatch_training(corpus, tmp_path, "ended", *ACCELERATOR)
  logs = [job_log]
  local = soak.Attempt(soak.launch_argv(2, _training_flags(corpus, *ACCELERATOR),
                                        tmp_path / "local"), tmp_path / "local.log", _env())
  high = []
  def preempt():
    high.append(_slurm("sbatch", "--parsable", "--partition=high", "--ntasks=1",
                       f"--output={tmp_path / 'high.out'}", "--wrap=sleep 5").strip())
  signalled, saved = _end_and_resume(job_log, preempt, lambda: None, 0, logs)
  assert f"job {job} was preempted: requeued" in _text(job_log), _text(job_log)[-3000:]
  assert signalled <= saved < STEPS
  _wait(lambda: not _in_queue(job), f"job {job} to end", logs=logs)
  assert local.wait(300) == 0, local.lines[-10:]
  assert "train.input=process, train.saves=background, train.guard=select" in _text(job_log)
  assert re.search(rf"^\[train\] step {STEPS}/{STEPS} ", _text(job_log), re.M), (
      _text(job_log)[-3000:])
  result = soak.compare(tmp_path / "local", tmp_path / "ended", STEPS)
  assert result["leaves"] > 20 and not result["differing_leaves"], result
  assert result["data_state_equal"] and result["kept_steps"][0] == result["kept_steps"][1], result


@pytest.mark.slow
def test_a_term_before_the_step_starts_reaches_the_step(cluster, corpus, tmp_path):
  """A SIGTERM to the batch shell in the seconds before srun's step exists (here srun starts 6 s
  late, through a wrapper first on PATH that sleeps, then runs SLURM's own srun) is passed on to
  the step once it runs: the tasks stop early, and do not train on to the end."""
  wrappers = tmp_path / "bin"
  wrappers.mkdir()
  real = subprocess.run(["bash", "-c", "command -v srun"], capture_output=True, text=True,
                        check=True).stdout.strip()
  (wrappers / "srun").write_text(f"#!/bin/sh\nsleep 6\nexec {real} \"$@\"\n")
  (wrappers / "srun").chmod(0o755)
  env = {**_env(), "PATH": f"{wrappers}:{os.environ['PATH']}"}
  job, job_log = _sbatch_training(corpus, tmp_path, "early", env=env)
  _wait(lambda: "RUNNING" in _slurm("squeue", "--noheader", "-o", "%T", f"--jobs={job}"),
        f"job {job} to start", logs=[job_log])
  time.sleep(2)  # the batch shell has set its trap; srun is still asleep
  _slurm("scancel", "--batch", "--signal=TERM", job)
  _wait(lambda: not _in_queue(job), f"job {job} to end", logs=[job_log])
  text = _text(job_log)
  assert "slurm_step.sh: the step started after the SIGTERM: passed on to it now" in text, text
  assert not re.search(rf"^\[train\] step {STEPS}/{STEPS} ", text, re.M), text[-3000:]


SWEEP_STEPS = 12  # room to preempt a run in mid-training


def _sweep_flags(corpus) -> list[str]:
  """A 4-run grid (2 head counts x 2 seeds) of 12-step runs, each evaluated on 4 dev sentences."""
  overrides = tiny_overrides(corpus, f"train.steps={SWEEP_STEPS}", "train.warmup_steps=2",
                             f"train.eval_every={SWEEP_STEPS}", "train.log_every=1",
                             "train.keep_checkpoints=1", "train.average_checkpoints=1",
                             "eval.beam_size=2", "eval.max_extra_length=4", "eval.batch_size=4")
  return (["--config=configs/quickstart.py", "--grid=model.num_heads=1,2", "--seeds=2",
           "--eval_limit=4"] + [f"--config.{o}" for o in overrides])


def _status(root: pathlib.Path, capsys) -> dict[str, tuple[str, str]]:
  """name -> (state, detail) from `tfm sweep --status`."""
  assert cli.main(["tfm", "sweep", "--status", f"--root={root}"]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert re.fullmatch(r"\d+ done, \d+ running, \d+ queued, \d+ failed of \d+ runs", lines[-1])
  return {name: (state, detail.strip()) for name, state, detail in
          (line.split(maxsplit=2) for line in lines[:-1])}


@pytest.mark.slow
def test_sweep_on_slurm_is_a_throttled_array_with_the_local_sweeps_results(cluster, corpus,
                                                                           tmp_path, monkeypatch,
                                                                           capsys):
  """`tfm sweep --slurm --parallel=2` submits the 4 runs as one array of 4 tasks, at most 2
  running; --status shows each run queued, running, then done; --report then writes the same
  results.jsonl as the local sweep (all but the wall time). A job in the high partition that needs
  both CPUs preempts the running tasks once one of them has trained 2 steps: that run saves the
  step its tasks reach, is requeued, and ends with the local sweep's result all the same."""
  del cluster
  monkeypatch.chdir(ROOT)
  flags, on_slurm, local = _sweep_flags(corpus), tmp_path / "slurm", tmp_path / "local"
  assert cli.main(["tfm", "sweep", *flags, f"--root={on_slurm}", "--parallel=2", "--slurm"]) == 0
  out = capsys.readouterr().out
  job = re.search(r"submitted 4 of 4 runs as SLURM job (\d+) \(array 0-3%2\)", out)
  assert job, out
  job = job[1]
  assert f"task output: {on_slurm / 'slurm'}/{job}_I.out for run I" in out
  # The same command again submits nothing: every run is queued or running already.
  assert cli.main(["tfm", "sweep", *flags, f"--root={on_slurm}", "--parallel=2", "--slurm"]) == 0
  assert "nothing to submit: of the 4 runs under" in capsys.readouterr().out
  assert len(list((on_slurm / "slurm").glob("*.json"))) == 1
  with open(tmp_path / "local.log", "w", encoding="utf-8") as log:
    local_sweep = subprocess.Popen([sys.executable, "-m", "tfm.cli", "sweep", *flags,
                                    f"--root={local}", "--parallel=2"],
                                   cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT)
  seen: dict[str, list[str]] = {}
  preempted: dict[str, int] = {}  # the run in training when the preemptor came -> its last step
  end = time.monotonic() + 300
  while True:
    if not preempted:
      training = {name: _last_step(on_slurm / name / "sweep.log") for name in seen}
      name = max(training, key=training.get, default=None)
      if name is not None and 2 <= training[name] < SWEEP_STEPS - 2:
        preempted[name] = training[name]
        _slurm("sbatch", "--parsable", "--partition=high", "--ntasks=1", "--cpus-per-task=2",
               f"--output={tmp_path / 'high.out'}", "--wrap=sleep 3")
    now = _status(on_slurm, capsys)
    assert sum(state == "running" for state, _ in now.values()) <= 2, now  # the %2 throttle
    for name, (state, _) in now.items():
      if seen.get(name, [None])[-1] != state:
        seen.setdefault(name, []).append(state)
    if all(state == "done" for state, _ in now.values()):
      break
    assert time.monotonic() < end and not any("failed" in states for states in seen.values()), (
        now, [p.read_text()[-2000:] for p in on_slurm.glob("*/sweep.log")])
    time.sleep(0.5)
  assert len(seen) == 4 and all(states[-2:] == ["running", "done"] for states in seen.values()), seen
  assert seen["model.num_heads=2-s0"][0] == seen["model.num_heads=2-s1"][0] == "queued", seen
  assert local_sweep.wait(300) == 0, (tmp_path / "local.log").read_text()[-3000:]
  assert cli.main(["tfm", "sweep", "--report", f"--root={on_slurm}"]) == 0
  results = [[json.loads(line) for line in (root / "results.jsonl").read_text().splitlines()]
             for root in (on_slurm, local)]
  assert [r["name"] for r in results[0]] == [r["name"] for r in results[1]] and len(results[0]) == 4
  (name, signalled), = preempted.items()
  saved = _saved(on_slurm / name / "sweep.log")
  print(f"sweep run {name}: preempted after step {signalled}, saved {saved}")
  assert len(saved) == 1 and signalled <= saved[0] < SWEEP_STEPS, (name, signalled, saved)
  assert f"resumed from step {saved[0]} in " in _text(on_slurm / name / "sweep.log")
  for ours, theirs in zip(*results):
    assert ours["status"] == "ok" and ours["dev_ppl"] > 1 and ours["trained_steps"] == SWEEP_STEPS
    assert {k: v for k, v in ours.items() if k != "wall_s"} == {
        k: v for k, v in theirs.items() if k != "wall_s"}


@pytest.mark.parametrize("option, message", [
    ("--time=soon", "sbatch: error: Invalid --time specification"),
    ("--partition=nowhere", "Invalid partition name specified"),
])
def test_a_refused_sbatch_option_is_sbatchs_own_line_and_leaves_no_root(option, message, cluster,
                                                                        corpus, tmp_path,
                                                                        monkeypatch, capsys):
  del cluster
  monkeypatch.chdir(ROOT)
  root = tmp_path / "sweep"
  code = cli.main(["tfm", "sweep", *_sweep_flags(corpus), f"--root={root}", "--slurm",
                   f"--sbatch_args={option}"])
  err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
  assert code == 1 and len(err) == 1, err
  assert err[0].startswith(f"tfm sweep: error: sbatch refused the sweep's job array "
                           f"(--sbatch_args={option}): ") and message in err[0], err
  assert not root.exists()


def test_a_task_that_dies_before_training_is_a_failed_run_with_its_last_log_line(cluster, corpus,
                                                                                 tmp_path, capsys):
  """The sweep is submitted from a venv that the node does not see when the task starts (a link
  removed meanwhile): the task's shell cannot start Python, and the run is failed with that line,
  recorded in its sweep_result.json, so --report lists it."""
  del cluster
  venv = tmp_path / "venv"
  venv.symlink_to(sys.prefix)
  root = tmp_path / "sweep"
  flags = [f for f in _sweep_flags(corpus) if not f.startswith(("--grid", "--seeds"))]  # 1 run
  proc = subprocess.run([str(venv / "bin" / "python"), "-m", "tfm.cli", "sweep", *flags,
                         f"--root={root}", "--slurm", "--sbatch_args=--hold"],
                        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  job = re.search(r"as SLURM job (\d+) \(array 0, held: scontrol release \1 starts it\)",
                  proc.stdout)
  assert job, proc.stdout
  assert _status(root, capsys)["run-s0"][0] == "queued"
  venv.unlink()
  _slurm("scontrol", "release", job[1])
  _wait(lambda: not _in_queue(job[1]), "the task to end", logs=[root / "slurm" / f"{job[1]}_0.out"])
  state, detail = _status(root, capsys)["run-s0"]
  assert state == "failed", detail
  assert detail.startswith(f"job {job[1]}_0 ended without a result: ") and detail.endswith(
      f"{venv}/bin/python: No such file or directory"), detail
  result = json.loads((root / "run-s0" / "sweep_result.json").read_text())
  assert result["status"] == "failed" and result["error"] == detail and result["steps"] == SWEEP_STEPS
  assert cli.main(["tfm", "sweep", "--report", f"--root={root}"]) == 0
  assert f"- run-s0: {detail}" in (root / "table.md").read_text()
