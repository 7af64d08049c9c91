"""Position-wise feed-forward network (section 3.3): FFN(x) = max(0, x W1 + b1) W2 + b2.

Variants: GELU in place of ReLU, and two gated forms (Shazeer 2020, "GLU Variants Improve
Transformer"), whose two input projections share the `mlp` axis:
  swiglu      (Swish(x W) * x V) W2
  gated_gelu  (GELU(x W) * x V) W2     (T5 v1.1's FFN; no biases there: model.use_bias=False)
GELU, in both 'gelu' and 'gated_gelu', is jax.nn.gelu in one of two forms (model.gelu):
gelu_approximate=True (the default, flax's nn.gelu) the tanh approximation
0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), T5 v1.1's (Mesh TensorFlow's gelu; transformers'
T5 maps 'gated-gelu' to its gelu_new, the same formula) and GPT-2's; False the exact
x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))), transformers' "gelu" (BERT's and RoBERTa's classes).
W is the parameter 'wi_gate' (through the activation), V 'wi', W2 'wo'. Optional dropout on the
hidden activation (off in the paper).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax

from tfm.model import partitioning as P
from tfm.model.dense import Dense
from tfm.model.dropout import FFN, Dropout


def _dense(features, names, dtype, use_bias, name):
  return Dense((features,), 1, names, names[1:], dtype, use_bias, name=name)


class FeedForward(nn.Module):
  """x [batch, length, d_model] -> [batch, length, d_model] through a d_ff hidden layer.

  activation: 'relu' (the paper), 'gelu', 'swiglu' or 'gated_gelu'; dropout_rate on the hidden
  activation; gelu_approximate: GELU's tanh form (True) or its exact erf form (False).
  """

  d_ff: int
  activation: str = "relu"
  dtype: str = "float32"
  use_bias: bool = True
  dropout_rate: float = 0.0
  gelu_approximate: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    dense = lambda features, names, name: _dense(features, names, self.dtype, self.use_bias, name)
    gelu = functools.partial(jax.nn.gelu, approximate=self.gelu_approximate)
    if self.activation in ("swiglu", "gated_gelu"):
      gate = nn.silu if self.activation == "swiglu" else gelu
      hidden = gate(dense(self.d_ff, ("embed", "mlp"), "wi_gate")(x))
      hidden = hidden * dense(self.d_ff, ("embed", "mlp"), "wi")(x)
    else:
      activation = nn.relu if self.activation == "relu" else gelu
      hidden = activation(dense(self.d_ff, ("embed", "mlp"), "wi")(x))
    hidden = P.constrain(hidden, P.BLF)
    hidden = Dropout(self.dropout_rate, FFN)(hidden, deterministic=not train)
    return P.constrain(dense(x.shape[-1], ("mlp", "embed"), "wo")(hidden), P.BLD)
