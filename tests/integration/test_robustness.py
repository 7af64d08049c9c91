"""Nothing lost, nothing poisoned: non-finite updates never saved, checkpoints that restore and
evaluate as if nothing had happened, one run per workdir."""

import glob
import json
import logging
import os
import subprocess
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests.integration.conftest import copy_of, run_train, tiny_flags
from tfm import cli
from tfm import experiment as experiment_lib
from tfm.train import checkpoint as ckpt_lib
from tfm.train.checkpoint import checksums
from tfm.train import optimizer as optimizer_lib

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def _saved_states(workdir):
  """{step: the raw checkpointed TrainState as nested numpy (no target tree needed)}."""
  out = {}
  for step in ckpt_lib.available_steps(workdir):
    with ocp.PyTreeCheckpointer() as c:
      out[step] = c.restore(ckpt_lib.checkpoint_dir(workdir) / str(step) / "state")
  return out


def _same_params(a, b) -> bool:
  return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(jax.device_get(a.params)),
                                                  jax.tree.leaves(jax.device_get(b.params))))


# The steps built with a poisoned schedule, by its value (repr): a later test that poisons the
# learning rate alike calls them (an equal config's pieces, tfm/experiment.py), traced once.
_POISONED: dict[str, dict] = {}


@pytest.fixture
def nan_after_two_updates(monkeypatch):
  """The learning rate becomes `value` after two updates (the config itself rejects nan / inf)."""
  installed = []

  def install(value):
    make_schedule = optimizer_lib.make_schedule

    def poisoned(train, d_model):
      schedule = make_schedule(train, d_model)
      return lambda count: jax.numpy.where(count >= 2, value, schedule(count))

    monkeypatch.setattr(optimizer_lib, "make_schedule", poisoned)
    experiment_lib.forget_shared()  # steps built before would keep the real schedule
    shared = experiment_lib._shared  # pylint: disable=protected-access
    shared.update(_POISONED.get(repr(value), {}))
    installed.append(repr(value))

  # The real steps built before are put back afterwards: the next test calls them instead of
  # tracing them again.
  kept = dict(experiment_lib._shared)  # pylint: disable=protected-access
  yield install
  if installed:
    _POISONED[installed[-1]] = dict(experiment_lib._shared)  # pylint: disable=protected-access
  experiment_lib.forget_shared()  # and the poisoned ones must not reach another test's runs
  experiment_lib._shared.update(kept)  # pylint: disable=protected-access


@pytest.mark.slow
@pytest.mark.parametrize("value", [
    float("nan"),
    # long: [nan] covers it (the guard's one isfinite test of the learning rate takes inf as nan)
    pytest.param(float("inf"), marks=pytest.mark.long)])
def test_a_nonfinite_learning_rate_never_reaches_a_checkpoint(experiment, tmp_path, value,
                                                              nan_after_two_updates):
  nan_after_two_updates(value)
  state, log = run_train(experiment("train.steps=6"), tmp_path)
  assert int(state.nonfinite_count) == 4 and "nonfinite_count 4" in log
  saved = _saved_states(tmp_path)
  assert sorted(saved) == [3, 6]
  for step, tree in saved.items():
    leaves = [x for x in jax.tree.leaves(tree) if np.issubdtype(np.asarray(x).dtype, np.floating)]
    assert leaves and all(np.all(np.isfinite(x)) for x in leaves), step


def test_nonfinite_stop_is_one_line(experiment, corpus, tmp_path, capsys, nan_after_two_updates):
  nan_after_two_updates(float("nan"))
  args = ["tfm", "train", f"--workdir={tmp_path / 'w'}"] + tiny_flags(
      corpus, "train.steps=6", "train.log_every=3", "train.nonfinite=stop")
  assert cli.main(args) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("tfm train: error: non-finite update at step 3 ("), err
  assert "learning_rate=nan" in err[0] and "Traceback" not in err[0]


