"""The training loop's order of work (tfm/train/runner.py): what a log window's time covers, what
a preempted step does first, and what a resumed one owes. The step, data, evaluations and checkpointer are stand-ins that record
what happens and when; the loop itself is the real one."""

import io
import time
import types

import jax
import numpy as np
import pytest

from tfm.train import runner
from tfm.train.step import NonFiniteError
from tfm.train.progress import Progress

STEP_S, EVAL_S, TOKENS = 0.05, 0.5, 100


class Recorder:
  """The writer, checkpointer and data stand-ins; `events` in the order the loop caused them."""

  def __init__(self):
    self.events, self.windows = [], []

  def write(self, step, values, prefix="train"):
    if prefix == "train":
      self.windows.append((step, values))

  def text(self, line):
    self.events.append(line)

  def save(self, step, state, data_state):
    self.events.append(f"save {step}")

  def wait(self):
    self.events.append("on disk")

  def __next__(self):
    return {}

  def stats(self):
    return {}

  def get_state(self):
    return {}


def run(tmp_path, monkeypatch, *, steps, log_every, eval_every, checkpoint_every, bleu_every=0,
        stop_at=None, skipped=(), nonfinite="stop", start=0, profile_steps=(), rec=None,
        timed=False):
  """The loop over stand-ins; timed: each step sleeps STEP_S and each evaluation EVAL_S (the tests
  of what a window's time holds), otherwise they take no time (the tests of the order of work)."""
  monkeypatch.setattr(runner.flops_lib, "batch_flops", lambda model, batch: 1.0)
  rec = rec or Recorder()

  steps_run = []

  def train_step(state, batch):  # loss = the step number, NaN on the `skipped` steps
    time.sleep(STEP_S if timed else 0)
    steps_run.append(len(steps_run) + 1)
    bad = steps_run[-1] in skipped
    loss = np.float32("nan" if bad else steps_run[-1])
    return state, dict(loss=loss, nll=loss, accuracy=np.float32(0.5), tokens=np.float32(TOKENS),
                       grad_norm=np.float32(1), learning_rate=np.float32(1e-3),
                       nonfinite=np.int32(bad),
                       nonfinite_count=np.int32(sum(s in skipped for s in steps_run)))

  def evaluation(name):
    def evaluate(params, k, eval_set):
      assert eval_set == "dev"
      rec.events.append(name)
      time.sleep(EVAL_S if timed else 0)
      return {"nll": 1.0}
    return evaluate

  calls = iter(range(start + 1, steps + 1))
  preemption = types.SimpleNamespace(stop=lambda: next(calls) == stop_at)
  tc = types.SimpleNamespace(steps=steps, profile_steps=profile_steps, log_every=log_every,
                             eval_every=eval_every, checkpoint_every=checkpoint_every,
                             nonfinite=nonfinite, curves=False)
  config = types.SimpleNamespace(train=tc, eval=types.SimpleNamespace(bleu_every=bleu_every),
                                 model=None, translates=True)
  step_runner = runner.StepRunner(
      config=config, train_step=train_step, batches=rec,
      runs=[runner.Run(workdir=str(tmp_path), writer=rec, checkpointer=rec)], state_shardings=None,
      evaluate_dev=evaluation("dev loss"),
      evaluate_bleu=evaluation("dev bleu") if bleu_every else None, preemption=preemption,
      progress=Progress(steps, 0, io.StringIO(), tty=False))
  runner.run_steps(step_runner, types.SimpleNamespace(params=None), start)
  return rec


def test_log_windows_hold_their_steps_time_and_not_the_evaluations(tmp_path, monkeypatch):
  """Evaluations every 3 steps, BLEU every 5, log lines every 2: every step is in exactly one
  window, and a window's time per step is its steps' (>= STEP_S, the sleep each step takes), not
  an evaluation's share (a window of 1 or 2 steps holding an EVAL_S would give >= 0.3 s)."""
  rec = run(tmp_path, monkeypatch, steps=8, log_every=2, eval_every=3, checkpoint_every=100,
            bleu_every=5, timed=True)
  ends = [step for step, _ in rec.windows]
  assert ends == [2, 3, 4, 5, 6, 8]  # log steps, evaluation steps and the last
  assert sum(values["tokens"] for _, values in rec.windows) == 8 * TOKENS
  for step, values in rec.windows:
    assert STEP_S <= values["step_s"] < STEP_S + EVAL_S / 2 - 0.05, (step, values)
    assert values["target_tokens_per_s"] == pytest.approx(TOKENS / values["step_s"])
  assert rec.events[1:] == ["dev loss", "dev bleu", "dev loss", "save 8", "dev loss", "dev bleu"]


