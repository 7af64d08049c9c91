"""A sweep job's verdict when `tfm train` exits 0 before its last step (after a SIGTERM's save):
recorded as stopped, not evaluated, and run again by the next sweep. The children are stand-ins
(`python -c`); the checkpoints are directories named by step, as Orbax lists them."""

import os
import signal
import subprocess
import sys

import pytest

from tfm.sweep import execute, stacking
from tfm.sweep.shares import device_shares
from tfm.sweep.result import RunResult
from tfm.sweep.runs import Run


def _sweep(root, reached: int, steps: int = 6):
  launched = []

  def launch(self, phase, argv, k):  # the real one runs `python -m tfm.cli train|eval ...`
    launched.append(phase)
    self.phase = phase
    self.log = open(os.path.join(self.workdirs[k], execute.LOG), "a", encoding="utf-8")
    if phase == "train":
      os.makedirs(os.path.join(self.workdirs[k], "checkpoints", str(reached)), exist_ok=True)
    self.proc = subprocess.Popen([sys.executable, "-c", "pass"])

  def describe(run, workdir, wall_s):  # the stand-in eval "saved" its figures: a dev PPL
    return RunResult(name=run.name, group=run.group, row=run.row, seed=run.seed, index=0,
                     steps=steps, wall_s=wall_s, dev_ppl=7.0 if "eval" in launched else None)

  run = Run("configs/table3_mini.py", "base", (), 0)
  original = execute.Job._launch
  execute.Job._launch = launch
  try:
    results = execute.run_all([run], str(root), shares=device_shares(1), vocab_dir=None,
                              eval_limit_of=lambda r: 8, steps_of=lambda r: steps,
                              describe=describe, stream=open(os.devnull, "w", encoding="utf-8"))
  finally:
    execute.Job._launch = original
  return results, launched, execute.is_finished(str(root / run.name), steps)


def test_a_run_stopped_before_its_last_step_is_not_evaluated_and_runs_again(tmp_path):
  results, launched, finished = _sweep(tmp_path, reached=3)
  assert launched == ["train"] and not finished
  assert results[0].status == "stopped"
  assert results[0].error == "tfm train stopped at step 3 of 6; run the sweep again to resume it"


def test_a_run_that_reached_its_last_step_is_evaluated(tmp_path):
  results, launched, finished = _sweep(tmp_path, reached=6)
  assert launched == ["train", "eval"] and finished and results[0].status == "ok"


def test_one_row_of_a_table_is_a_run_named_after_the_row(tmp_path, capsys):
  """--config=FILE:ROW: the workdir is ROOT/ROW-s0 (two rows swept into one root do not share a
  workdir), and BLEU is scored on that row's eval.bleu_examples (all of newstest2013 for Table 3)."""
  from tfm import cli  # pylint: disable=import-outside-toplevel
  for row in ("C5", "C3"):
    assert cli.main(["tfm", "sweep", f"--config=configs/table3.py:{row}", f"--root={tmp_path}",
                     "--dry_run"]) == 0
    out = capsys.readouterr().out
    assert f"--config=configs/table3.py:{row} " in out
    assert f"tfm eval --workdir={tmp_path}/{row}-s0 --split=dev --limit=0" in out


def test_stacks_are_groups_of_seeds_at_most_a_cap():
  runs = [Run("configs/table3_mini.py", row, (), seed) for row in ("base", "A1") for seed in range(3)]
  assert [[r.name for r in g] for g in stacking.groups(runs, stack=False)] == [[r.name] for r in runs]
  assert [[r.name for r in g] for g in stacking.groups(runs, stack=True)] == [
      ["base-s0", "base-s1", "base-s2"], ["A1-s0", "A1-s1", "A1-s2"]]
  assert [[r.name for r in g] for g in stacking.groups(runs, stack=True, most=2)] == [
      ["base-s0", "base-s1"], ["base-s2"], ["A1-s0", "A1-s1"], ["A1-s2"]]
  assert stacking.groups([], stack=True) == []  # every run finished before: nothing to stack


def test_only_runs_resuming_from_one_step_stack(tmp_path):
  """A rerun with a third seed: the two runs halfway through stack together and the new one
  apart; seed 3, whose stack was killed between its members' saves of step 3000, resumes with the
  runs at 2000, its previous checkpoint (the loop restores all of them there); seed 4's previous
  checkpoint, 3000, is no other run's step then, so it resumes alone from 4000; a run that cannot
  stack (key None) trains alone."""
  runs = [Run("configs/table3_mini.py", "base", (), seed) for seed in range(6)]
  held = ([1000, 2000], [2000], [], [1000, 2000, 3000], [3000, 4000], [2000])
  for run, steps in zip(runs, held):
    for step in steps:
      (tmp_path / run.name / "checkpoints" / str(step)).mkdir(parents=True)
  workdir = lambda r: str(tmp_path / r.name)
  key = stacking.resuming_key(runs, lambda r: None if r.seed == 5 else "base", workdir,
                             lambda r: 6000)
  assert [[r.name for r in g] for g in stacking.groups(runs, stack=True, key=key)] == [
      ["base-s0", "base-s1", "base-s3"], ["base-s2"], ["base-s4"], ["base-s5"]]


