"""A run that starts from another run's parameters (train.init_from, tfm train --init_from) on the
fake Bible corpus: the parameters, a fresh optimizer, the record, a resume, another model refused."""

import dataclasses
import json
import pathlib
import re

import jax
import numpy as np
import pytest

from tests.integration.conftest import run_train, tiny_flags
from tfm import cli
from tfm.experiment import Experiment
from tfm.train import best as best_lib
from tfm.train import checkpoint as ckpt_lib
from tfm.train import init_from as init_from_lib


@pytest.fixture(scope="module")
def source(experiment_module, tmp_path_factory):
  """6 steps, the best checkpoint by dev perplexity (evaluated every 2), its vocabulary in its
  workdir."""
  workdir = tmp_path_factory.mktemp("source")
  run_train(_own_vocabulary(experiment_module("train.eval_every=2", "train.best_metric=dev_ppl")),
            workdir)
  return str(workdir)


def _own_vocabulary(config):
  """The config with its vocabulary in its workdir (data.vocab_dir unset)."""
  return config.replace(data=dataclasses.replace(config.data, vocab_dir=None))


def _leaves(tree):
  return [np.asarray(x) for x in jax.tree.leaves(tree)]


@pytest.mark.parametrize("which", ["last", "best"])
def test_the_state_holds_the_sources_parameters_and_a_fresh_optimizer(source, experiment, tmp_path,
                                                                      which):
  config = _own_vocabulary(experiment(f"train.init_from={source}",
                                      f"train.init_checkpoint={which}"))
  exp = Experiment(config)
  state = init_from_lib.start_state(config, exp, str(tmp_path))
  where = source if which == "last" else best_lib.best_dir(source)
  step = ckpt_lib.available_steps(where)[-1]
  assert step == 6 or which == "best"
  saved = ckpt_lib.restore_params(where, step, exp.abstract_params)
  for ours, theirs in zip(_leaves(state.params), _leaves(saved)):
    np.testing.assert_array_equal(ours, theirs)
  fresh = exp.init_state()
  assert int(state.step) == 0
  for ours, new in zip(_leaves(state.opt_state), _leaves(fresh.opt_state)):  # zero moments, count
    np.testing.assert_array_equal(ours, new)
  assert json.loads((tmp_path / "init_from.json").read_text()) == {
      "workdir": source, "checkpoint": which, "step": step, "optimizer": "fresh"}


def test_init_optimizer_takes_the_sources_whole_state(source, experiment, tmp_path):
  """train.init_optimizer: the source's Adam moments, step and dropout key with its parameters."""
  config = _own_vocabulary(experiment(f"train.init_from={source}", "train.init_optimizer=True"))
  exp = Experiment(config)
  state = init_from_lib.start_state(config, exp, str(tmp_path))
  saved, _ = ckpt_lib.restore_state(source, 6, exp.abstract_state)
  assert int(state.step) == 6
  for ours, theirs in zip(_leaves(state), _leaves(saved)):
    np.testing.assert_array_equal(ours, theirs)
  assert json.loads((tmp_path / "init_from.json").read_text())["optimizer"] == "source"
  assert "its parameters, optimizer moments and schedule" in init_from_lib.describe(str(tmp_path))
  trained, out = run_train(dataclasses.replace(config, train=dataclasses.replace(
      config.train, steps=3)), tmp_path / "run")
  assert int(trained.step) == 6 + 3 and "started from the state of" in out


def test_a_run_from_the_source_resumes_its_own_checkpoints(source, experiment, tmp_path):
  source = pathlib.Path(source)
  """The new run (3 steps) says where it started and takes the source's vocabulary; resumed to 6
  steps it continues its own step 3 (not the source again): its step-6 parameters are those of an
  uninterrupted 6-step run from the source."""
  args = (f"train.init_from={source}",)
  _, out = run_train(_own_vocabulary(experiment(*args, "train.steps=3")), tmp_path / "new")
  assert f"tfm: started from the parameters of {source} (last checkpoint, step 6)" in out
  vocab = [p.name for p in (tmp_path / "new").glob("spm_*.model")]
  assert vocab and ((tmp_path / "new" / vocab[0]).read_bytes()
                    == (source / vocab[0]).read_bytes())
  config = json.loads((tmp_path / "new" / "config.json").read_text())
  assert config["train"]["init_from"] == str(source)
  resumed, out = run_train(_own_vocabulary(experiment(*args)), tmp_path / "new")
  assert "resumed from step 3" in out and "started from" not in out
  assert json.loads((tmp_path / "new" / "init_from.json").read_text())["step"] == 6
  straight, _ = run_train(_own_vocabulary(experiment(*args)), tmp_path / "straight")
  for a, b in zip(_leaves(resumed.params), _leaves(straight.params)):
    np.testing.assert_array_equal(a, b)


def test_another_model_is_refused_in_one_line(source, corpus, tmp_path, capsys):
  """model.d_ff 32 -> 64: the first parameter (by name) whose shape differs is named with both
  shapes, in one line, and nothing is left in the new workdir."""
  code = cli.main(["tfm", "train", *tiny_flags(corpus, "model.d_ff=64"),
                   f"--init_from={source}", f"--workdir={tmp_path / 'new'}"])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 1
  match = re.fullmatch(r"tfm train: error: config key train.init_from: (\S+) \(last checkpoint, step 6\) "
                       r"is another model: parameter (\S+): \(([\d, ]+)\) there, \(([\d, ]+)\) here",
                       err[-1])
  assert match, err[-1]
  assert match[1] == source
  name, there, here = match[2], match[3], match[4]
  assert "ffn" in name or "mlp" in name or "wi" in name or "wo" in name, name
  assert ("32" in there and "64" in here)
  assert not (tmp_path / "new").exists()
