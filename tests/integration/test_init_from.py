"""A run that starts from another run's parameters (train.init_from, tfm train --init_from) on the
fake Bible corpus: the parameters, a fresh optimizer, the record, a resume, another model or another
vocabulary refused."""

import dataclasses
import json
import pathlib
import re
import types

import jax
import numpy as np
import pytest

from tests.integration.conftest import run_train, tiny_flags
from tfm import cli
from tfm.experiment import Experiment
from tfm.train.checkpoint import best as best_lib
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


def _vocab_dir_of(source, tmp_path):
  """A data.vocab_dir holding a copy of the source's vocabulary."""
  vocab_dir = tmp_path / "vocab"
  vocab_dir.mkdir(exist_ok=True)
  for model in pathlib.Path(source).glob("spm_*.model"):
    (vocab_dir / model.name).write_bytes(model.read_bytes())
  return vocab_dir


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
  code = cli.main(["tfm", "train", *tiny_flags(corpus, "model.d_ff=64",
                                                f"data.vocab_dir={_vocab_dir_of(source, tmp_path)}"),
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


def _refused(args, tmp_path, capsys) -> str:
  code = cli.main(["tfm", "train", *args, f"--workdir={tmp_path / 'new'}"])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 1 and not (tmp_path / "new").exists()
  return err[-1]


def test_an_empty_vocab_dir_is_refused_before_it_trains_another_vocabulary(source, corpus, tmp_path,
                                                                           capsys):
  """data.vocab_dir set and holding no vocabulary: the run would train one of the same size, whose
  ids are other pieces than the source's embeddings learned; refused, nothing written there."""
  empty = tmp_path / "empty_vocab"
  empty.mkdir()
  line = _refused([*tiny_flags(corpus, f"data.vocab_dir={empty}"), f"--init_from={source}"],
                  tmp_path, capsys)
  assert line.startswith(f"tfm train: error: config key train.init_from: data.vocab_dir={empty} "
                         "holds no vocabulary spm_"), line
  assert list(empty.iterdir()) == []


def test_a_source_whose_vocabulary_is_not_found_is_refused(experiment, source, corpus, tmp_path,
                                                          capsys, monkeypatch):
  """A source trained with a relative data.vocab_dir, started from in another working directory:
  its vocabulary is not found there, and the run is refused instead of training another one."""
  here, relative = pathlib.Path.cwd(), tmp_path / "elsewhere"
  (relative / "vocab").mkdir(parents=True)
  config = experiment("data.vocab_dir=vocab", "train.steps=3")
  monkeypatch.chdir(relative)
  source_rel = tmp_path / "source_rel"
  run_train(config, source_rel)
  assert list((relative / "vocab").glob("spm_*.model"))
  monkeypatch.chdir(here)  # where ./vocab holds no vocabulary
  assert not (here / "vocab").exists()
  line = _refused([*tiny_flags(corpus, f"data.vocab_dir={tmp_path / 'vocab_here'}"),
                   f"--init_from={source_rel}"], tmp_path, capsys)
  assert f"config key train.init_from: {source_rel}'s vocabulary is not found" in line, line


def test_check_tokenizer_refuses_another_vocabulary(source, tmp_path):
  """The check after the data are prepared: a tokenizer whose SHA-256 is not the source's."""
  config = types.SimpleNamespace(train=types.SimpleNamespace(init_from=source))
  tokenizer = types.SimpleNamespace(model_sha256="a" * 64, path="here.model")
  init_from_lib.check_tokenizer(config, tokenizer, "a" * 64)
  with pytest.raises(ValueError, match=r"config key train.init_from: this run's vocabulary "
                                       r"here.model is not .*'s \(SHA-256 aaaaaaaaaaaa against "
                                       r"bbbbbbbbbbbb\)"):
    init_from_lib.check_tokenizer(config, tokenizer, "b" * 64)


def test_the_init_from_flag_is_the_config_key_before_the_config_is_checked(tmp_path, capsys):
  """--init_from=SOURCE is train.init_from=SOURCE when the train section is validated, so the keys
  that need a source (train.init_optimizer) take it; the flag and a different key are refused."""
  flags = ["tfm", "train", "--config=configs/quickstart.py", f"--workdir={tmp_path / 'new'}",
           "--config.train.init_optimizer=True"]
  assert cli.main([*flags, f"--init_from={tmp_path / 'source'}"], run=False) == 0
  assert cli.main([*flags, f"--config.train.init_from={tmp_path / 'source'}",
                   f"--init_from={tmp_path / 'source'}"], run=False) == 0
  assert cli.main(flags, run=False) == 1
  assert capsys.readouterr().err.strip().splitlines()[-1] == (
      "tfm train: error: config key train.init_optimizer: expected False without "
      "train.init_from, got True")
  assert cli.main([*flags, "--config.train.init_from=/elsewhere",
                   f"--init_from={tmp_path / 'source'}"], run=False) == 2
  assert capsys.readouterr().err.strip().splitlines()[-1] == (
      f"tfm train: --init_from={tmp_path / 'source'} and --config.train.init_from=/elsewhere: "
      "give one")
