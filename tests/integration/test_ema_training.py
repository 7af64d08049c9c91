"""The EMA of the parameters (train.ema_decay) end to end on the fake corpus: evaluated beside the
parameters, resumed bit for bit, read by `tfm eval --checkpoint ema`, carried by train.init_from
and by `tfm convert`."""

import glob
import json
import os

import jax
import numpy as np
import pytest

from tests.integration.conftest import run_train
from tfm import cli
from tfm.config import build
from tfm.eval.restore import load_trained
from tfm.experiment import Experiment
from tfm.model.scan_convert import stack_layers
from tfm.train import checkpoint as ckpt_lib
from tfm.train import init_from as init_from_lib

pytestmark = pytest.mark.long  # several runs of the loop

EMA = ("train.ema_decay=0.9", "train.eval_every=3", "eval.beam_size=2",
       "eval.max_extra_length=4", "eval.batch_size=4")


def _leaves(tree):
  return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(tree))]


def _equal(a, b) -> bool:
  a, b = _leaves(a), _leaves(b)
  return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def with_ema(experiment_module, tmp_path_factory):
  """(workdir, final state, log) of 6 steps with an EMA, evaluated every 3."""
  workdir = tmp_path_factory.mktemp("ema")
  state, log = run_train(experiment_module("train.steps=6", *EMA), workdir)
  return str(workdir), state, log


def test_a_resumed_run_ends_with_the_same_ema(with_ema, experiment, tmp_path):
  """3 steps, then a resume to 6: parameters and EMA bit for bit the uninterrupted run's; the EMA
  is evaluated beside the parameters (`[dev_ema]`), and differs from them."""
  _, uninterrupted, log = with_ema
  assert "[dev_ema] step 3 | loss" in log and "[dev_ema] step 6 | loss" in log, log
  run_train(experiment("train.steps=3", *EMA), tmp_path)
  resumed, log = run_train(experiment("train.steps=6", *EMA), tmp_path)
  assert "resumed from step 3" in log
  assert _equal(resumed.params, uninterrupted.params)
  assert _equal(resumed.ema, uninterrupted.ema)
  assert not _equal(resumed.ema, resumed.params)
  assert {np.asarray(x).dtype for x in _leaves(resumed.ema)} == {np.dtype(np.float32)}
  # The EMA is part of the state: a resume keeps the setting, a change is named in one line.
  with pytest.raises(ckpt_lib.CheckpointError, match=r"config key train\.ema_decay: .* holds an "
                     r"EMA of the parameters and this run keeps none"):
    run_train(experiment("train.steps=9", *EMA[1:]), tmp_path)


def test_eval_and_translate_read_the_ema(with_ema, capsys, tmp_path):
  workdir, state, _ = with_ema
  trained = load_trained(workdir, checkpoint="ema")
  assert trained.steps == [6] and trained.checkpoint == "ema"
  assert _equal(trained.params, state.ema)
  assert cli.main(["tfm", "eval", f"--workdir={workdir}", "--checkpoint=ema", "--limit=4"]) == 0
  (path,) = glob.glob(f"{workdir}/eval_dev_ema6_first4.json")
  result = json.load(open(path))
  assert (result["checkpoint"], result["ema_decay"], result["checkpoints"]) == ("ema", 0.9, [6])
  source = tmp_path / "in.txt"
  source.write_text("In the beginning\n")
  capsys.readouterr()
  assert cli.main(["tfm", "translate", f"--workdir={workdir}", "--checkpoint=ema",
                   f"--input={source}"]) == 0
  out = capsys.readouterr()
  assert "tfm translate: 1 lines" in out.out + out.err
  with pytest.raises(ValueError, match=r"--average=2 with --checkpoint=ema"):
    load_trained(workdir, average=2, checkpoint="ema")


def test_eval_ema_of_a_run_without_one_is_a_clear_error(experiment, tmp_path):
  run_train(experiment("train.steps=3"), tmp_path)
  with pytest.raises(ValueError, match=r"--checkpoint=ema: .* kept no EMA of its parameters "
                                       r"\(its train.ema_decay is 0"):
    load_trained(str(tmp_path), checkpoint="ema")