@pytest.mark.parametrize("stop_at, expected", [
    # An evaluation step: nothing evaluated; the save on disk before the line says so.
    (3, ["save 3", "on disk", "tfm: SIGTERM: saved step 3, exiting"]),
    (4, ["dev loss", "save 4", "on disk", "tfm: SIGTERM: saved step 4, exiting"]),
    (6, ["dev loss", "save 6", "dev loss"]),  # the last step: saved, then its final evaluation
])
def test_a_preempted_step_is_saved_before_any_evaluation(tmp_path, monkeypatch, stop_at, expected):
  rec = run(tmp_path, monkeypatch, steps=6, log_every=10, eval_every=3, checkpoint_every=10,
            stop_at=stop_at)
  assert rec.events[1:] == expected  # events[0]: the step's compile line


@pytest.mark.parametrize("start, expected", [
    # Resumed at an evaluation step (a SIGTERM there saved it before its evaluation): the
    # evaluation first, then the steps, as an uninterrupted run evaluated 3 after saving it.
    (3, ["dev loss", "compiled", "save 6", "dev loss"]),
    (4, ["compiled", "save 6", "dev loss"]),  # owes nothing
])
def test_a_resumed_step_runs_the_evaluations_its_save_came_before(tmp_path, monkeypatch, start,
                                                                   expected):
  rec = run(tmp_path, monkeypatch, steps=6, log_every=10, eval_every=3, checkpoint_every=10,
            start=start)
  assert ["compiled" if "compiled" in e else e for e in rec.events] == expected


def test_a_skipped_step_is_counted_and_left_out_of_the_window_means(tmp_path, monkeypatch):
  """train.nonfinite='skip': a step whose loss is NaN is not applied; its window's loss is the mean
  of the applied steps' (4 and 6: 5), not NaN, and nonfinite_count says one was skipped."""
  rec = run(tmp_path, monkeypatch, steps=6, log_every=3, eval_every=100, checkpoint_every=100,
            skipped=(5,), nonfinite="skip")
  (_, first), (_, second) = rec.windows
  assert (first["loss"], first["nonfinite_count"]) == (2.0, 0)  # steps 1-3
  assert second["loss"] == 5.0 and second["nonfinite_count"] == 1  # steps 4 and 6
  assert second["perplexity"] == pytest.approx(np.exp(5.0))
  assert second["tokens"] == 3 * TOKENS  # the skipped step's batch was read all the same


def traces(tmp_path):
  return sorted(p.name for p in (tmp_path / "tensorboard").glob("plugins/profile/*/*.xplane.pb"))


@pytest.mark.parametrize("start, stop_at, line, traced", [
    (0, None, "tfm: profiler trace of steps 3-5 in", True),
    (0, 4, "tfm: profiler trace of steps 3-4 in", True),  # preempted inside the window
    (3, None, "tfm: train.profile_steps=(2, 5): this run resumed at step 3, inside the window, "
              "so it writes no trace", False),
    (5, None, None, False),  # resumed after the window
])
def test_profile_steps_across_resumes_and_preemptions(tmp_path, monkeypatch, start, stop_at, line,
                                                      traced):
  """train.profile_steps=(2, 5) traces steps 3-5 with the real jax.profiler; a run resumed inside
  the window does not stop a trace it never started, and a preempted one stops the trace it did."""
  rec = run(tmp_path, monkeypatch, steps=6, log_every=10, eval_every=10, checkpoint_every=10,
            stop_at=stop_at, start=start, profile_steps=(2, 5))
  said = [e for e in rec.events if "profile" in e]
  assert [e[:len(line)] for e in said] == ([line] if line else [])
  assert bool(traces(tmp_path)) == traced
  jax.profiler.start_trace(str(tmp_path / "again"))  # no trace was left running
  jax.profiler.stop_trace()


def test_nonfinite_stop_raises_at_the_windows_end_before_any_later_save(tmp_path, monkeypatch):
  """train.nonfinite='stop', a NaN loss at step 3, log lines every 4, checkpoints every 2: step 2
  is saved, the run stops at step 4's flush naming step 3, and step 4 is never saved."""
  rec = Recorder()
  with pytest.raises(NonFiniteError, match=r"non-finite update at step 3 \(loss=nan"):
    run(tmp_path, monkeypatch, steps=8, log_every=4, eval_every=100, checkpoint_every=2,
        skipped=(3,), nonfinite="stop", rec=rec)
  assert [e for e in rec.events if e.startswith("save")] == ["save 2"]
