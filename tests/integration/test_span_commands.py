"""What the commands make of a span-corruption run (task span): tfm translate (--score too) and tfm
export refuse it in one line, asked of its task, before anything is loaded or written; tfm plan's
abstract batch has the task's rows, inputs of data.max_length and T5's shorter targets."""

import json

import pytest

from tfm import cli, tasks
from tfm.config import load_config
from tfm.experiment import Experiment
from tfm.plan import step_plan
from tfm.plan import topology as topology_lib
from tfm.train.flops import train_flops

SPAN = ("task=span", "data.text_key=en")


@pytest.fixture
def span_workdir(experiment, tmp_path):
  """A workdir holding a span run's config.json: the refusals read nothing else."""
  workdir = tmp_path / "span"
  workdir.mkdir()
  (workdir / "config.json").write_text(json.dumps(experiment(*SPAN).to_dict()))
  return workdir


def _last_error(capsys, argv, code=1) -> str:
  assert cli.main(argv) == code
  return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("flags", [[], ["--score"]])
def test_tfm_translate_refuses_a_span_run(span_workdir, capsys, flags):
  line = _last_error(capsys, ["tfm", "translate", f"--workdir={span_workdir}", *flags])
  assert line == (f"tfm translate: error: --workdir={span_workdir}: tfm translate translates "
                  "with a translation model (task='translate'); this run's config.task is 'span' "
                  "(a span-corruption model fills in dropped spans; it does not translate: start "
                  "a translation run from it (train.init_from))")


def test_tfm_export_refuses_a_span_run(span_workdir, tmp_path, capsys):
  line = _last_error(capsys, ["tfm", "export", f"--workdir={span_workdir}",
                              f"--out={tmp_path / 'out'}"])
  assert line == ("tfm export: error: config key task: expected 'translate' to export to "
                  "MarianMTModel (a translation model), got 'span': its model does not "
                  "translate, and its vocabulary's top 2 ids are sentinels MarianTokenizer's "
                  "SentencePiece model lacks")
  assert not (tmp_path / "out").exists()


def test_the_plans_abstract_batch_has_the_tasks_target_length():
  """configs/span_quickstart.py: 32 rows of 128 inputs and 29 targets (T5's arithmetic, its
  docstring's figures, checked by tests/test_lm_configs.py); the translation quickstart's targets
  are as long as its inputs."""
  for name, targets in (("configs/span_quickstart.py", 29), ("configs/quickstart.py", 128)):
    config = load_config(name)
    exp = Experiment(config)
    rows, length, target_length, batch = step_plan.abstract_batch(config, exp, 1)
    assert (rows, length, target_length) == (32, 128, targets)
    assert target_length == tasks.get(config.task).target_length(config.data)
    for key, value in batch.items():
      assert value.shape == (32, 128 if key.startswith("inputs") else targets), key


def test_the_span_step_lowers_on_its_abstract_batch(experiment):
  """The tiny span model's train step takes the abstract batch (inputs 32, targets 8)."""
  config = experiment(*SPAN)
  exp = Experiment(config)
  rows, length, targets, batch = step_plan.abstract_batch(config, exp, 1)
  assert (length, targets) == (32, 8)
  lowered = exp.train_step.lower(exp.abstract_state, batch)
  assert f"tensor<{rows}x8xi32>" in lowered.as_text()


@pytest.mark.long  # libtpu compiles the step for a TPU topology
@pytest.mark.skipif(not topology_lib.libtpu_installed(), reason="libtpu is the tpu-aot extra")
def test_tfm_plan_of_a_span_step(capsys):
  code = cli.main(["tfm", "plan", "--config=configs/span_quickstart.py", "--topology=v5e:2x2",
                   "--json"])
  out = capsys.readouterr().out
  assert code == 0, out
  plan = json.loads(out)
  config = load_config("configs/span_quickstart.py")
  assert (plan["length"], plan["target_length"]) == (128, 29)
  assert plan["tokens_per_step"] == plan["rows"] * 29
  assert plan["model_flops_per_step"] == plan["rows"] * train_flops(config.model, 128, 29)
