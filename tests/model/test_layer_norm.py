"""tfm's LayerNorm (tfm/model/layer_norm.py): flax's nn.LayerNorm forward to the bit, and a written-out
backward pass checked against the gradient of the formula in float64 numpy (central differences
would be too coarse: the formula's gradient is written here independently, term by term)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tfm.model.layer_norm import LayerNorm

EPS = 1e-6


def _inputs(shape, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(2.0, 3.0, shape).astype(np.float32)
  x[(0,) * (x.ndim - 1)] = 5.0  # a constant row: variance 0, only epsilon keeps it finite
  params = {"scale": rng.normal(1.0, 0.3, shape[-1]).astype(np.float32),
            "bias": rng.normal(0.0, 0.3, shape[-1]).astype(np.float32)}
  dy = rng.normal(0.0, 1.0, shape).astype(np.float32)
  return x, params, dy


def _numpy_vjp(x, scale, dy, eps=EPS):
  """The gradient of sum(dy * LayerNorm(x)) in float64: d/dx through mean and variance, term by term."""
  x, scale, dy = (np.asarray(a, np.float64) for a in (x, scale, dy))
  d = x.shape[-1]
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  s = 1.0 / np.sqrt(var + eps)
  x_hat = (x - mu) * s
  g = dy * scale  # dL/dx_hat
  d_var = (g * (x - mu)).sum(-1, keepdims=True) * -0.5 * s**3
  d_mu = -(g * s).sum(-1, keepdims=True) + d_var * (-2.0 * (x - mu)).mean(-1, keepdims=True)
  dx = g * s + d_var * 2.0 * (x - mu) / d + d_mu / d
  rows = tuple(range(x.ndim - 1))
  return dx, (dy * x_hat).sum(rows), dy.sum(rows)


def test_forward_is_flax_layer_norm_to_the_bit():
  x, params, _ = _inputs((3, 5, 64))
  ours = LayerNorm(EPS).apply({"params": params}, x)
  flax_ln = nn.LayerNorm(epsilon=EPS).apply({"params": params}, x)
  np.testing.assert_array_equal(np.asarray(ours), np.asarray(flax_ln))
  # and the parameters are flax's: same names, shapes, initial values
  init = LayerNorm(EPS).init(jax.random.PRNGKey(0), x)["params"]
  flax_init = nn.LayerNorm(epsilon=EPS).init(jax.random.PRNGKey(0), x)["params"]
  assert nn.meta.unbox(init).keys() == flax_init.keys()
  for name in flax_init:
    np.testing.assert_array_equal(nn.meta.unbox(init)[name], flax_init[name])


@pytest.mark.parametrize("shape", [(3, 5, 64), (7, 512)])
def test_gradient_is_the_formulas(shape):
  x, params, dy = _inputs(shape, seed=len(shape))
  loss = lambda p, x: jnp.sum(dy * LayerNorm(EPS).apply({"params": p}, x))
  grads, dx = jax.grad(loss, argnums=(0, 1))(params, x)
  want_dx, want_dscale, want_dbias = _numpy_vjp(x, params["scale"], dy)
  scale_of = lambda a: np.abs(a).max()
  np.testing.assert_allclose(dx, want_dx, atol=2e-6 * scale_of(want_dx), rtol=0)
  np.testing.assert_allclose(grads["scale"], want_dscale, atol=2e-6 * scale_of(want_dscale), rtol=0)
  np.testing.assert_allclose(grads["bias"], want_dbias, atol=2e-6 * scale_of(want_dbias), rtol=0)


def test_bfloat16_inputs_and_outputs_with_float32_statistics():
  x, params, dy = _inputs((4, 6, 32), seed=3)
  xb = jnp.asarray(x, jnp.bfloat16)
  y = LayerNorm(EPS, "bfloat16").apply({"params": params}, xb)
  assert y.dtype == jnp.bfloat16
  want = nn.LayerNorm(epsilon=EPS, dtype=jnp.bfloat16).apply({"params": params}, xb)
  np.testing.assert_array_equal(np.asarray(y, np.float32), np.asarray(want, np.float32))
  dx = jax.grad(lambda x: jnp.sum(dy * LayerNorm(EPS, "bfloat16").apply({"params": params}, x)
                                  .astype(jnp.float32)))(xb)
  assert dx.dtype == jnp.bfloat16
  want_dx = _numpy_vjp(np.asarray(xb, np.float32), params["scale"], dy)[0]
  np.testing.assert_allclose(np.asarray(dx, np.float32), want_dx, atol=1e-2 * np.abs(want_dx).max())


def _plain_layer_norm(x, scale, bias, eps=EPS):
  """The textbook formula in jnp (the variance as the mean of squared deviations), for jax.grad:
  independent of both of LayerNorm's backward passes and of its forward's E[x^2] - E[x]^2."""
  mu = jnp.mean(x, -1, keepdims=True)
  var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
  return (x - mu) / jnp.sqrt(var + eps) * scale + bias


@pytest.mark.parametrize("shape", [(3, 5, 64), (7, 512)])
def test_autodiff_backward_gives_the_written_ones_gradients(shape):
  """model.layer_norm_grad="autodiff": the same loss, and the same gradients to float32 rounding,
  as the written backward pass, and both as jax.grad of the plain formula and the float64 one."""
  x, params, dy = _inputs(shape, seed=7 + len(shape))

  def value_and_grads(norm):
    loss = lambda p, x: jnp.sum(dy * norm(p, x))
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(params, x)

  written, autodiff = (value_and_grads(lambda p, x, g=grad: LayerNorm(EPS, "float32", g).apply(
      {"params": p}, x)) for grad in ("written", "autodiff"))
  plain = value_and_grads(lambda p, x: _plain_layer_norm(x, p["scale"], p["bias"]))
  assert float(written[0]) == float(autodiff[0])  # one forward pass
  np.testing.assert_allclose(float(autodiff[0]), float(plain[0]), rtol=1e-5)
  want_dx, want_dscale, want_dbias = _numpy_vjp(x, params["scale"], dy)
  for other in (written, plain):
    (grads, dx), (other_grads, other_dx) = autodiff[1], other[1]
    for got, want in ((dx, other_dx), (grads["scale"], other_grads["scale"]),
                      (grads["bias"], other_grads["bias"])):
      np.testing.assert_allclose(got, want, atol=2e-6 * np.abs(want).max(), rtol=0)
  (grads, dx) = autodiff[1]
  for got, want in ((dx, want_dx), (grads["scale"], want_dscale), (grads["bias"], want_dbias)):
    np.testing.assert_allclose(got, want, atol=2e-6 * np.abs(want).max(), rtol=0)


def test_auto_compiles_the_written_backward_into_the_cpu_train_step():
  """model.layer_norm_grad="auto" on the CPU: configs/quickstart.py's train step lowers to the
  same program as with "written" (the backward it has always had), and not as with "autodiff".
  One layer a stack: every layer norm of the model takes the same backward."""
  from tfm.config import load_config  # pylint: disable=import-outside-toplevel
  from tfm.experiment import Experiment  # pylint: disable=import-outside-toplevel
  texts = {}
  for grad in ("auto", "written", "autodiff"):
    exp = Experiment(load_config("configs/quickstart.py", [
        f"model.layer_norm_grad={grad}", "model.num_encoder_layers=1",
        "model.num_decoder_layers=1"]))
    texts[grad] = exp.train_step.lower(exp.abstract_state, exp.abstract_batch(4, 16)).as_text()
  assert texts["auto"] == texts["written"]
  assert texts["autodiff"] != texts["written"]
