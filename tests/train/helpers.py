"""Batches and train setups shared by the train tests."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from tfm.config import Config
from tfm.data.config import DataConfig
from tfm.experiment import Experiment
from tfm.train.config import MeshConfig, TrainConfig


def packed_batch(rows: int, length: int, vocab: int, seed: int = 0, max_pad: int = 6):
  """A packed batch of int32 [rows, length] arrays: 1-3 examples per row (the same number on both
  sides) followed by 0 to max_pad padding columns, so rows hold different numbers of real tokens;
  positions restart at 0 per example; token ids in [2, vocab), pad 0."""
  rng = np.random.default_rng(seed)
  batch = {}
  for side in ("inputs", "targets"):
    for suffix in ("", "_segmentation", "_position"):
      batch[side + suffix] = np.zeros((rows, length), np.int32)
  for r in range(rows):
    examples = int(rng.integers(1, 4))
    for side in ("inputs", "targets"):
      used = length - int(rng.integers(0, max_pad + 1))
      cuts = np.sort(rng.choice(np.arange(1, used), size=examples - 1, replace=False))
      for s, (a, b) in enumerate(zip(np.r_[0, cuts], np.r_[cuts, used])):
        batch[side][r, a:b] = rng.integers(2, vocab, b - a)
        batch[f"{side}_segmentation"][r, a:b] = s + 1
        batch[f"{side}_position"][r, a:b] = np.arange(b - a)
  return batch


def train_cfg(**changes) -> TrainConfig:
  return TrainConfig(**{**dict(warmup_steps=10, label_smoothing=0.1), **changes})


def mesh_cfg(data=1, fsdp=1, tensor=1, **changes) -> MeshConfig:
  return MeshConfig(data=data, fsdp=fsdp, tensor=tensor, **changes)


def experiment_config(model_cfg, train: TrainConfig, mesh: MeshConfig) -> Config:
  """An experiment around a ModelConfig (the data section only carries its vocabulary size)."""
  return Config(model=model_cfg, data=DataConfig(vocab_size=model_cfg.vocab_size), train=train,
                mesh=mesh)


# Tests compile many small programs on CPU: XLA's LLVM optimisations cost more than they save here.
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


class Setup:
  """An Experiment for a model on a mesh, with its fresh state and compiled steps at hand."""

  def __init__(self, model, train, mesh_config, devices=None, seed=0):
    self.model, self.train = model, train
    config = experiment_config(model.cfg, dataclasses.replace(train, seed=seed), mesh_config)
    self.experiment = Experiment(config, model=model, devices=devices, compiler_options=FAST_COMPILE)
    self.mesh, self.rules = self.experiment.mesh, self.experiment.rules
    self.tx, self.schedule = self.experiment.tx, self.experiment.schedule
    self.state, self.shardings = self.experiment.init_state(), self.experiment.state_shardings
    self.initial = jax.device_get(self.state)
    self.step = self.experiment.train_step
    self.eval = self.experiment.eval_step

  def fresh_state(self):
    """The initial state again, on device (a train step donates the state it is given)."""
    return jax.device_put(self.initial, self.shardings)


def max_diff(a, b, key_biases: bool = True) -> float:
  """Largest |a - b| over the leaves of two trees (host or device arrays). key_biases=False leaves
  out the attention key biases: softmax is invariant to q.b_k, so their true gradient is 0 and
  Adam (eps 1e-9) turns the rounding noise of their gradient into O(lr) steps."""
  diffs = jax.tree_util.tree_map_with_path(
      lambda path, x, y: 0.0 if not key_biases and jax.tree_util.keystr(path).endswith(
          "['key']['bias']") else float(np.max(np.abs(np.asarray(x) - np.asarray(y)))),
      jax.device_get(a), jax.device_get(b))
  return max(jax.tree.leaves(diffs))
