"""The best checkpoint by a dev metric and early stopping (tfm/train/checkpoint/best.py) in the real training
loop (tfm/train/runner.py run_steps), with scripted dev figures and recording stand-ins for the step, the
data and the checkpointers."""

import io
import json
import types

import numpy as np
import pytest

from tfm.train import runner
from tfm.train.checkpoint import best as best_lib
from tfm.train.progress import Progress


class Recorder:
  def __init__(self, name, events):
    self.name, self.events = name, events

  def write(self, step, values, prefix="train"):
    pass

  def text(self, line):
    self.events.append(line)

  def save(self, step, state, data_state):
    self.events.append(f"{self.name} save {step}")

  def wait(self):
    pass

  def __next__(self):
    return {}

  def stats(self):
    return {}

  def get_state(self):
    return {}


def train(tmp_path, monkeypatch, perplexities: dict, *, steps, patience=0, start=0,
          metric="dev_ppl", stop_at=None):
  """Runs the loop from `start` to `steps` (or a SIGTERM at step `stop_at`), dev loss every 2
  steps giving perplexities[step]; returns (events, the last step run)."""
  monkeypatch.setattr(runner.flops_lib, "batch_flops", lambda model, batch: 1.0)
  events, ran = [], []

  def train_step(state, batch):
    ran.append(start + len(ran) + 1)
    one = np.float32(1)
    return state, dict(loss=one, nll=one, accuracy=one, tokens=one, grad_norm=one,
                       learning_rate=one, nonfinite=np.int32(0), nonfinite_count=np.int32(0))

  data, main, best = (Recorder(n, events) for n in ("data", "last", "best"))
  tracker = best_lib.BestTracker(str(tmp_path), metric, patience, start)
  tc = types.SimpleNamespace(steps=steps, profile_steps=(), log_every=100, eval_every=2,
                             checkpoint_every=100, nonfinite="stop", curves=False)
  config = types.SimpleNamespace(train=tc, eval=types.SimpleNamespace(bleu_every=0), model=None,
                                 translates=True)
  step_runner = runner.StepRunner(
      config=config, train_step=train_step, batches=data,
      runs=[runner.Run(str(tmp_path), main, main, tracker, best)], state_shardings=None,
      evaluate_dev=lambda params, k, name: {"perplexity": perplexities[ran[-1] if ran else start]},
      evaluate_bleu=None, preemption=types.SimpleNamespace(stop=lambda: ran[-1] == stop_at),
      progress=Progress(steps, start, io.StringIO(), tty=False))
  runner.run_steps(step_runner, types.SimpleNamespace(params=None), start)
  return [e for e in events if "compiled" not in e], ran[-1] if ran else start


PPL = {2: 50.0, 4: 40.0, 6: 45.0, 8: 40.0, 10: 41.0, 12: 30.0, 14: 35.0, 16: 36.0}


def test_each_strict_improvement_is_saved_as_the_best_checkpoint(tmp_path, monkeypatch):
  events, last = train(tmp_path, monkeypatch, PPL, steps=16)
  saves = [e for e in events if e.endswith(tuple(f"save {s}" for s in range(1, 17)))]
  # 8 ties 4's 40.0: the earlier checkpoint stays; the last checkpoint at 16 (the run's end).
  assert saves == ["best save 2", "best save 4", "best save 12", "last save 16"]
  assert last == 16 and not (tmp_path / best_lib.STOPPED).exists()
  record = json.loads((tmp_path / "best" / "best.json").read_text())
  assert record == {"metric": "dev_ppl", "history": [[s, v] for s, v in sorted(PPL.items())]}


def test_patience_stops_the_run_with_its_last_checkpoint_and_reason(tmp_path, monkeypatch):
  """Patience 2: after the best at 4, evaluations 6 and 8 do not improve (8 only ties): the run
  stops at step 8, saved there, with stopped.json saying why."""
  events, last = train(tmp_path, monkeypatch, PPL, steps=16, patience=2)
  assert last == 8
  reason = ("train.best_metric=dev_ppl has not improved on its best, 40.0000 at step 4 in 2 "
            "evaluations (train.patience=2)")
  assert events[-2:] == ["last save 8", f"tfm: early stop at step 8: {reason}"]
  assert best_lib.stopped(str(tmp_path)) == {"step": 8, "reason": reason}


def test_a_resume_keeps_the_best_so_far_and_the_evaluations_since(tmp_path, monkeypatch):
  """Interrupted after step 10 (its evaluations up to 10 recorded, and one at 12 from the attempt
  that went further before it was killed): resumed from 10, the run drops 12, sees 4 as the best
  so far and 6, 8, 10 as not improving on it, so with patience 4 it stops after 12's evaluation
  (42: no better), as an uninterrupted run does."""
  (tmp_path / "best").mkdir()
  (tmp_path / "best" / "best.json").write_text(json.dumps(
      {"metric": "dev_ppl", "history": [[s, PPL[s]] for s in (2, 4, 6, 8, 10)] + [[12, 1.0]]}))
  ppl = {**PPL, 12: 42.0}
  events, last = train(tmp_path, monkeypatch, ppl, steps=16, patience=4, start=10)
  assert last == 12 and events[-2] == "last save 12"
  assert "its best, 40.0000 at step 4 in 4 evaluations" in events[-1]
  uninterrupted = tmp_path / "uninterrupted"
  uninterrupted.mkdir()
  _, last = train(uninterrupted, monkeypatch, ppl, steps=16, patience=4)
  assert last == 12


@pytest.mark.parametrize("stop_at", [4, 5, 8])
def test_a_sigterm_keeps_the_uninterrupted_runs_best_checkpoints_and_early_stop(
    tmp_path, monkeypatch, stop_at):
  """Uninterrupted, patience 2: bests at 2 and 4, an early stop at 8. A SIGTERM at step 4 (an
  evaluation step: saved before its evaluation), 5 or 8, then a resume from that step: the same
  best saves and the same stop, step 4's evaluation run by the resume."""
  def best_saves_and_stop(events):
    return ([e for e in events if e.startswith("best save")],
            [e for e in events if "early stop" in e])
  alone, last = train(tmp_path / "alone", monkeypatch, PPL, steps=16, patience=2)
  assert best_saves_and_stop(alone) == (["best save 2", "best save 4"], [alone[-1]]) and last == 8
  work = tmp_path / "stopped"
  first, last = train(work, monkeypatch, PPL, steps=16, patience=2, stop_at=stop_at)
  assert last == stop_at and f"tfm: SIGTERM: saved step {stop_at}, exiting" in first
  then, last = train(work, monkeypatch, PPL, steps=16, patience=2, start=stop_at)
  assert last == 8 and best_lib.stopped(str(work)) == best_lib.stopped(str(tmp_path / "alone"))
  saves, stop = best_saves_and_stop(first + then)
  assert sorted(set(saves)) == ["best save 2", "best save 4"] and stop == [alone[-1]]
  record = lambda d: json.loads((d / "best" / "best.json").read_text())
  assert record(work) == record(tmp_path / "alone")


def test_the_tracker_reads_bleu_as_higher_is_better(tmp_path):
  tracker = best_lib.BestTracker(str(tmp_path), "dev_bleu", 0, 0)
  assert [tracker.observe(s, {"bleu": b}) for s, b in [(1, 3.0), (2, 2.0), (3, 5.0), (4, 5.0)]] \
      == [True, False, True, False]
  assert tracker.best == (3, 5.0) and tracker.stale == 1
