"""Token embeddings (section 3.4): a [vocab, d_model] matrix, looked up and multiplied by sqrt(d_model).

With tied embeddings one such matrix serves the source embedding, the target embedding and, through
`attend`, the pre-softmax linear transformation (logits = x E^T, without the sqrt(d_model) factor).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from tfm.model.partitioning import with_axes


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
    table = self.embedding.astype(self.dtype)
    return jnp.take(table, tokens, axis=0) * jnp.asarray(self.d_model**0.5, self.dtype)

  def attend(self, x: jax.Array) -> jax.Array:
    """Pre-softmax projection with the same matrix: x [b, l, d_model] -> logits [b, l, vocab]."""
    return jnp.einsum("bld,vd->blv", x, self.embedding.astype(self.dtype))
