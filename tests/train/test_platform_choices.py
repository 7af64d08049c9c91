"""train.input, saves, guard and dropout_prng: "auto" resolved per platform (tfm/train/platform_choices.py),
each form reaching the step or the loop it names."""

import dataclasses

import pytest

from tests.train.helpers import FAST_COMPILE, experiment_config, mesh_cfg, train_cfg
from tests.train.test_experiment import MODEL
from tfm.config import load_config
from tfm.experiment import Experiment
from tfm.train import platform_choices

CPU_FORMS = platform_choices.Choices(input="inline", saves="background", guard="branch",
                                     dropout_prng="threefry")


@pytest.mark.parametrize("platform", ["cpu", "gpu", "cuda", "rocm", "tpu", "metal"])
def test_auto_is_the_cpus_form_on_every_platform_until_a_figure_says_otherwise(platform):
  """No GPU figure has been measured for any of the four, and the TPU plans measured the select
  guard and rbg keys worse than the CPU's forms (docs/tpu.md); an unknown platform takes the
  CPU's."""
  assert platform_choices.resolve(load_config("configs/quickstart.py").train, platform) == CPU_FORMS


def test_a_form_given_is_the_form_run():
  train = load_config("configs/quickstart.py", ["train.input=process", "train.saves=sync",
                                                "train.guard=select",
                                                "train.dropout_prng=rbg"]).train
  for platform in ("cpu", "gpu", "tpu"):
    assert platform_choices.resolve(train, platform) == platform_choices.Choices(
        input="process", saves="sync", guard="select", dropout_prng="rbg")
  assert platform_choices.resolve(train, "cpu").describe() == (
      "train.input=process, train.saves=sync, train.guard=select, train.dropout_prng=rbg")


@pytest.mark.parametrize("key", list(platform_choices.KEYS))
def test_a_bad_form_is_one_line_naming_the_key(key):
  with pytest.raises(ValueError, match=rf"^config key train\.{key}: expected one of \('auto', "):
    load_config("configs/quickstart.py", [f"train.{key}=fastest"])


def test_guard_and_prng_reach_the_compiled_step():
  """The lowered train step has a conditional with the branch guard and none with select, and
  draws its dropout bits with RngBitGenerator with rbg: the keys build another step (another
  PiecesKey), while input and saves, the loop's, share the step."""
  model = dataclasses.replace(MODEL, dropout_rate=0.1)
  texts = {}
  for guard, prng in (("branch", "threefry"), ("select", "threefry"), ("branch", "rbg")):
    train = dataclasses.replace(train_cfg(), guard=guard, dropout_prng=prng)
    exp = Experiment(experiment_config(model, train, mesh_cfg()), compiler_options=FAST_COMPILE)
    assert (exp.choices.guard, exp.choices.dropout_prng) == (guard, prng)
    texts[guard, prng] = exp.train_step.lower(exp.abstract_state,
                                              exp.abstract_batch(2, 8)).as_text()
  assert "stablehlo.case" in texts["branch", "threefry"]
  assert "stablehlo.case" not in texts["select", "threefry"]
  assert "rng_bit_generator" in texts["branch", "rbg"]
  assert "rng_bit_generator" not in texts["branch", "threefry"]
  loop_only = dataclasses.replace(train_cfg(), input="process", saves="sync")
  first = Experiment(experiment_config(model, train_cfg(), mesh_cfg()),
                     compiler_options=FAST_COMPILE)
  second = Experiment(experiment_config(model, loop_only, mesh_cfg()),
                      compiler_options=dict(FAST_COMPILE))
  assert second.train_step is first.train_step
