"""BERT's masked-LM head (Devlin et al. 2019; the released code's cls/predictions), model.mlm_head.

Between the encoder's output and the vocabulary, a transform and a bias on the logits:

  h      = Norm(GELU(x W_t + b_t))                    W_t [d_model, d_model]  ('transform')
  logits = project(h) + b_out                          b_out [vocab]            ('output_bias')

project is the model's output projection (the tied embedding's h E^T, or the untied one); Norm is
the model's norm (LayerNorm, epsilon model.norm_epsilon: BERT's 1e-12), 'transform_norm'. GELU is
flax's nn.gelu, the tanh approximation, as the released BERT code's gelu (transformers' BERT
computes the erf form, which differs from it by under 5e-4 at any input). b_t and b_out follow
model.use_bias, like every bias of the model.
"""

from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from tfm.model import partitioning as P
from tfm.model.config import ModelConfig
from tfm.model.dense import Dense
from tfm.model.layers import norm


class MlmHead(nn.Module):
  """x [b, l, d_model] -> logits [b, l, vocab] in the compute dtype, through `project`
  ([b, l, d_model] -> [b, l, vocab])."""

  cfg: ModelConfig

  @nn.compact
  def __call__(self, x: jax.Array, project: Callable[[jax.Array], jax.Array]) -> jax.Array:
    cfg = self.cfg
    # The transform's output is a hidden width like the FFN's: (embed, mlp), as the FFN's `wi`.
    h = Dense((cfg.d_model,), 1, ("embed", "mlp"), ("mlp",), cfg.dtype, cfg.use_bias,
              name="transform")(x)
    h = P.constrain(norm(cfg, "transform_norm")(nn.gelu(h)), P.BLD)
    logits = project(h)
    if cfg.use_bias:
      bias = self.param("output_bias", P.with_axes(nn.initializers.zeros, ("vocab",)),
                        (cfg.vocab_size,), jnp.float32)
      logits = logits + bias.astype(logits.dtype)
    return logits
