"""The training loop end to end: falling loss, exact resume, preemption, a corrupt checkpoint."""

import os
import re
import signal

import jax
import numpy as np
import pytest

from tests.integration.conftest import copy_of, run_train
from tfm.train import checkpoint as ckpt_lib
from tfm.train import preemption


def _losses(log):
  return [float(x) for x in re.findall(r"\[train\] step \d+/\d+ \(\d+%\) \| loss ([0-9.]+)", log)]


def _same_params(a, b):
  return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(jax.device_get(a.params)),
                                                  jax.tree.leaves(jax.device_get(b.params))))


def test_loss_falls_and_everything_is_logged(experiment, tmp_path, monkeypatch):
  config = experiment("train.steps=24", "train.log_every=6", "train.eval_every=24",
                      "train.checkpoint_every=6")
  monkeypatch.chdir(tmp_path.parent)  # a relative workdir, as the README's command uses
  state, log = run_train(config, tmp_path.name)
  losses = _losses(log)
  assert len(losses) >= 4 and losses[-1] < losses[0] - 0.5, log
  assert "[dev] step 24 | loss" in log and "perplexity" in log
  # The input pipeline's packing efficiency and dropped-example counts, at each evaluation.
  data = re.search(r"\[data\] step 24 \| inputs_efficiency ([0-9.]+) .*examples_read (\d+) \| "
                   r"examples_kept (\d+)", log)
  assert data and 0.3 < float(data[1]) <= 1 and int(data[3]) <= int(data[2]), log
  assert int(state.step) == 24
  assert ckpt_lib.available_steps(tmp_path) == [12, 18, 24]  # every 6 steps, keep_checkpoints=3
  assert os.listdir(tmp_path / "tensorboard")
  assert (tmp_path / "config.json").exists()


@pytest.mark.slow
def test_rows_round_up_to_split_over_microbatches(experiment, tmp_path):
  # 256 tokens of 32 give 8 rows, which 3 microbatches cannot split: the run takes 9, says so once.
  state, log = run_train(experiment("train.steps=2", "train.microbatches=3"), tmp_path)
  note = ("tfm: data.tokens_per_batch=256 gives 8 rows of data.max_length=32; rounded up to 9 rows "
          "(288 tokens) to split over 1 batch shards x train.microbatches=3")
  assert log.count(note) == 1 and log.count("rounded up") == 1, log
  assert int(state.step) == 2 and int(state.nonfinite_count) == 0


def test_resume_is_exact(experiment, tmp_path, six_steps):
  uninterrupted = six_steps[1]
  run_train(experiment("train.steps=3"), tmp_path / "b")
  resumed, log = run_train(experiment("train.steps=6"), tmp_path / "b")
  assert "resumed from step 3" in log
  assert int(resumed.step) == 6
  assert _same_params(uninterrupted, resumed)  # bit for bit: data position and dropout keys restored
  assert ckpt_lib.available_steps(tmp_path / "b") == [3, 6]


def test_corrupt_latest_checkpoint_falls_back(experiment, tmp_path, caplog, six_steps):
  reference = copy_of(six_steps, tmp_path / "b")
  # Tear the latest checkpoint: truncate every file of step 6's state.
  for root, _, files in os.walk(tmp_path / "b" / "checkpoints" / "6" / "state"):
    for name in files:
      with open(os.path.join(root, name), "r+b") as f:
        f.truncate(3)
  state, log = run_train(experiment("train.steps=6"), tmp_path / "b")
  assert "resumed from step 3" in log
  assert "cannot be restored" in caplog.text
  assert _same_params(reference, state)


def test_sigterm_saves_the_current_step(experiment, tmp_path, monkeypatch):
  """A SIGTERM in mid-run, sent to this process as the loop asks whether to stop after its second
  step (not after a fixed wait that must outlast the set-up and compile): that step is saved."""
  config = experiment("train.steps=100000", "train.checkpoint_every=100000", "train.log_every=100000",
                      "train.eval_every=100000")
  stop, asked = preemption.Preemption.stop, []

  def signalled(self):
    asked.append(True)
    if len(asked) == 2:
      os.kill(os.getpid(), signal.SIGTERM)  # the loop's own handler takes it
    return stop(self)

  monkeypatch.setattr(preemption.Preemption, "stop", signalled)
  state, log = run_train(config, tmp_path)
  assert "SIGTERM" in log
  assert "[dev]" not in log  # no evaluation between the signal and the checkpoint
  step = int(state.step)
  assert 0 < step < 100000 and step == len(asked)  # the step after which it stopped
  assert ckpt_lib.available_steps(tmp_path) == [step], (log, os.listdir(tmp_path), os.listdir(tmp_path / "checkpoints"))


@pytest.mark.parametrize("choices", [
    ("train.input=process", "train.saves=sync"),
    # long: its forms in the fast tier: background saves are the CPU's (every other run here,
    # test_resume_is_exact among them), and the select guard's states are the branch's to the bit
    # (tests/train/test_step.py::test_the_select_guard_applies_the_same_updates_as_the_branch)
    pytest.param(("train.guard=select", "train.saves=background"), marks=pytest.mark.long),
])
def test_every_input_saves_and_guard_form_trains_the_same_bits(experiment, tmp_path, choices,
                                                               six_steps):
  """The forms accelerators may run (tfm/train/platform_choices.py) on a CPU: batches made in a
  process of their own, saves waited for or in the background, the select guard. 4 steps with a
  save every 2, then a resume to 6, give the CPU's default state (the session's six-step run) to
  the bit."""
  reference = six_steps[1]
  every = "train.checkpoint_every=2"  # a save in mid-run, then the last step's
  run_train(experiment("train.steps=4", every, *choices), tmp_path / "b")
  assert ckpt_lib.available_steps(tmp_path / "b") == [2, 4]
  resumed, log = run_train(experiment("train.steps=6", every, *choices), tmp_path / "b")
  assert "resumed from step 4" in log and int(resumed.step) == 6
  assert all(f"{c}" in log for c in choices), log[:2000]  # the log names the forms it ran
  assert _same_params(reference, resumed)


@pytest.mark.parametrize("saves", ["background", "sync"])
def test_every_save_runs_its_collectives_on_the_training_thread(experiment, tmp_path, monkeypatch,
                                                                saves):
  """Checkpointer.save gathers every host's data state and the arrays' checksums (collectives
  under jax.distributed) and starts Orbax's save (its barriers): it is called on the thread that
  runs the steps, in step order, whatever train.saves says, so that the hosts' collectives
  always meet in the same order. Only Orbax's write to storage may go on in the background."""
  import threading  # pylint: disable=import-outside-toplevel
  calls = []
  save = ckpt_lib.Checkpointer.save

  def recorded(self, step, *args, **kwargs):
    calls.append((int(step), threading.current_thread() is threading.main_thread()))
    return save(self, step, *args, **kwargs)

  monkeypatch.setattr(ckpt_lib.Checkpointer, "save", recorded)
  run_train(experiment("train.steps=6", "train.checkpoint_every=2", f"train.saves={saves}"),
            tmp_path)
  assert calls == [(2, True), (4, True), (6, True)]