@pytest.mark.parametrize("init_optimizer", [False, True])
def test_init_from_starts_or_carries_the_ema(with_ema, experiment, tmp_path, init_optimizer):
  """From a run with an EMA: with init_optimizer the source's EMA comes along (its whole state);
  without, the EMA starts as the parameters taken. A source without an EMA: the new run's EMA
  starts as its parameters either way; a new run without one drops the source's."""
  source, source_state, _ = with_ema
  vocab = ckpt_lib.read_config(source)["data"]["vocab_dir"]
  flags = [f"train.init_from={source}", f"train.init_optimizer={init_optimizer}",
           f"data.vocab_dir={vocab}"]
  config = experiment(*flags, "train.ema_decay=0.5")
  state = init_from_lib.start_state(config, Experiment(config), str(tmp_path / "a"))
  assert _equal(state.params, source_state.params)
  assert _equal(state.ema, source_state.ema if init_optimizer else source_state.params)
  config = experiment(*flags)  # no EMA here: the source's is not read
  state = init_from_lib.start_state(config, Experiment(config), str(tmp_path / "b"))
  assert state.ema is None and _equal(state.params, source_state.params)
  plain = tmp_path / "plain"
  plain_state, _ = run_train(experiment("train.steps=3"), plain)
  config = experiment(f"train.init_from={plain}", f"train.init_optimizer={init_optimizer}",
                      "train.ema_decay=0.5")
  state = init_from_lib.start_state(config, Experiment(config), str(tmp_path / "c"))
  assert _equal(state.ema, plain_state.params) and _equal(state.params, plain_state.params)


def test_convert_carries_the_ema(experiment, tmp_path, capsys):
  """tfm convert to the scanned layout: the EMA is stacked as the parameters are, bit for bit,
  and the converted run resumes with it."""
  depth = ("model.num_encoder_layers=2", "model.num_decoder_layers=2", "model.dropout_rate=0.0")
  a, b = str(tmp_path / "a"), str(tmp_path / "b")
  run_train(experiment(*depth, "train.steps=3", "train.ema_decay=0.9"), a)
  assert cli.main(["tfm", "convert", "--workdir", a, "--out", b, "--scan_layers", "true"]) == 0
  capsys.readouterr()
  source = build(json.load(open(os.path.join(a, "config.json"))))
  config = build(json.load(open(os.path.join(b, "config.json"))))
  got = ckpt_lib.restore_params(b, 3, Experiment(config).abstract_params, tree="ema")
  want = stack_layers(ckpt_lib.restore_params(a, 3, Experiment(source).abstract_params, tree="ema"))
  assert jax.tree.structure(got) == jax.tree.structure(want) and _equal(got, want)
  state, log = run_train(experiment(*depth, "train.steps=4", "train.ema_decay=0.9",
                                    "model.scan_layers=true"), b)
  assert "resumed from step 3" in log and int(state.step) == 4


def test_an_ema_grid_sweeps_its_average_and_its_ema(corpus, tmp_path, capsys):
  """`tfm sweep --grid=train.ema_decay=0,0.5`: each run's checkpoints averaged (tfm eval's
  default) and, for the run that keeps an EMA, its EMA (`tfm eval --checkpoint ema`), both in
  its result and in the table; the run without one has no EMA figures."""
  from tests.integration.conftest import sweep_overrides  # pylint: disable=import-outside-toplevel
  root = tmp_path / "sweep"
  overrides = sweep_overrides(corpus, 4, "train.checkpoint_every=2", "train.keep_checkpoints=2",
                              "train.average_checkpoints=2")
  argv = (["tfm", "sweep", "--config=configs/quickstart.py", f"--root={root}", "--eval_limit=4",
           "--grid=train.ema_decay=0,0.5"] + [f"--config.{o}" for o in overrides])
  assert cli.main(argv) == 0
  capsys.readouterr()
  lines = {r["name"]: r for r in map(json.loads, (root / "results.jsonl").read_text().splitlines())}
  plain, ema = lines["train.ema_decay=0-s0"], lines["train.ema_decay=0.5-s0"]
  assert plain["ema_dev_ppl"] is None and plain["dev_ppl"] > 1
  (path,) = glob.glob(f"{root}/train.ema_decay=0.5-s0/eval_dev_ema4_first4.json")
  evaluation = json.load(open(path))
  assert ema["ema_dev_ppl"] == evaluation["perplexity"] and ema["ema_bleu"] == evaluation["bleu"]
  averaged = json.load(open(f"{root}/train.ema_decay=0.5-s0/eval_dev_4_avg2_first4.json"))
  assert ema["dev_ppl"] == averaged["perplexity"] != ema["ema_dev_ppl"]
  table = (root / "table.md").read_text()
  assert "| EMA dev PPL | EMA BLEU |" in table and f"{ema['ema_dev_ppl']:.2f}" in table
