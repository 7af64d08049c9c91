import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.model.helpers import draw, tiny
from tfm.model import masks
from tfm.model.attention import (cached_attention, einsum_attention, key_layout, library_attention,
                                 value_layout)
from tfm.model.positions import alibi_bias
from tfm.model.transformer import Transformer


def _naive(q, k, v, mask, bias):
  """Per-head loops in numpy: the independent reference for both kernels."""
  b, t, h, d = q.shape
  kvh = k.shape[2]
  out = np.zeros((b, t, h, v.shape[-1]), np.float64)
  for bi in range(b):
    for hi in range(h):
      kv = hi // (h // kvh)
      logits = q[bi, :, hi] @ k[bi, :, kv].T / np.sqrt(d)
      if bias is not None:
        logits = logits + bias[bi if bias.shape[0] > 1 else 0, hi]
      logits = np.where(mask[bi, 0], logits, -1e30)
      w = np.exp(logits - logits.max(-1, keepdims=True))
      w /= w.sum(-1, keepdims=True)
      out[bi, :, hi] = w @ v[bi, :, kv]
  return out


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_library_kernel_equals_einsum_and_naive(kv_heads):
  rng = np.random.RandomState(0)
  b, t, h, d = 2, 5, 4, 8
  q = rng.randn(b, t, h, d).astype(np.float32)
  k = rng.randn(b, t, kv_heads, d).astype(np.float32)
  v = rng.randn(b, t, kv_heads, d).astype(np.float32)
  seg = jnp.array([[1, 1, 1, 0, 0], [1, 1, 2, 2, 2]])
  mask = masks.segment_mask(seg, seg) & masks.causal_mask(t, t)
  bias = alibi_bias(jnp.array([[0, 1, 2, 3, 4]] * 2), jnp.array([[0, 1, 2, 3, 4]] * 2), h)
  ref = _naive(q, k, v, np.asarray(mask), np.asarray(bias))
  valid = np.asarray(seg != 0)
  a = np.asarray(einsum_attention(q, k, v, mask, bias))
  c = np.asarray(library_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), mask, bias))
  np.testing.assert_allclose(a[valid], ref[valid], atol=1e-5)
  np.testing.assert_allclose(c[valid], ref[valid], atol=1e-5)


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_cached_attention_equals_naive_on_the_decode_layout(kv_heads):
  """One query over a cache stored as keys [b, kvh, d, s] and values [b, kvh, s, d]."""
  rng = np.random.RandomState(1)
  b, s, h, d = 3, 7, 4, 8
  q = rng.randn(b, 1, h, d).astype(np.float32)
  k = rng.randn(b, s, kv_heads, d).astype(np.float32)
  v = rng.randn(b, s, kv_heads, d).astype(np.float32)
  index = jnp.array([0, 3, 6])
  mask = masks.decode_mask(index, s)  # [b, 1, 1, s]
  bias = rng.randn(1, h, 1, s).astype(np.float32)
  ref = _naive(q, k, v, np.asarray(mask), bias)
  y, weights = cached_attention(jnp.asarray(q), key_layout(jnp.asarray(k)),
                                value_layout(jnp.asarray(v)), mask, jnp.asarray(bias))
  assert key_layout(k).shape == (b, kv_heads, d, s) and value_layout(v).shape == (b, kv_heads, s, d)
  np.testing.assert_allclose(np.asarray(y), ref, atol=1e-5)
  np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, atol=1e-6)
  assert np.all(np.asarray(weights)[~np.broadcast_to(np.asarray(mask), weights.shape)] == 0)


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_cached_attention_reads_one_cache_row_for_several_query_rows(kv_heads):
  """Beam search's per-example cross-attention cache: query rows 3*i .. 3*i + 2 (the beams of
  example i) attend over cache row i. Mask and bias [b, h, n, s] differ per example, head and beam,
  so any mix-up of heads and beams changes the result."""
  rng = np.random.RandomState(2)
  b, n, s, h, d = 2, 3, 6, 4, 8
  g = h // kv_heads
  q = rng.randn(b * n, 1, h, d).astype(np.float32)
  k = rng.randn(b, s, kv_heads, d).astype(np.float32)
  v = rng.randn(b, s, kv_heads, d).astype(np.float32)
  mask = rng.rand(b, h, n, s) < 0.7
  mask[..., 0] = True
  bias = rng.randn(b, h, n, s).astype(np.float32)
  ref = np.zeros((b * n, 1, h, d))
  for row in range(b * n):  # numpy, one query row and head at a time
    i, j = divmod(row, n)
    for head in range(h):
      logits = k[i, :, head // g] @ q[row, 0, head] / np.sqrt(d) + bias[i, head, j]
      w = np.exp(np.where(mask[i, head, j], logits, -np.inf) - logits[mask[i, head, j]].max())
      ref[row, 0, head] = (w / w.sum()) @ v[i, :, head // g]
  y, weights = cached_attention(jnp.asarray(q), key_layout(jnp.asarray(k)),
                                value_layout(jnp.asarray(v)), jnp.asarray(mask), jnp.asarray(bias))
  assert y.shape == (b * n, 1, h, d) and weights.shape == (b * n, h, 1, s)
  np.testing.assert_allclose(np.asarray(y), ref, atol=1e-5)
  np.testing.assert_array_equal(np.asarray(weights)[:, :, 0] == 0,
                                ~mask.transpose(0, 2, 1, 3).reshape(b * n, h, s))
  np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, atol=1e-6)
  pad = (jnp.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]]) != 0)[:, None, None, :]  # [b, 1, 1, s]
  _, weights = cached_attention(jnp.asarray(q), key_layout(jnp.asarray(k)),
                                value_layout(jnp.asarray(v)), pad)
  np.testing.assert_array_equal(np.asarray(weights)[:n, :, :, 4:], 0)
  with pytest.raises(ValueError, match=r"query rows \(5\) must be a multiple of the cache's rows \(2\)"):
    cached_attention(jnp.asarray(q[:5]), key_layout(jnp.asarray(k)), value_layout(jnp.asarray(v)))