@pytest.mark.long  # its parts in the fast tier: the SIGTERM save (test_train_loop.py::
# test_sigterm_saves_the_current_step) and the off-series saves' retention (tests/train/
# test_checkpoint.py::test_saves_outside_the_series_are_kept_only_while_newest)
def test_a_preemption_save_does_not_evict_the_averaged_series(experiment, tmp_path, capsys):
  """Runs stopped at steps 4, 5 and 7 (saves outside the every-3 series), then resumed to 12: the
  kept checkpoints, and tfm eval of their average, are those of an uninterrupted run."""
  config = lambda steps: experiment(f"train.steps={steps}", "train.keep_checkpoints=3",
                                    "train.average_checkpoints=3", "train.eval_every=1000")
  run_train(config(12), tmp_path / "a")
  for steps in (4, 5, 7, 12):
    run_train(config(steps), tmp_path / "b")
  assert ckpt_lib.available_steps(tmp_path / "a") == ckpt_lib.available_steps(tmp_path / "b") == [
      6, 9, 12]
  # tfm eval reads the run's own config (steps 12, every 3): the same three checkpoints, averaged.
  results = []
  for name in ("a", "b"):
    assert cli.main(["tfm", "eval", f"--workdir={tmp_path / name}", "--limit=2"]) == 0
    results.append(json.loads((tmp_path / name / "eval_dev_12_avg3_first2.json").read_text()))
  assert results[0]["checkpoints"] == results[1]["checkpoints"] == [6, 9, 12]
  assert results[0]["perplexity"] == results[1]["perplexity"]
  capsys.readouterr()


def _flip_bytes(workdir, step, fraction=0.25):
  """Flips one bit of the byte at `fraction` of every data file of a checkpoint's arrays (where a
  flip lands in an OCDBT file depends on the layout: array data, a zstd header, or bytes the reader
  never uses)."""
  files = glob.glob(str(ckpt_lib.checkpoint_dir(workdir) / str(step) / "state" / "**" / "d" / "*"),
                    recursive=True)
  assert files
  for path in files:
    with open(path, "r+b") as f:
      f.seek(int(os.path.getsize(path) * fraction))
      byte = f.read(1)
      f.seek(-1, os.SEEK_CUR)
      f.write(bytes([byte[0] ^ 0x40]))


def _perturb_one_array(workdir, step):
  """Rewrites a checkpoint's arrays with one bit of one parameter changed: well-formed files whose
  values no longer match the checkpoint's manifest (what a flipped bit in array data gives)."""
  path = ckpt_lib.checkpoint_dir(workdir) / str(step) / "state"
  with ocp.PyTreeCheckpointer() as c:
    tree = jax.tree.map(np.array, c.restore(path))  # writable host copies
  leaf = tree["params"]["decoder"]["layer_0"]["ffn"]["wi"]["kernel"]
  leaf.view(np.uint32)[0, 0] ^= 1
  path.rmtree()
  with ocp.PyTreeCheckpointer() as c:
    c.save(path, tree)


@pytest.mark.slow
def test_flipped_bits_in_an_array_are_caught_and_training_falls_back_each_time(experiment, tmp_path,
                                                                                caplog, six_steps):
  reference = copy_of(six_steps, tmp_path / "b")
  for _ in range(2):  # the same step corrupted twice: each copy is set aside
    _perturb_one_array(tmp_path / "b", 6)
    with caplog.at_level(logging.WARNING):
      state, log = run_train(experiment("train.steps=6"), tmp_path / "b")
    assert "resumed from step 3" in log
    assert "do not match their checksums, e.g. params/decoder/layer_0/ffn/wi/kernel" in caplog.text
    assert _same_params(reference, state)  # bit-exact from step 3
    caplog.clear()
  directory = ckpt_lib.checkpoint_dir(tmp_path / "b")
  assert sorted(p.name for p in directory.iterdir() if "unreadable" in p.name) == [
      "6.unreadable", "6.unreadable.1"]


def test_flipped_bytes_in_the_files_never_resume_from_garbage(experiment, tmp_path, caplog,
                                                              six_steps):
  reference = copy_of(six_steps, tmp_path / "b")
  _flip_bytes(tmp_path / "b", 6)
  with caplog.at_level(logging.WARNING):
    state, log = run_train(experiment("train.steps=6"), tmp_path / "b")
  assert "resumed from step 3" in log and "checkpoints/6 cannot be restored" in caplog.text
  assert _same_params(reference, state)


