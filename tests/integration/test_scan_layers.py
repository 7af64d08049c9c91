"""model.scan_layers end to end on the fake corpus: the same loss curve as the unrolled model, and
`tfm convert` turning a workdir into the other layout, which training then continues.

Dropout is off here: the two layouts draw their dropout masks from different RNG streams (flax
derives an unrolled layer's key from its name, a scanned layer's by splitting the stack's key), so
with dropout the curves agree in distribution only. Everything else is the same computation.
"""

import json
import os
import re
import shutil
import socket
import subprocess

import jax
import numpy as np
import pytest

from tests.integration.conftest import run_train
from tfm import cli
from tfm.config import build
from tfm.experiment import Experiment
from tfm.model.scan_convert import stack_layers
from tfm.train import checkpoint as ckpt_lib
from tfm.train.checkpoint import best as best_lib

DEPTH = ("model.num_encoder_layers=2", "model.num_decoder_layers=2", "model.dropout_rate=0.0")
SCAN = "model.scan_layers=true"


def _losses(log, split="train"):
  """The losses the loop logs (4 decimals), by step."""
  pattern = rf"\[{split}\] step (\d+)(?:/\d+ \(\d+%\))? \| loss ([0-9.]+)"  # train: 'step 2/6 (33%)'
  return {int(s): float(x) for s, x in re.findall(pattern, log)}


def _files(root):
  return sorted((os.path.relpath(os.path.join(d, f), root), os.path.getmtime(os.path.join(d, f)))
                for d, _, names in os.walk(root) for f in names)


@pytest.mark.long  # the fast tier trains a converted (scanned) workdir on against its unrolled run
def test_scanned_layers_train_the_same_loss_curve(experiment, tmp_path):
  steps = ("train.steps=6", "train.log_every=2", "train.eval_every=6", "train.checkpoint_every=6")
  _, unrolled = run_train(experiment(*DEPTH, *steps), tmp_path / "unrolled")
  _, scanned = run_train(experiment(*DEPTH, *steps, SCAN), tmp_path / "scanned")
  want, got = _losses(unrolled), _losses(scanned)
  assert sorted(want) == [2, 4, 6] and want[6] < want[2] - 0.1, unrolled
  assert sorted(got) == sorted(want)
  np.testing.assert_allclose([got[s] for s in sorted(want)], [want[s] for s in sorted(want)],
                             atol=2e-4)  # the 4th decimal may round the other way
  np.testing.assert_allclose(_losses(scanned, "dev")[6], _losses(unrolled, "dev")[6], atol=2e-4)


BEST = ("train.best_metric=dev_ppl", "train.eval_every=3")  # a best checkpoint at steps 3 and 6


def _convert(experiment, tmp_path, capsys):
  """A (unrolled, a best checkpoint) trained 3 steps and converted to B (scanned): B holds A's
  parameters stacked, bit for bit, its best checkpoint and the record of it. (a, b, B's config,
  A's config, A's parameters stacked)."""
  a, b = str(tmp_path / "a"), str(tmp_path / "b")
  run_train(experiment(*DEPTH, *BEST, "train.steps=3"), a)
  before = _files(a)
  assert cli.main(["tfm", "convert", "--workdir", a, "--out", b, "--scan_layers", "true"]) == 0
  assert "1 checkpoint(s) [3]" in capsys.readouterr().out
  assert _files(a) == before  # the source is only read
  config = build(json.load(open(os.path.join(b, "config.json"))))
  assert config.model.scan_layers and ckpt_lib.available_steps(b) == [3]
  source_config = build(json.load(open(os.path.join(a, "config.json"))))
  assert config.replace(model=source_config.model) == source_config
  # The parameters are A's, stacked, bit for bit.
  got = ckpt_lib.restore_params(b, 3, Experiment(config).abstract_params)
  want = stack_layers(ckpt_lib.restore_params(a, 3, Experiment(source_config).abstract_params))
  assert jax.tree.structure(got) == jax.tree.structure(want)
  assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want)))

  # Its best checkpoint too, and the record of it.
  assert ckpt_lib.available_steps(best_lib.best_dir(b)) == [3]
  best = ckpt_lib.restore_params(best_lib.best_dir(b), 3, Experiment(config).abstract_params)
  assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(best), jax.tree.leaves(want)))
  assert best_lib.read_record(b) == best_lib.read_record(a)
  return a, b, config, source_config, want


