"""Token embeddings (section 3.4): a [vocab, d_model] matrix, looked up and multiplied by sqrt(d_model).

With tied embeddings one such matrix serves the source embedding, the target embedding and, through
`attend`, the pre-softmax linear transformation (logits = x E^T, without the sqrt(d_model) factor).

Sharding of the lookup: the table is stored as (vocab over `tensor`, embed over `fsdp`), but the
output's rows are split over the batch axes, fsdp among them. Gathering rows from the stored layout
gives an output split along embed over fsdp, which XLA cannot reshard to rows split over fsdp
without replicating the whole tensor first ("involuntary full rematerialization" of the gather and
of its gradient, measured with tfm plan on a (data, fsdp, tensor) = (2, 2, 2) v5e mesh). So the
lookup reads the table all-gathered over fsdp, as every FSDP layer reads its weights (still split
over vocab, which XLA's gather handles), and the output is constrained to the activation layout,
rows over the batch axes. Sharding constraints move data only: the values are the same.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from tfm.model.dense import token_matmul
from tfm.model.partitioning import BLD, constrain, with_axes


class Embed(nn.Module):
  vocab_size: int
  d_model: int
  dtype: jnp.dtype = jnp.float32

  def setup(self):
    # N(0, d_model^-1): after the sqrt(d_model) scale the embedded vectors have unit variance.
    init = nn.initializers.normal(stddev=self.d_model**-0.5)
    self.embedding = self.param("embedding", with_axes(init, ("vocab", "embed")),
                                (self.vocab_size, self.d_model), jnp.float32)

  def __call__(self, tokens: jax.Array) -> jax.Array:
    """tokens [batch, length] int -> [batch, length, d_model], scaled by sqrt(d_model)."""
    table = constrain(self.embedding.astype(self.dtype), ("vocab", None))  # see the docstring
    out = jnp.take(table, tokens, axis=0) * jnp.asarray(self.d_model**0.5, self.dtype)
    return constrain(out, BLD)

  def attend(self, x: jax.Array) -> jax.Array:
    """Pre-softmax projection with the same matrix: x [b, l, d_model] -> logits [b, l, vocab]."""
    # See tfm/model/dense.py. Not its CPU backward: this kernel's gradient goes back into the
    # embedding's layout, [vocab, d_model], where XLA folds that transpose into the product.
    return token_matmul(x, self.embedding.astype(self.dtype).T, 1, cpu_backward=False)
