"""A trained model for inference: the workdir's config, vocabulary and (averaged) parameters."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import ml_collections
from jax.sharding import Mesh

from tfm import config as config_lib
from tfm.data import tokenizer as tokenizer_lib
from tfm.model.transformer import Transformer
from tfm.train import checkpoint as ckpt_lib
from tfm.train.mesh import create_mesh
from tfm.train.optimizer import make_optimizer
from tfm.train.sharding import logical_rules, rules_for_model
from tfm.train.state import abstract_train_state


@dataclasses.dataclass
class Trained:
  config: ml_collections.ConfigDict
  model: Transformer
  params: Any
  tokenizer: Any
  mesh: Mesh
  rules: Any
  steps: list[int]  # the checkpoints whose parameters were averaged


def load_trained(workdir: str, average: int | None = None) -> Trained:
  """Loads workdir/config.json, the vocabulary and the mean of the last `average` checkpoints
  (default train.average_checkpoints; 1 = the latest only), sharded on this machine's mesh."""
  from tfm.eval.averaging import average_params  # pylint: disable=import-outside-toplevel
  try:
    config = ckpt_lib.read_config(workdir)
  except FileNotFoundError:
    raise ValueError(f"{workdir}/config.json not found: expected a workdir written by `tfm train`") from None
  model_cfg = config_lib.validate(config)
  if not ckpt_lib.available_steps(workdir):
    raise ValueError(f"no checkpoint in {workdir}/checkpoints: train first (`tfm train --workdir {workdir}`)")
  average = int(config.train.average_checkpoints if average is None else average)
  mesh = create_mesh(config.mesh)
  rules = rules_for_model(logical_rules(config.mesh), mesh, model_cfg)
  model = Transformer(model_cfg)
  tx, _ = make_optimizer(config.train, model_cfg.d_model)
  abstract, _ = abstract_train_state(model, tx, mesh, rules, seed=config.train.seed)
  params, steps = average_params(workdir, abstract.params, average)
  tokenizer = tokenizer_lib.get_tokenizer(config.data, workdir)
  return Trained(config, model, params, tokenizer, mesh, rules, steps)
