"""The train and mesh config sections: defaults, the project's configs, errors naming the key."""

import dataclasses
import re

import jax
import numpy as np
import pytest

from configs import base, bible_base, big, quickstart, table3
from tfm.config import build
from tfm.train.config import (DEFAULT_RULES, MeshConfig, TrainConfig, decay_rate,
                              mesh_from_mapping, train_from_mapping)


def test_defaults_are_the_papers():
  train = TrainConfig()
  MeshConfig()
  assert (train.adam_b1, train.adam_b2, train.adam_eps) == (0.9, 0.98, 1e-9)
  assert (train.schedule, train.warmup_steps, train.learning_rate) == ("rsqrt_warmup", 4000, 1.0)
  assert (train.label_smoothing, train.steps, train.average_checkpoints) == (0.1, 100_000, 5)
  # No weight decay: train.weight_decay None is the optimizer's default, 0 for the paper's Adam.
  assert (train.optimizer, train.weight_decay, train.grad_clip_norm) == ("adam", None, 0.0)
  assert decay_rate(train) == 0.0


@pytest.mark.parametrize("config", [base.get_config(), big.get_config(), quickstart.get_config(),
                                    bible_base.get_config(), table3.get_config("D3"),
                                    table3.get_config("big")])
def test_project_configs_validate(config):
  built = build(config)
  assert built.train == train_from_mapping(config.train)
  assert built.mesh == mesh_from_mapping(config.mesh)


@pytest.mark.parametrize("changes, key", [
    (dict(schedule="cosine"), "train.schedule"),
    (dict(warmup_steps=0), "train.warmup_steps"),
    (dict(schedule="linear_cosine", steps=100, warmup_steps=100), "train.steps"),
    (dict(keep_checkpoints=3, average_checkpoints=5), "train.keep_checkpoints"),
    (dict(label_smoothing=1.0), "train.label_smoothing"),
    (dict(microbatches=0), "train.microbatches"),
    (dict(nonfinite="ignore"), "train.nonfinite"),
    (dict(best_metric="bleu"), "train.best_metric"),
    (dict(patience=-1), "train.patience"),
    (dict(patience=3), "train.patience"),  # early stopping without a best metric to watch
    (dict(init_from=""), "train.init_from"),
    (dict(init_checkpoint="latest"), "train.init_checkpoint"),
    (dict(init_optimizer=True), "train.init_optimizer"),  # without init_from
    (dict(adam_b2=1.0), "train.adam_b2"),
    (dict(adam_eps=0.0), "train.adam_eps"),  # 0/0 for a zero gradient
    (dict(learning_rate=0), "train.learning_rate"),
    (dict(grad_clip_norm=-1.0), "train.grad_clip_norm"),
    (dict(steps=1.5), "train.steps"),
])
def test_train_errors_name_the_key(changes, key):
  with pytest.raises(ValueError, match=key.replace(".", r"\.")):
    TrainConfig(**changes)


def test_a_seed_past_the_keys_32_bits_is_refused():
  """PRNGKey(seed) keeps the low 32 bits of the seed: 2**32 + 1 would start as seed 1."""
  np.testing.assert_array_equal(jax.random.PRNGKey(2**32 + 1), jax.random.PRNGKey(1))
  assert TrainConfig(seed=2**32 - 1).seed == 2**32 - 1
  for seed in (2**32, 2**32 + 1, -1):
    with pytest.raises(ValueError, match=r"^config key train\.seed: expected an integer in "
                                         r"\[0, 2\*\*32\), got " + str(seed)):
      TrainConfig(seed=seed)


def test_unknown_keys_are_named_and_absent_keys_take_the_defaults():
  train = dataclasses.asdict(TrainConfig())
  train["warmup"] = 10
  with pytest.raises(ValueError, match=r"train\.warmup\b"):
    train_from_mapping(train)
  del train["warmup"], train["seed"]
  assert train_from_mapping(train).seed == TrainConfig().seed
  assert train_from_mapping({"steps": 7}) == dataclasses.replace(TrainConfig(), steps=7)


@pytest.mark.parametrize("changes, key", [
    (dict(data=-1, fsdp=-1), "mesh.fsdp"),
    (dict(tensor=0), "mesh.tensor"),
    (dict(rules=(("embed", "model"),)), "mesh.rules"),
    (dict(rules=(("embed",),)), "mesh.rules"),
    (dict(rules=(("embd", "fsdp"),)), "mesh.rules"),  # a misspelt logical name
])
def test_mesh_errors_name_the_key(changes, key):
  with pytest.raises(ValueError, match=key.replace(".", r"\.")):
    MeshConfig(**changes)


