"""RMS norm (tfm/model/rms_norm.py, model.norm_kind='rms'): its forward pass and gradient against
numpy's float64 formula, its one parameter, and the models it makes."""

import jax
import jax.numpy as jnp
import numpy as np

from tests.model.helpers import tiny
from tfm.model.params import param_shapes
from tfm.model.rms_norm import RMSNorm

EPS = 1e-6


def _numpy_rms_norm(x, scale, eps=EPS):
  """x / sqrt(mean(x^2) + eps) * scale over the last axis, float64."""
  x = np.asarray(x, np.float64)
  return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * scale


def _numpy_vjp(x, scale, dy, eps=EPS):
  """The gradient of sum(dy * rms_norm(x)), float64: with r = (mean(x^2) + eps)^-1/2 and
  g = dy * scale, dx = r g - r^3 x mean(g x) and dscale = sum over rows of dy x r."""
  x, scale, dy = (np.asarray(a, np.float64) for a in (x, scale, dy))
  r = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
  g = dy * scale
  dx = r * g - r**3 * x * (g * x).mean(-1, keepdims=True)
  return dx, (dy * x * r).sum(tuple(range(x.ndim - 1)))


def test_forward_and_gradient_are_the_formulas():
  rng = np.random.default_rng(0)
  x = rng.normal(2.0, 3.0, (3, 5, 16)).astype(np.float32)  # a mean far from 0: none is taken off
  x[0, 0] = 0.0  # a zero row: only epsilon keeps it finite
  scale = rng.normal(1.0, 0.3, 16).astype(np.float32)
  dy = rng.normal(0.0, 1.0, x.shape).astype(np.float32)
  params = {"scale": scale}
  y = RMSNorm(EPS).apply({"params": params}, x)
  np.testing.assert_allclose(np.asarray(y), _numpy_rms_norm(x, scale), rtol=2e-6, atol=1e-6)
  assert np.all(np.asarray(y)[0, 0] == 0)
  loss = lambda p, x: jnp.sum(dy * RMSNorm(EPS).apply({"params": p}, x))
  grads, dx = jax.grad(loss, argnums=(0, 1))(params, x)
  want_dx, want_dscale = _numpy_vjp(x, scale, dy)
  np.testing.assert_allclose(np.asarray(dx), want_dx, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(np.asarray(grads["scale"]), want_dscale, rtol=1e-4, atol=1e-4)
  # bfloat16 compute: statistics in float32, the output rounded to bfloat16 once
  y16 = RMSNorm(EPS, "bfloat16").apply({"params": params}, x.astype(jnp.bfloat16))
  assert y16.dtype == jnp.bfloat16


def test_one_scale_of_ones_and_no_bias():
  variables = jax.eval_shape(RMSNorm(EPS).init, jax.random.PRNGKey(0), jnp.ones((2, 8)))
  assert jax.tree.map(lambda s: s.shape, jax.tree.leaves(variables["params"])) == [(8,)]
  params = RMSNorm(EPS).init(jax.random.PRNGKey(0), jnp.ones((2, 8)))["params"]
  np.testing.assert_array_equal(np.asarray(params["scale"].unbox()), np.ones(8))
  assert params["scale"].names == ("embed",)


def test_a_models_norms_are_rms_norms_with_norm_kind_rms():
  """Every norm of the model (each sub-layer's, the final ones) holds a scale alone; the rest of
  the tree is the LayerNorm model's: d_model fewer parameters a norm."""
  layer, rms = param_shapes(tiny(norm="pre")), param_shapes(tiny(norm="pre", norm_kind="rms"))
  flat = lambda tree: {jax.tree_util.keystr(p): s.shape
                       for p, s in jax.tree_util.tree_flatten_with_path(tree)[0]}
  layer, rms = flat(layer), flat(rms)
  norm_biases = {k for k in layer if "norm']['bias" in k}
  assert len(norm_biases) == 2 * 2 + 3 * 2 + 2  # encoder layers, decoder layers, final norms
  assert rms == {k: s for k, s in layer.items() if k not in norm_biases}
