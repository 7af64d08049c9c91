"""The feed-forward sub-layer's gated forms against numpy: gated_gelu (T5 v1.1's) and swiglu."""

import math

import flax.linen as nn
import jax
import numpy as np
import pytest

from tfm.model.ffn import FeedForward


def _gelu_tanh(x):
  """GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): T5 v1.1's."""
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _silu(x):
  return x / (1.0 + np.exp(-x))


@pytest.mark.parametrize("activation, gate", [("gated_gelu", _gelu_tanh), ("swiglu", _silu)])
@pytest.mark.parametrize("use_bias", [False, True])
def test_gated_ffn_is_the_formula(activation, gate, use_bias):
  """(gate(x W + b) * (x V + c)) W2 + b2, W 'wi_gate', V 'wi', W2 'wo'."""
  rng = np.random.default_rng(1)
  x = rng.normal(size=(2, 3, 8)).astype(np.float32)
  ffn = FeedForward(12, activation, use_bias=use_bias)
  shapes = nn.meta.unbox(jax.eval_shape(ffn.init, jax.random.PRNGKey(0), x))["params"]
  params = jax.tree.map(lambda s: rng.normal(0.0, 0.5, s.shape).astype(np.float32), shapes)
  y = ffn.apply({"params": params}, x)
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  bias = lambda name: p[name]["bias"] if use_bias else 0.0
  hidden = (gate(x @ p["wi_gate"]["kernel"] + bias("wi_gate"))
            * (x @ p["wi"]["kernel"] + bias("wi")))
  np.testing.assert_allclose(np.asarray(y), hidden @ p["wo"]["kernel"] + bias("wo"), rtol=1e-5,
                             atol=1e-5)
  names = {k: set(v) for k, v in params.items()}
  assert names == {n: {"kernel", "bias"} if use_bias else {"kernel"}
                   for n in ("wi_gate", "wi", "wo")}
