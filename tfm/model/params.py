"""Parameter counts of a model as built: shapes from `jax.eval_shape` of `init`, never a formula."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from tfm.model.config import ModelConfig
from tfm.model.scan_convert import unstack_layers
from tfm.model.transformer import Transformer


def param_shapes(cfg: ModelConfig, length: int = 8):
  """The (unboxed) parameter tree of Transformer(cfg) as ShapeDtypeStructs; nothing is allocated.

  `init` is traced with the layers scanned (model.scan_layers), which traces one layer a stack
  instead of N (faster to trace: see experiments/SPEED.md); the stacked shapes [N, ...] are
  then split into the unrolled layout when cfg asks for it (tfm/model/scan_convert.py).
  """
  tokens = jnp.ones((1, length), jnp.int32)
  inputs = None if cfg.architecture == "decoder_only" else tokens
  targets = None if cfg.architecture == "encoder_only" else tokens
  scanned = Transformer(dataclasses.replace(cfg, scan_layers=True))
  shapes = nn.meta.unbox(jax.eval_shape(lambda: scanned.init(jax.random.PRNGKey(0), inputs,
                                                             targets)))["params"]
  return shapes if cfg.scan_layers else jax.eval_shape(unstack_layers, shapes)


def parameter_count(params: Any) -> int:
  """Number of scalars in a parameter tree of arrays or ShapeDtypeStructs."""
  return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(params))


def count_params(cfg: ModelConfig) -> int:
  """Total number of trainable scalars of Transformer(cfg)."""
  return parameter_count(param_shapes(cfg))
