"""Parameter counts of a model as built: shapes from `jax.eval_shape` of `init`, never a formula."""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from tfm.model.config import ModelConfig
from tfm.model.transformer import Transformer


def param_shapes(cfg: ModelConfig, length: int = 8):
  """The (unboxed) parameter tree of Transformer(cfg) as ShapeDtypeStructs; nothing is allocated."""
  tokens = jnp.ones((1, length), jnp.int32)
  inputs = None if cfg.architecture == "decoder_only" else tokens
  targets = None if cfg.architecture == "encoder_only" else tokens
  init = lambda: Transformer(cfg).init(jax.random.PRNGKey(0), inputs, targets)
  return nn.meta.unbox(jax.eval_shape(init))["params"]


def count_params(cfg: ModelConfig) -> int:
  """Total number of trainable scalars."""
  return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(param_shapes(cfg)))