def test_rules_are_stored_as_tuples():
  assert MeshConfig().rules == DEFAULT_RULES
  assert MeshConfig(rules=None).rules == DEFAULT_RULES
  assert MeshConfig(rules=[["embed", ["fsdp", "tensor"]]]).rules == (("embed", ("fsdp", "tensor")),)


def test_default_rules_cover_every_logical_axis():
  from tfm.model.partitioning import ACTIVATION_AXES, PARAM_AXES
  named = [name for name, _ in DEFAULT_RULES]
  assert sorted(named) == sorted(PARAM_AXES + ACTIVATION_AXES)
  assert dict(DEFAULT_RULES)["act_batch"] == ("data", "fsdp")
  assert dict(DEFAULT_RULES)["embed"] == "fsdp"


@pytest.mark.parametrize("step_seconds", [0.0187, 0.031, 0.29, 45.0])
def test_bible_base_cadences_fit_the_run_they_are_sized_for(step_seconds):
  """gpu_table.py sizes configs/bible_base.py's run to ten minutes of the GPU at hand: whatever the
  step time, dev loss 10 times and dev BLEU 5 times (the last at the last step), counted as the loop
  counts them, and the five checkpoints `tfm eval --average 5` takes are the run's last fifth,
  evenly spaced, ending at its last step."""
  from tfm.train.cadence import Cadence  # pylint: disable=import-outside-toplevel
  from tfm.train.checkpoint import periodic  # pylint: disable=import-outside-toplevel
  steps = bible_base.steps_for(600, step_seconds)
  assert abs(steps * step_seconds - 600) <= 10 * step_seconds or steps == 20
  c = bible_base.get_config()
  run = bible_base.cadences(steps)
  c.train.update(run["train"])
  c.eval.update(run["eval"])
  built = build(c)
  due = lambda every: [s for s in range(1, steps + 1) if s % every == 0 or s == steps]
  assert len(due(built.train.eval_every)) == 10
  assert len(due(built.eval.bleu_every)) == 5 and due(built.eval.bleu_every)[-1] == steps
  assert Cadence.of(built).evaluations_left(0) == 15
  series = periodic(range(1, steps + 1), built.train.checkpoint_every, steps)
  kept = series[-built.train.keep_checkpoints:]
  assert built.train.average_checkpoints == 5
  assert kept == [steps * k // 20 for k in (16, 17, 18, 19, 20)]


def test_a_compilation_cache_dir_that_cannot_be_made_is_named_and_left_off(tmp_path, caplog):
  from tfm.train import compile_cache  # pylint: disable=import-outside-toplevel
  blocker = tmp_path / "a_file"
  blocker.write_text("")
  before = compile_cache.jax.config.jax_compilation_cache_dir
  with caplog.at_level("WARNING"):
    assert compile_cache.enable(str(blocker / "xla")) is None
  assert re.search(r"config key train\.compilation_cache_dir: expected a directory .* got "
                   r"'.*a_file/xla' \(.*\); compiling without the cache", caplog.text)
  assert compile_cache.jax.config.jax_compilation_cache_dir == before  # left as it was


def test_the_best_checkpoint_by_bleu_needs_dev_bleu():
  with pytest.raises(ValueError, match=r"^config key train.best_metric \('dev_bleu'\) needs "
                                       r"eval.bleu_every > 0"):
    build({"train": {"best_metric": "dev_bleu"}})
  assert build({"train": {"best_metric": "dev_bleu"}, "eval": {"bleu_every": 100}})


def test_the_keys_added_for_best_checkpoints_and_starts_default_to_what_runs_did_before():
  """A config.json written before them builds to their ADDED_LATER values: no best checkpoint, no
  early stopping, a fresh start."""
  from tfm.config import ADDED_LATER  # pylint: disable=import-outside-toplevel
  train = build({}).train
  for key in ("best_metric", "patience", "init_from", "init_checkpoint", "init_optimizer"):
    assert getattr(train, key) == ADDED_LATER[f"train.{key}"]
  assert (train.best_metric, train.patience, train.init_from) == ("none", 0, None)