def _rewrite_data_item(workdir, step, change, fix_manifest):
  path = ckpt_lib.checkpoint_dir(workdir) / str(step) / "data" / "metadata"
  payload = json.loads(path.read_text())
  change(payload)
  path.write_text(json.dumps(payload))
  if fix_manifest:  # a data state that is consistent with its checksum, yet wrong
    manifest_path = ckpt_lib.checkpoint_dir(workdir) / str(step) / "manifest" / "metadata"
    manifest = json.loads(manifest_path.read_text())
    manifest["data"] = checksums.json_checksum(payload)
    manifest_path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("fix_manifest, message", [(False, "does not match its checksum"),
                                                   (True, "KeyError")])
def test_a_wrong_data_state_falls_back(experiment, tmp_path, caplog, fix_manifest, message,
                                      six_steps):
  reference = copy_of(six_steps, tmp_path / "b")
  _rewrite_data_item(tmp_path / "b", 6, lambda p: p["hosts"][0].pop("batcher"), fix_manifest)
  with caplog.at_level(logging.WARNING):
    state, log = run_train(experiment("train.steps=6"), tmp_path / "b")
  assert "resumed from step 3" in log and message in caplog.text
  assert _same_params(reference, state)


def test_eval_falls_back_past_a_corrupt_checkpoint(tmp_path, caplog, capsys, six_steps):
  copy_of(six_steps, tmp_path / "b")
  _perturb_one_array(tmp_path / "b", 6)
  with caplog.at_level(logging.WARNING):
    assert cli.main(["tfm", "eval", f"--workdir={tmp_path / 'b'}", "--limit=2",
                     "--average=1"]) == 0
  result = json.loads((tmp_path / "b" / "eval_dev_3_avg1_first2.json").read_text())
  assert result["checkpoints"] == [3]
  assert "checkpoints/6 cannot be restored for averaging" in caplog.text
  assert "do not match their checksums" in caplog.text
  capsys.readouterr()


def test_a_live_lock_refuses_and_a_stale_one_is_taken_over(experiment, tmp_path, caplog):
  run_train(experiment("train.steps=3"), tmp_path)
  before = sorted(os.listdir(tmp_path))
  with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as other:
    (tmp_path / ".lock").write_text(json.dumps({"pid": other.pid, "host": os.uname().nodename,
                                                "since": "now"}))
    with pytest.raises(ValueError, match=rf"in use by another tfm train \(pid {other.pid}"):
      run_train(experiment("train.steps=6"), tmp_path)
    other.kill()
  assert set(os.listdir(tmp_path)) == set(before) | {".lock"}  # nothing written, nothing removed
  assert ckpt_lib.available_steps(tmp_path) == [3]  # untouched
  # Its owner is gone now: the next run takes the lock over and resumes.
  with caplog.at_level(logging.WARNING):
    state, log = run_train(experiment("train.steps=6"), tmp_path)
  assert "stale lock" in caplog.text and "resumed from step 3" in log and int(state.step) == 6
  assert not (tmp_path / ".lock").exists()


def test_another_model_cannot_resume_and_config_json_stays(experiment, tmp_path):
  run_train(experiment("train.steps=3"), tmp_path)
  config_json = (tmp_path / "config.json").read_bytes()
  with pytest.raises(ValueError, match=r"model\.d_model: 16 -> 32.*use a new --workdir"):
    run_train(experiment("train.steps=6", "model.d_model=32"), tmp_path)
  assert (tmp_path / "config.json").read_bytes() == config_json
  assert ckpt_lib.available_steps(tmp_path) == [3]
  # Changing what a resume may change (steps, logging) is fine.
  state, log = run_train(experiment("train.steps=6", "train.log_every=2"), tmp_path)
  assert "resumed from step 3" in log and int(state.step) == 6


def test_bucketed_resume_with_another_batch_split_is_refused_and_keeps_the_checkpoints(
    experiment, tmp_path):
  run_train(experiment("train.steps=1", "data.packing=False"), tmp_path)  # 1 batch into a window
  with pytest.raises(ckpt_lib.CheckpointError, match=r"rows .*train\.microbatches.*data\.packing=True"):
    run_train(experiment("train.steps=2", "data.packing=False", "train.microbatches=3"), tmp_path)
  assert ckpt_lib.available_steps(tmp_path) == [1]  # refused, not set aside as unreadable
  state, log = run_train(experiment("train.steps=2", "data.packing=False"), tmp_path)
  assert "resumed from step 1" in log and int(state.step) == 2
