"""BERT's masked-LM head (Devlin et al. 2019; the released code's cls/predictions), model.mlm_head.

Between the encoder's output and the vocabulary, a transform and a bias on the logits:

  h      = Norm(GELU(x W_t + b_t))                    W_t [d_model, d_model]  ('transform')
  logits = project(h) + b_out                          b_out [vocab]            ('output_bias')

project is the model's output projection (the tied embedding's h E^T, or the untied one); Norm is
the model's norm (LayerNorm, epsilon model.norm_epsilon: BERT's 1e-12), 'transform_norm', made by
`make_norm` inside the head so that its parameters are the head's. GELU is the model's (model.gelu):
gelu_approximate=True the tanh approximation, as the released BERT code's gelu; False the exact
erf form, transformers' (BertForMaskedLM's "gelu" hidden_act; RobertaPreLayerNormForMaskedLM's
head calls it whatever its config says). The two differ by under 5e-4 at any input. b_t and b_out
follow model.use_bias, like every bias of the model.
"""

from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from tfm.model import partitioning as P
from tfm.model.dense import Dense


class MlmHead(nn.Module):
  """x [b, l, d_model] -> logits [b, l, vocab] in the compute dtype, through `project`
  ([b, l, d_model] -> [b, l, vocab]). make_norm(name) -> the model's norm over d_model."""

  vocab_size: int
  make_norm: Callable[[str], nn.Module]
  dtype: str = "float32"
  use_bias: bool = True
  gelu_approximate: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, project: Callable[[jax.Array], jax.Array]) -> jax.Array:
    # The transform's output is a hidden width like the FFN's: (embed, mlp), as the FFN's `wi`.
    h = Dense((x.shape[-1],), 1, ("embed", "mlp"), ("mlp",), self.dtype, self.use_bias,
              name="transform")(x)
    h = jax.nn.gelu(h, approximate=self.gelu_approximate)
    h = P.constrain(self.make_norm("transform_norm")(h), P.BLD)
    logits = project(h)
    if self.use_bias:
      bias = self.param("output_bias", P.with_axes(nn.initializers.zeros, ("vocab",)),
                        (self.vocab_size,), jnp.float32)
      logits = logits + bias.astype(logits.dtype)
    return logits