@pytest.mark.long  # the fast tier converts (test_convert_a_workdir); its step trains on alike in
# tests/train/test_scan_state.py::test_converted_state_trains_on_like_the_original
def test_a_converted_workdir_trains_on_as_its_source(experiment, tmp_path, capsys):
  """Both continue to step 6 alike: B resumes with its Adam moments, data position and rng."""
  a, b, _, _, _ = _convert(experiment, tmp_path, capsys)
  _, log_a = run_train(experiment(*DEPTH, *BEST, "train.steps=6"), a)
  _, log_b = run_train(experiment(*DEPTH, *BEST, "train.steps=6", SCAN), b)
  assert "resumed from step 3" in log_b
  np.testing.assert_allclose(_losses(log_b)[6], _losses(log_a)[6], atol=2e-4)


def test_convert_a_workdir(experiment, tmp_path, capsys):
  a, b, config, _, want = _convert(experiment, tmp_path, capsys)

  # A workdir trained on fsdp x tensor = 2 x 2 devices converts on this one, data parallel, and B
  # keeps that mesh for resuming where it ran. Its --out is what a conversion killed before it
  # finished left (no config.json, its lock's process gone): converted again by the same command.
  moved, d = tmp_path / "moved", tmp_path / "d"
  shutil.copytree(a, moved)
  config_json = json.loads((moved / "config.json").read_text())
  config_json["mesh"].update(fsdp=2, tensor=2)
  (moved / "config.json").write_text(json.dumps(config_json))
  best_lib.write_stopped(moved, 3, "early stop (train.patience)")  # as the loop writes it
  (d / "checkpoints" / "3").mkdir(parents=True)
  gone = subprocess.Popen(["true"])  # pylint: disable=consider-using-with
  gone.wait()
  lock = json.dumps({"pid": gone.pid, "host": socket.gethostname(), "since": "then"})
  (d / ".lock").write_text(lock)
  assert cli.main(["tfm", "convert", "--workdir", str(moved), "--out", str(d),
                   "--scan_layers", "true"]) == 0
  assert "does not fit the 1 device(s) here: data parallel" in capsys.readouterr().err
  assert ckpt_lib.available_steps(d) == ckpt_lib.available_steps(a) == [3]
  assert (d / "config.json").exists() and not (d / ".lock").exists()
  d_config = build(json.load(open(d / "config.json")))
  assert best_lib.stopped(d) == {"step": 3, "reason": "early stop (train.patience)"}
  assert (ckpt_lib.available_steps(best_lib.best_dir(d))
          == ckpt_lib.available_steps(best_lib.best_dir(moved)))
  assert (d_config.mesh.fsdp, d_config.mesh.tensor, d_config.model.scan_layers) == (2, 2, True)
  moved_params = ckpt_lib.restore_params(str(d), 3, Experiment(config).abstract_params)
  assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(moved_params),
                                                  jax.tree.leaves(want)))

  # A directory that holds anything else stays refused.
  other = tmp_path / "other"
  other.mkdir()
  (other / ".lock").write_text(lock)
  (other / "notes.txt").write_text("mine")
  assert cli.main(["tfm", "convert", "--workdir", a, "--out", str(other),
                   "--scan_layers", "true"]) == 1
  assert "exists and is not empty" in capsys.readouterr().err
  assert sorted(p.name for p in other.iterdir()) == [".lock", "notes.txt"]

  # Converting to the layout it has, or into a workdir that is in use, is refused in one line.
  assert cli.main(["tfm", "convert", "--workdir", b, "--out", str(tmp_path / "c"),
                   "--scan_layers", "true"]) == 1
  assert "already have model.scan_layers=True" in capsys.readouterr().err
  assert cli.main(["tfm", "convert", "--workdir", b, "--out", a, "--scan_layers", "false"]) == 1
  assert "--out" in capsys.readouterr().err and not os.path.exists(tmp_path / "c")
