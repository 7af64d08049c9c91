"""Early stopping by dev BLEU (train.best_metric=dev_bleu, train.patience) in a real training on the
fake Bible corpus: where it stops, what it leaves, and that the run is finished for a rerun, for
`tfm eval` and for a sweep; chrF and TER logged beside dev BLEU."""

import json
import os

import jax
import numpy as np
import pytest

from tests.integration.conftest import run_train
from tfm import cli
from tfm.experiment import Experiment
from tfm.sweep import stacking
from tfm.train.checkpoint import best as best_lib
from tfm.train import checkpoint as ckpt_lib
from tfm.train.trackers import events

STEPS = 20


@pytest.fixture(scope="module")
def stopped(experiment_module, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("stopped")
  config = experiment_module(f"train.steps={STEPS}", "eval.bleu_every=2", "eval.bleu_examples=4",
                             "eval.beam_size=1", "eval.max_extra_length=3",
                             "train.best_metric=dev_bleu", "train.patience=2",
                             "train.checkpoint_every=5", "train.eval_every=100")
  _, out = run_train(config, workdir)
  return config, str(workdir), out


def _stop_step(history, patience):
  """The first evaluation after which `patience` evaluations in a row have not beaten the best
  before them (higher is better), recomputed from the recorded history; None if none."""
  best, stale = None, 0
  for step, value in history:
    if best is None or value > best:
      best, stale = value, 0
    else:
      stale += 1
    if stale >= patience:
      return step
  return None


def test_the_run_stops_where_patience_runs_out(stopped):
  config, workdir, out = stopped
  history = best_lib.read_record(workdir)["history"]
  bleu = events.read_scalars(os.path.join(workdir, "tensorboard"))["dev/bleu"]
  assert [[s, pytest.approx(v)] for s, v in bleu] == history  # every evaluation recorded
  step = _stop_step(history, 2)
  assert step is not None, f"dev BLEU improved at every other evaluation: {history}"
  assert step < STEPS  # stopped before the end, which the fixture's run is made to do
  ended = best_lib.stopped(workdir)
  assert ended["step"] == step and history[-1][0] == step
  assert f"tfm: early stop at step {step}: train.best_metric=dev_bleu has not improved" in out
  assert ckpt_lib.available_steps(workdir)[-1] == step  # its last checkpoint is the stop
  best_step = max(history, key=lambda sv: (sv[1], -sv[0]))[0]  # the first of the best
  assert ckpt_lib.available_steps(best_lib.best_dir(workdir)) == [best_step]


def test_chrf_and_ter_are_logged_beside_dev_bleu(stopped):
  _, workdir, _ = stopped
  scalars = events.read_scalars(os.path.join(workdir, "tensorboard"))
  steps = [s for s, _ in scalars["dev/bleu"]]
  for name in ("dev/chrf", "dev/ter"):
    assert [s for s, _ in scalars[name]] == steps
    assert all(0 <= v for _, v in scalars[name])


def test_a_stopped_run_is_finished(stopped, capsys):
  """A rerun trains nothing; tfm eval averages up to the stop; a sweep counts it as trained to
  the end."""
  config, workdir, _ = stopped
  ended = best_lib.stopped(workdir)
  assert ended is not None, "the run did not stop early"
  _, out = run_train(config, workdir)
  assert f"tfm: this run stopped early at step {ended['step']}" in out and "[train]" not in out
  assert ckpt_lib.available_steps(workdir)[-1] == ended["step"]
  assert cli.main(["tfm", "eval", f"--workdir={workdir}", "--limit=4", "--average=1"]) == 0
  result = json.loads(open(f"{workdir}/eval_dev_{ended['step']}_avg1_first4.json").read())
  assert result["checkpoints"] == [ended["step"]]
  assert stacking.reached(workdir, STEPS) == STEPS
  os.rename(f"{workdir}/{best_lib.STOPPED}", f"{workdir}/aside.json")
  try:
    assert stacking.reached(workdir, STEPS) == ended["step"]
  finally:
    os.rename(f"{workdir}/aside.json", f"{workdir}/{best_lib.STOPPED}")


def test_a_stack_refuses_patience(experiment, tmp_path):
  from tfm.loop import train_stack  # pylint: disable=import-outside-toplevel
  configs = [experiment("train.best_metric=dev_ppl", "train.patience=1", f"train.seed={s}",
                        f"data.shuffle_seed={s}") for s in (0, 1)]
  with pytest.raises(ValueError, match=r"config key train.patience \(1\): early stopping ends one "
                                       r"run, and a stack"):
    train_stack(configs, [str(tmp_path / "a"), str(tmp_path / "b")])


def test_the_best_so_far_survives_a_resume(experiment, tmp_path):
  """Trained 4 steps, then resumed to 8, with the best checkpoint by dev perplexity (evaluated
  every 2 steps, checkpointed every 4): the record, the best step and its parameters are those of
  an uninterrupted 8-step run."""
  args = ("train.best_metric=dev_ppl", "train.eval_every=2", "train.checkpoint_every=4")
  run_train(experiment(*args, "train.steps=4"), tmp_path / "resumed")
  run_train(experiment(*args, "train.steps=8"), tmp_path / "resumed")
  config = experiment(*args, "train.steps=8")
  run_train(config, tmp_path / "straight")
  records = [best_lib.read_record(tmp_path / n) for n in ("resumed", "straight")]
  assert [s for s, _ in records[0]["history"]] == [2, 4, 6, 8] and records[0] == records[1]
  steps = [ckpt_lib.available_steps(best_lib.best_dir(tmp_path / n)) for n in ("resumed", "straight")]
  assert steps[0] == steps[1] and len(steps[0]) == 1
  target = Experiment(config).abstract_params
  params = [ckpt_lib.restore_params(best_lib.best_dir(tmp_path / n), steps[0][0], target)
            for n in ("resumed", "straight")]
  for a, b in zip(*(map(np.asarray, jax.tree.leaves(p)) for p in params)):
    np.testing.assert_array_equal(a, b)


def test_each_member_of_a_stack_keeps_its_own_best(experiment, tmp_path):
  """A stack of two seeds with the best checkpoint by dev perplexity: each member's best step is
  the lowest of its own dev curve, and its best checkpoint holds that member's parameters (its
  periodic checkpoint of the same step)."""
  from tfm.loop import train_stack  # pylint: disable=import-outside-toplevel
  # Dropout 0.2: tests/integration/test_stack_training.py's model, whose stacked step this is
  # (traced once where both files run in one process, else compiled once in the session's cache)
  configs = [experiment("train.best_metric=dev_ppl", "train.eval_every=2", "train.checkpoint_every=2",
                        "train.keep_checkpoints=3", "train.steps=6", f"train.seed={s}",
                        f"data.shuffle_seed={s}", "model.dropout_rate=0.2") for s in (0, 1)]
  workdirs = [str(tmp_path / "s0"), str(tmp_path / "s1")]
  train_stack(configs, workdirs)
  target = Experiment(configs[0]).abstract_params
  curves = []
  for workdir in workdirs:
    curve = dict(events.read_scalars(os.path.join(workdir, "tensorboard"))["dev/perplexity"])
    curves.append(curve)
    step = min(curve, key=lambda s: (curve[s], s))
    assert ckpt_lib.available_steps(best_lib.best_dir(workdir)) == [step]
    best = ckpt_lib.restore_params(best_lib.best_dir(workdir), step, target)
    periodic = ckpt_lib.restore_params(workdir, step, target)
    for a, b in zip(jax.tree.leaves(best), jax.tree.leaves(periodic)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert curves[0] != curves[1]  # two runs, two curves