def test_a_stack_of_one_is_the_runs_own_train_command(tmp_path):
  """A run that trains alone under --stack (the only seed left, or train.dropout_prng=rbg, which
  no stack takes) gets its own `tfm train`, not a stack of one (`--seeds`), which refuses rbg."""
  from tfm.sweep.runs import stack_train_argv  # pylint: disable=import-outside-toplevel
  run = Run("configs/quickstart.py", None, (), 0, overrides=("train.dropout_prng=rbg",))
  argv = stack_train_argv([run], str(tmp_path))
  assert argv == run.train_argv(str(tmp_path / run.name))
  assert not any(a.startswith(("--seeds", "--members")) for a in argv)


def _stack_sweep(root, eval_child, on_result):
  """A stack of two seeds through run_all with stand-in children: training reaches its last step;
  eval_child(k, job) starts member k's evaluation (it writes `evaluated` in the member's workdir,
  which the stand-in describe reads as saved figures)."""
  steps = 4
  runs = [Run("configs/table3_mini.py", "base", (), seed) for seed in (0, 1)]

  def launch(self, phase, argv, k):
    self.phase = phase
    self.log = open(os.path.join(self.workdirs[k], execute.LOG), "a", encoding="utf-8")
    if phase == "train":
      for w in self.workdirs:
        os.makedirs(os.path.join(w, "checkpoints", str(steps)), exist_ok=True)
      self.proc = subprocess.Popen([sys.executable, "-c", "pass"])
    else:
      open(os.path.join(self.workdirs[k], "evaluated"), "w", encoding="utf-8").close()
      eval_child(k, self)

  def describe(run, workdir, wall_s):
    saved = os.path.exists(os.path.join(workdir, "evaluated"))
    return RunResult(name=run.name, group=run.group, row=run.row, seed=run.seed, index=run.seed,
                     steps=steps, wall_s=wall_s, dev_ppl=7.0 if saved else None)

  original, poll = execute.Job._launch, execute.POLL_SECONDS
  execute.Job._launch, execute.POLL_SECONDS = launch, 0.02
  try:
    return execute.run_all(runs, str(root), shares=device_shares(1), vocab_dir=None,
                           eval_limit_of=lambda r: 8, steps_of=lambda r: steps,
                           describe=describe, stream=open(os.devnull, "w", encoding="utf-8"),
                           on_result=on_result, stack=True)
  finally:
    execute.Job._launch, execute.POLL_SECONDS = original, poll


def test_a_stacks_first_member_is_published_before_the_second_is_evaluated(tmp_path):
  published, seen_at_second_eval = [], []

  def eval_child(k, job):
    if k == 1:
      seen_at_second_eval.extend(published)
    job.proc = subprocess.Popen([sys.executable, "-c", "pass"])

  results = _stack_sweep(tmp_path, eval_child, lambda r: published.append(r.name))
  assert seen_at_second_eval == ["base-s0"]
  assert published == ["base-s0", "base-s1"] and all(r.ok for r in results)


def test_a_term_during_the_second_members_evaluation_keeps_the_first_published(tmp_path):
  """The deadline's SIGTERM while member 1 is evaluated: member 0, evaluated before it, is published
  and finished; member 1 gets no result (the next sweep evaluates it)."""
  published = []

  def eval_child(k, job):
    child = "import time; time.sleep(30)" if k else "pass"
    job.proc = subprocess.Popen([sys.executable, "-c", child])
    if k == 1:
      os.kill(os.getpid(), signal.SIGTERM)  # the sweep's own TERM, as a deadline sends it

  with pytest.raises(KeyboardInterrupt):
    _stack_sweep(tmp_path, eval_child, lambda r: published.append(r.name))
  assert published == ["base-s0"]
  assert execute.is_finished(str(tmp_path / "base-s0"), 4)
  assert execute.read_result(str(tmp_path / "base-s1")) is None


def test_an_evaluation_that_ended_just_before_the_term_is_published(tmp_path):
  """Member 0's evaluation has exited (0) when the TERM comes, before the sweep polled it: the stop
  keeps it, ok, and starts no evaluation of member 1."""
  published, evaluated = [], []

  def eval_child(k, job):
    evaluated.append(k)
    job.proc = subprocess.Popen([sys.executable, "-c", "pass"])
    job.proc.wait()
    os.kill(os.getpid(), signal.SIGTERM)

  with pytest.raises(KeyboardInterrupt):
    _stack_sweep(tmp_path, eval_child, lambda r: published.append(r.name))
  assert published == ["base-s0"] and evaluated == [0]
  assert execute.read_result(str(tmp_path / "base-s0")).status == "ok"


def test_runs_picks_runs_of_the_sweep_by_name(tmp_path, capsys):
  """--runs: only the named runs (a GPU queue's job); a name the sweep does not have is refused."""
  from tfm import cli  # pylint: disable=import-outside-toplevel
  assert cli.main(["tfm", "sweep", "--config=configs/table3_mini.py", f"--root={tmp_path}",
                   "--rows=base,A1", "--seeds=2", "--runs=A1-s1,base-s0", "--dry_run"]) == 0
  out = capsys.readouterr().out
  assert [line.split()[1] for line in out.splitlines() if line.startswith("# ")] == [
      "base-s0", "A1-s1"]
  assert cli.main(["tfm", "sweep", "--config=configs/table3_mini.py", f"--root={tmp_path}",
                   "--rows=base", "--runs=A1-s0", "--dry_run"]) != 0
  assert "--runs: A1-s0 not among this sweep's runs (base-s0)" in capsys.readouterr().err
