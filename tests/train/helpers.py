"""Batches and train setups shared by the train tests."""

from __future__ import annotations

import jax
import numpy as np

from tfm.train import config as train_config
from tfm.train.mesh import create_mesh
from tfm.train.optimizer import make_optimizer
from tfm.train.sharding import logical_rules, rules_for_model
from tfm.train.state import init_train_state
from tfm.train.step import make_eval_step, make_train_step


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


def train_cfg(**changes):
  cfg = train_config.default_train_config()
  cfg.update(dict(warmup_steps=10, label_smoothing=0.1), **changes)
  return cfg


def mesh_cfg(data=1, fsdp=1, tensor=1):
  cfg = train_config.default_mesh_config()
  cfg.update(data=data, fsdp=fsdp, tensor=tensor)
  return cfg


# Tests compile many small programs on CPU: XLA's LLVM optimisations cost more than they save here.
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


class Setup:
  """Mesh, rules, optimizer, fresh state and compiled steps for a model on a mesh."""

  def __init__(self, model, train, mesh_config, devices=None, seed=0):
    self.model, self.train = model, train
    self.mesh = create_mesh(mesh_config, devices)
    self.rules = rules_for_model(logical_rules(mesh_config), self.mesh, model.cfg)
    self.tx, self.schedule = make_optimizer(train, model.cfg.d_model)
    self.state, self.shardings = init_train_state(model, self.tx, self.mesh, self.rules, seed,
                                                   FAST_COMPILE)
    self.initial = jax.device_get(self.state)
    self.step = make_train_step(model, self.tx, self.schedule, train, self.mesh, self.rules,
                                self.shardings, FAST_COMPILE)
    self.eval = make_eval_step(model, train.label_smoothing, self.mesh, self.rules,
                               self.shardings.params, FAST_COMPILE)

  def fresh_state(self):
    """The initial state again, on device (a train step donates the state it is given)."""
    return jax.device_put(self.initial, self.shardings)
