"""The feed-forward sub-layer against numpy: the gated forms, gated_gelu (T5 v1.1's) and swiglu,
and GELU's two forms (model.gelu: the tanh approximation and the exact erf one) in 'gelu' and
'gated_gelu'."""

import math

import flax.linen as nn
import jax
import numpy as np
import pytest

from tfm.model.ffn import FeedForward


def _gelu_tanh(x):
  """GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): T5 v1.1's."""
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _gelu_erf(x):
  """The exact GELU, x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))), with the standard library's erf."""
  return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


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


def _random_ffn(ffn, x, rng):
  shapes = nn.meta.unbox(jax.eval_shape(ffn.init, jax.random.PRNGKey(0), x))["params"]
  return jax.tree.map(lambda s: rng.normal(0.0, 0.5, s.shape).astype(np.float32), shapes)


@pytest.mark.parametrize("activation", ["gelu", "gated_gelu"])
@pytest.mark.parametrize("approximate, form, other", [(True, _gelu_tanh, _gelu_erf),
                                                      (False, _gelu_erf, _gelu_tanh)])
def test_gelus_two_forms_are_their_formulas(activation, approximate, form, other):
  """gelu_approximate=True is the tanh formula, False the erf one, in the plain and the gated
  FFN; each differs from the other form by more than the tolerance (so a form ignored fails)."""
  rng = np.random.default_rng(2)
  x = rng.normal(0.0, 2.0, size=(2, 5, 8)).astype(np.float32)
  ffn = FeedForward(12, activation, gelu_approximate=approximate)
  params = _random_ffn(ffn, x, rng)
  y = np.asarray(ffn.apply({"params": params}, x), np.float64)
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  linear = lambda name: x @ p[name]["kernel"] + p[name]["bias"]

  def expected(gelu):
    hidden = gelu(linear("wi_gate")) * linear("wi") if activation == "gated_gelu" else gelu(
        linear("wi"))
    return hidden @ p["wo"]["kernel"] + p["wo"]["bias"]

  np.testing.assert_allclose(y, expected(form), rtol=1e-5, atol=1e-5)
  assert np.abs(y - expected(other)).max() > 1e-4


def test_the_two_forms_differ_by_under_5e_4():
  """The two formulas against each other over [-8, 8] (float64): the gap the docstrings of
  model.gelu quote (beyond it the two agree to float rounding: both are 0 or x there)."""
  x = np.linspace(-8.0, 8.0, 16001)
  gap = np.abs(_gelu_tanh(x) - _gelu_erf(x))
  assert 1e-4 < gap.max() < 5e-4, gap.max()