@pytest.mark.parametrize("positions", ["sinusoidal", "alibi", "relative"])
def test_whole_model_same_logits_with_either_kernel(positions):
  inputs = jnp.array([[5, 6, 7, 1, 0], [8, 1, 0, 0, 0]])
  targets = jnp.array([[9, 10, 1, 0], [11, 12, 13, 1]])
  # One layer a stack: the kernel is each attention's own (with the stack's masks and biases).
  cfg = lambda impl: tiny(attention_impl=impl, positions=positions, num_kv_heads=2,
                          num_encoder_layers=1, num_decoder_layers=1)
  model_e, v = draw(cfg("einsum"), inputs, targets)
  model_x = Transformer(cfg("xla"))
  np.testing.assert_allclose(jax.jit(model_e.apply)(v, inputs, targets),
                             jax.jit(model_x.apply)(v, inputs, targets), atol=2e-5)


def _pretend_gpu(capability: str | None):
  """A stand-in for jax.devices()[0] on an NVIDIA GPU of this compute capability (None: a ROCm
  GPU, whose client reports "rocm" and whose devices have no compute capability)."""
  version = "rocm 60300" if capability is None else "cuda 12080"
  client = type("Client", (), {"platform_version": version})()
  return type("Gpu", (), {"compute_capability": capability, "client": client})()


@pytest.mark.parametrize("d_k, lengths, train, dtype, capability, kernel", [
    (64, (64, 64), True, "bfloat16", "9.0", "cudnn"),  # the paper's heads on an H100
    (64, (17, 17), False, "bfloat16", "9.0", "cudnn"),  # odd lengths: no bias gradient to take
    (64, (17, 17), True, "bfloat16", "9.0", "xla"),  # training with a bias needs even lengths
    (512, (64, 64), True, "bfloat16", "9.0", "xla"),  # Table 3 row A1: one head of 512
    (256, (64, 64), True, "bfloat16", "9.0", "cudnn"),  # Hopper takes up to 256 ...
    (256, (64, 64), True, "bfloat16", "8.0", "xla"),  # ... an A100 up to 128
    (4, (64, 64), True, "bfloat16", "9.0", "xla"),  # not a multiple of 8
    (64, (64, 64), True, "float32", "9.0", "xla"),  # cuDNN's fused attention is 16-bit only
    (64, (64, 64), True, "bfloat16", None, "xla"),  # a ROCm GPU: no cuDNN
])
def test_auto_picks_cudnn_only_for_shapes_it_takes(monkeypatch, d_k, lengths, train, dtype,
                                                   capability, kernel):
  """What model.attention_impl='auto' picks on a GPU, against the limits jax 0.10.2's cuDNN path
  checks (jax/_src/cudnn/fused_attention_stablehlo.py: head width, lengths with a bias)."""
  from tfm.model import attention  # pylint: disable=import-outside-toplevel
  gpu = _pretend_gpu(capability)
  monkeypatch.setattr(attention.jax, "default_backend", lambda: "gpu")
  monkeypatch.setattr(attention.jax, "devices", lambda *a: [gpu])
  assert attention.choose_kernel("auto", d_k, d_k, 0.0, dtype, train, *lengths) == kernel


def test_auto_follows_the_mesh_devices_not_the_host(monkeypatch):
  """Traced under a mesh (as every step is, and as tfm plan traces for a TPU topology), 'auto'
  chooses for the mesh's devices: a GPU host tracing for CPU (or TPU) devices gets XLA's kernel."""
  from tfm.model import attention  # pylint: disable=import-outside-toplevel
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
  gpu = _pretend_gpu("9.0")
  monkeypatch.setattr(attention.jax, "default_backend", lambda: "gpu")
  monkeypatch.setattr(attention.jax, "devices", lambda *a: [gpu])
  args = ("auto", 64, 64, 0.0, "bfloat16", True, 64, 64)
  assert attention.choose_kernel(*args) == "cudnn"  # no mesh: the host's GPU
  with jax.set_mesh(mesh):
    assert attention.target_platform() == "cpu"
    assert attention.choose_kernel(*args) == "xla"
