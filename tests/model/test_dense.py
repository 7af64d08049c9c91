"""token_matmul (tfm/model/dense.py): the product and both gradients against numpy in float64, on the
CPU backward (`_cpu_kernel_grad`) where it applies and on plain autodiff where it does not."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tfm.model import dense

# (x shape, kernel shape, in_dims, whether the CPU backward applies: prod(in) <= prod(out))
CASES = [
    ((2, 5, 6), (6, 3, 4), 1, True),     # a query/key/value projection: d_model -> (heads, d_k)
    ((2, 5, 3, 4), (3, 4, 12), 2, True),  # the output projection: (heads, d_v) -> d_model
    ((2, 5, 6), (6, 10), 1, True),       # the FFN's first layer
    ((2, 5, 10), (10, 6), 1, False),     # its second: x^T would be the larger copy
]


def _uses_cpu_backward(x, kernel, in_dims, **kwargs):
  jaxpr = jax.make_jaxpr(lambda x, k: dense.token_matmul(x, k, in_dims, **kwargs))(x, kernel)
  return "custom_vjp_call" in str(jaxpr)


@pytest.mark.parametrize("x_shape, k_shape, in_dims, cpu_backward", CASES)
def test_product_and_gradients_are_numpys(x_shape, k_shape, in_dims, cpu_backward):
  rng = np.random.default_rng(sum(x_shape))
  x = rng.normal(size=x_shape).astype(np.float32)
  kernel = rng.normal(size=k_shape).astype(np.float32)
  out_shape = x_shape[:2] + k_shape[in_dims:]
  dy = rng.normal(size=out_shape).astype(np.float32)
  assert _uses_cpu_backward(x, kernel, in_dims) == cpu_backward  # tests run on CPU
  assert not _uses_cpu_backward(x, kernel, in_dims, cpu_backward=False)

  y, vjp = jax.vjp(lambda x, k: dense.token_matmul(x, k, in_dims), x, kernel)
  dx, dkernel = vjp(dy)
  x64, k64, dy64 = (a.astype(np.float64) for a in (x, kernel, dy))
  x2 = x64.reshape(10, -1)
  k2 = k64.reshape(x2.shape[1], -1)
  dy2 = dy64.reshape(10, -1)
  np.testing.assert_allclose(y, (x2 @ k2).reshape(out_shape), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(dx, (dy2 @ k2.T).reshape(x_shape), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(dkernel, (x2.T @ dy2).reshape(k_shape), rtol=1e-5, atol=1e-5)


def test_cpu_backward_is_autodiffs_gradient_in_bfloat16():
  x = jax.random.normal(jax.random.PRNGKey(0), (4, 8, 16), jnp.bfloat16)
  kernel = jax.random.normal(jax.random.PRNGKey(1), (16, 2, 16), jnp.bfloat16)
  dy = jax.random.normal(jax.random.PRNGKey(2), (4, 8, 2, 16), jnp.bfloat16)
  ours = jax.vjp(lambda x, k: dense.token_matmul(x, k, 1), x, kernel)[1](dy)
  plain = jax.vjp(lambda x, k: jnp.tensordot(x, k, axes=1), x, kernel)[1](dy)
  for a, b in zip(ours, plain):
    assert a.dtype == b.dtype == jnp.bfloat16 and a.shape == b.shape
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=2e-2,
                               atol=2e-2 * float(jnp.abs(b.astype(jnp.float32)).max()))
