"""Position-wise feed-forward network (section 3.3): FFN(x) = max(0, x W1 + b1) W2 + b2.

Variants: GELU in place of ReLU, and SwiGLU (Shazeer 2020): (Swish(x W) * x V) W2, whose two input
projections share the `mlp` axis. Optional dropout on the hidden activation (off in the paper).
"""

from __future__ import annotations

import flax.linen as nn
import jax

from tfm.model import partitioning as P
from tfm.model.dense import Dense
from tfm.model.dropout import FFN, Dropout


def _dense(features, names, dtype, use_bias, name):
  return Dense((features,), 1, names, names[1:], dtype, use_bias, name=name)


class FeedForward(nn.Module):
  """x [batch, length, d_model] -> [batch, length, d_model] through a d_ff hidden layer.

  activation: 'relu' (the paper), 'gelu' or 'swiglu'; dropout_rate on the hidden activation.
  """

  d_ff: int
  activation: str = "relu"
  dtype: str = "float32"
  use_bias: bool = True
  dropout_rate: float = 0.0

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    dense = lambda features, names, name: _dense(features, names, self.dtype, self.use_bias, name)
    if self.activation == "swiglu":
      hidden = nn.silu(dense(self.d_ff, ("embed", "mlp"), "wi_gate")(x))
      hidden = hidden * dense(self.d_ff, ("embed", "mlp"), "wi")(x)
    else:
      activation = nn.relu if self.activation == "relu" else nn.gelu
      hidden = activation(dense(self.d_ff, ("embed", "mlp"), "wi")(x))
    hidden = P.constrain(hidden, P.BLF)
    hidden = Dropout(self.dropout_rate, FFN)(hidden, deterministic=not train)
    return P.constrain(dense(x.shape[-1], ("mlp", "embed"), "wo")(hidden), P.BLD)
