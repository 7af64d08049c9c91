"""Multi-head attention (section 3.2) with multi-query and grouped-query variants and a decode cache.

Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, per head, with heads concatenated and projected:
MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).
Queries have `num_heads` heads; keys and values have `kv_heads` heads (= num_heads for the paper,
1 for multi-query, a divisor for grouped-query), each shared by num_heads / kv_heads query heads.

Two interchangeable kernels compute the product: `einsum_attention`, the plain reference, and
`jax.nn.dot_product_attention` (XLA, or cuDNN flash attention on GPUs). The einsum path is used
when d_k != d_v or attention dropout is active, which the library kernel does not support.

Attention weights: applied with mutable=["intermediates"], every Attention sub-layer sows its
softmax probabilities (before attention dropout) as `intermediates/.../attention_weights`, a
1-tuple holding float32 [batch, heads, q_length, kv_length]; masked keys get weight 0 (a query
with every key masked, a padding position, gets uniform weights, and its output is unused). The
fused kernels never expose the probabilities, so while weights are requested the einsum path runs
whatever model.attention_impl says (the same function to float rounding). Without that collection
mutable (training, eval, decoding) nothing is sown and the kernel choice is unchanged.
tfm/model/attention_weights.py collects them per stack and layer.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from tfm.model import partitioning as P
from tfm.model.config import cudnn_head_width
from tfm.model.dense import Dense
from tfm.model.dropout import ATTENTION, Dropout
from tfm.model.platform import target_platform
from tfm.model.positions import apply_rope


WEIGHTS = "attention_weights"  # the name of the sown probabilities in the 'intermediates' collection


def masked_softmax(logits, mask=None, bias=None):
  """softmax(logits + bias) over the keys, float32 [b, h, t, s]; masked keys (mask False) get 0.

  logits float32 [b, h, t, s]; mask bool and bias float broadcastable to it. Masked logits become
  float32's lowest value, not -inf, so a row with every key masked (a padding query) is uniform over
  its keys instead of NaN; callers drop those rows' outputs (their loss weight is 0).
  """
  if bias is not None:
    logits = logits + bias.astype(jnp.float32)
  if mask is not None:
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
  return jax.nn.softmax(logits, axis=-1)


def einsum_attention(q, k, v, mask=None, bias=None, dropout=None, return_weights=False):
  """Reference scaled dot-product attention.

  q [b, t, h, d_k], k [b, s, kvh, d_k], v [b, s, kvh, d_v]; mask bool broadcastable to [b, h, t, s];
  bias float broadcastable to [b, h, t, s]; dropout: optional callable applied to the weights.
  Returns [b, t, h, d_v]. Softmax is taken in float32. return_weights: also return the softmax
  probabilities before dropout, float32 [b, h, t, s].
  """
  b, t, h, dk = q.shape
  kvh = k.shape[2]
  q = q.reshape(b, t, kvh, h // kvh, dk)
  logits = jnp.einsum("btkgd,bskd->bkgts", q, k).astype(jnp.float32) * dk**-0.5
  probabilities = masked_softmax(logits.reshape(b, h, t, -1), mask, bias)
  weights = probabilities if dropout is None else dropout(probabilities)
  weights = weights.astype(v.dtype).reshape(b, kvh, h // kvh, t, -1)
  y = jnp.einsum("bkgts,bskd->btkgd", weights, v).reshape(b, t, h, v.shape[-1])
  return (y, probabilities) if return_weights else y


def library_attention(q, k, v, mask=None, bias=None, implementation=None):
  """jax.nn.dot_product_attention with the same contract as einsum_attention (d_k == d_v)."""
  if bias is not None:
    bias = bias.astype(q.dtype)
  return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, implementation=implementation)


def cudnn_takes(d_k: int, q_length: int, kv_length: int, train: bool) -> bool:
  """Whether jax's cuDNN fused attention takes these shapes on this host's GPU: an NVIDIA one (a
  CUDA client; ROCm GPUs have no cuDNN), its head width (`cudnn_head_width`, at most 256 from
  compute capability 9, Hopper, 128 before) and, when training with a mask, even lengths (tfm
  passes a boolean mask; jax's cuDNN path adds it to the logits as a bias, and cuDNN's bias
  gradient wants even lengths)."""
  device = jax.devices()[0]
  if "cuda" not in device.client.platform_version:  # as jax's own cuDNN checks read it
    return False
  capability = float(getattr(device, "compute_capability", 0) or 0)
  return (cudnn_head_width(d_k, 256 if capability >= 9 else 128)
          and not (train and (q_length % 2 or kv_length % 2)))


def choose_kernel(impl: str, d_k: int, d_v: int, dropout_rate: float, dtype: str, train: bool,
                  q_length: int, kv_length: int) -> str:
  """'einsum', 'xla' or 'cudnn' for model.attention_impl = impl on the target platform
  (`target_platform`) and phase; 'auto' picks cuDNN for GPUs in bfloat16 where it takes the
  shapes (`cudnn_takes`), else XLA's."""
  if impl != "auto":
    return impl
  if d_k != d_v or (train and dropout_rate > 0):
    return "einsum"
  if (target_platform() == "gpu" and dtype == "bfloat16"
      and cudnn_takes(d_k, q_length, kv_length, train)):
    return "cudnn"
  return "xla"


class Attention(nn.Module):
  """One attention sub-layer: projections, kernel, output projection.

  Modes (static): 'full' attends over kv; 'init_cache' creates the decode cache and returns zeros;
  'decode' takes one query token per row and reads/writes the cache; 'prefill' (self-attention)
  attends as 'full' does over its t tokens (the mask decides what each sees) and writes their keys
  and values into cache positions 0 .. t - 1, so decoding continues after a prompt run in one pass.
  Self-attention caches the keys and values of past tokens; cross-attention caches the projected
  encoder output once, so a decode step never recomputes it. Cached keys are [b, kvh, d_k, length]
  and values [b, kvh, length, d_v]: the operand layouts of the two products in `cached_attention`,
  so a decode step multiplies the cache where it lies instead of copying it into that layout.
  Fields: num_heads query heads, num_kv_heads key/value heads, per-head widths d_k and d_v, the
  compute dtype, use_bias, impl (model.attention_impl), dropout_rate on the attention weights,
  rope_base (rotary positions on queries and keys when set; self-attention only), is_cross.
  """

  num_heads: int
  num_kv_heads: int
  d_k: int
  d_v: int
  dtype: str = "float32"
  use_bias: bool = True
  impl: str = "auto"
  dropout_rate: float = 0.0
  rope_base: float | None = None
  is_cross: bool = False

  @nn.compact
  def __call__(self, x, kv=None, *, mask=None, bias=None, positions=None, train=False,
               mode="full", decode_index=None):
    """x [b, t, d_model]; kv [b, s, d_model] (cross-attention); positions [b, t] for rope.

    decode_index [b]: position of the current token in 'decode' mode. Returns [b, t, d_model].
    """
    h, kvh, dtype = self.num_heads, self.num_kv_heads, jnp.dtype(self.dtype)
    proj = lambda features, in_dims, names, name: Dense(
        features, in_dims, names, names[in_dims:], self.dtype, self.use_bias, name=name)
    query = proj((h, self.d_k), 1, ("embed", "heads", "kv"), "query")
    key = proj((kvh, self.d_k), 1, ("embed", "kv_heads", "kv"), "key")
    value = proj((kvh, self.d_v), 1, ("embed", "kv_heads", "kv"), "value")
    out = proj((x.shape[-1],), 2, ("heads", "kv", "embed"), "out")
    use_rope = self.rope_base is not None and not self.is_cross

    if mode == "init_cache":
      if self.is_cross:  # the encoder output's projections, once
        self.variable("cache", "cross_key", lambda: key_layout(key(kv)))
        self.variable("cache", "cross_value", lambda: value_layout(value(kv)))
      else:
        b, max_len = x.shape[:2]
        self.variable("cache", "cached_key", jnp.zeros, (b, kvh, self.d_k, max_len), dtype)
        self.variable("cache", "cached_value", jnp.zeros, (b, kvh, max_len, self.d_v), dtype)
      return jnp.zeros(x.shape, dtype)

    q = query(x)
    if use_rope:
      q = apply_rope(q, decode_index[:, None] if mode == "decode" else positions, self.rope_base)
    sow = self.is_mutable_collection("intermediates")  # weights requested: only einsum has them
    if mode == "decode":
      if self.is_cross:
        k, v = self.get_variable("cache", "cross_key"), self.get_variable("cache", "cross_value")
      else:
        k, v = key(x), value(x)
        if use_rope:
          k = apply_rope(k, decode_index[:, None], self.rope_base)
        k, v = self._write_cache(k, v, decode_index)
      y, weights = cached_attention(P.constrain(q, P.BLHD), k, v, mask, bias)
      if sow:
        self.sow("intermediates", WEIGHTS, weights)
      return P.constrain(out(P.constrain(y, P.BLHD)), P.BLD)

    if self.is_cross:
      k, v = key(kv), value(kv)
    else:
      k, v = key(x), value(x)
      if use_rope:
        k = apply_rope(k, positions, self.rope_base)
      if mode == "prefill":
        self._fill_cache(k, v)
    q = P.constrain(q, P.BLHD)
    k = P.constrain(k, P.BLKD)
    v = P.constrain(v, P.BLKD)
    kernel = choose_kernel(self.impl, self.d_k, self.d_v, self.dropout_rate, self.dtype, train,
                           q.shape[1], k.shape[1])
    if kernel == "einsum" or sow:
      drop = None
      if train and self.dropout_rate > 0:
        drop = lambda w: Dropout(self.dropout_rate, ATTENTION)(w, deterministic=False)
      y, weights = einsum_attention(q, k, v, mask, bias, drop, return_weights=True)
      if sow:
        self.sow("intermediates", WEIGHTS, weights)
    else:
      y = library_attention(q, k, v, mask, bias, implementation=kernel)
    return P.constrain(out(P.constrain(y, P.BLHD)), P.BLD)

  def _write_cache(self, k, v, decode_index):
    """Writes one token's k, v ([b, 1, kvh, d]) at decode_index [b]; returns the whole caches, keys
    [b, kvh, d_k, max_len] and values [b, kvh, max_len, d_v]. Positions after decode_index hold
    zeros or stale values and are masked."""
    ck, cv = self.variable("cache", "cached_key"), self.variable("cache", "cached_value")
    write = lambda axis: jax.vmap(
        lambda buf, new, i: jax.lax.dynamic_update_slice_in_dim(buf, new, i, axis=axis))
    ck.value = write(2)(ck.value, key_layout(k).astype(ck.value.dtype), decode_index)
    cv.value = write(1)(cv.value, value_layout(v).astype(cv.value.dtype), decode_index)
    return ck.value, cv.value


  def _fill_cache(self, k, v):
    """Writes t tokens' k, v ([b, t, kvh, d]) at cache positions 0 .. t - 1 (a prompt's prefill;
    positions past a row's prompt hold what its padding computed, masked until decoding writes
    them)."""
    ck, cv = self.variable("cache", "cached_key"), self.variable("cache", "cached_value")
    t, max_len = k.shape[1], ck.value.shape[-1]
    if t > max_len:
      raise ValueError(f"prefill: {t} tokens do not fit a decode cache of {max_len} positions")
    ck.value = jax.lax.dynamic_update_slice_in_dim(
        ck.value, key_layout(k).astype(ck.value.dtype), 0, axis=3)
    cv.value = jax.lax.dynamic_update_slice_in_dim(
        cv.value, value_layout(v).astype(cv.value.dtype), 0, axis=2)


def key_layout(k):
  """Keys [b, s, kvh, d_k] -> the decode cache's [b, kvh, d_k, s]."""
  return jnp.transpose(k, (0, 2, 3, 1))


def value_layout(v):
  """Values [b, s, kvh, d_v] -> the decode cache's [b, kvh, s, d_v]."""
  return jnp.transpose(v, (0, 2, 1, 3))


def grow_cache(cache, length: int):
  """Pads every self-attention cache in a decode-cache tree to `length` positions (zeros at the end;
  they are masked until written). Keys [..., kvh, d_k, s] grow on their last axis, values
  [..., kvh, s, d_v] on their second to last, whatever leads (rows, a scanned stack's layers)."""

  def grow(path, x):
    name = getattr(path[-1], "key", None)
    axis = {"cached_key": x.ndim - 1, "cached_value": x.ndim - 2}.get(name)
    if axis is None:
      return x
    if x.shape[axis] > length:
      raise ValueError(f"cannot shrink a decode cache from {x.shape[axis]} to {length} positions")
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, length - x.shape[axis])
    return jnp.pad(x, pad)

  return jax.tree_util.tree_map_with_path(grow, cache)


def cached_attention(q, k, v, mask=None, bias=None):
  """Attention of one query token over a decode cache, the products in the cache's own layout.

  q [r, 1, h, d_k]; k [b, kvh, d_k, s] (`key_layout`); v [b, kvh, s, d_v] (`value_layout`), with
  r = n * b: query rows b*n .. b*n + n - 1 read cache row b (n = 1 but for beam search's
  per-example cross-attention cache, n = beams). mask bool and bias float broadcastable to
  [b, h, n, s] (a query row's head h at [row // n, h, row % n]; with n = 1 that is [b, h, 1, s]).
  Returns (y [r, 1, h, d_v], float32 softmax probabilities [r, h, 1, s]): the same function as
  `einsum_attention` on the untransposed cache, each query row against its cache row. With the
  batch and head axes leading and the contracted axis where a matrix product wants it, XLA
  multiplies the cache in place (on CPU it otherwise copies the whole cache every step), and the
  n queries sharing a cache row are one product: the cache is read once for all of them.
  """
  r, t, h, dk = q.shape
  b, kvh, s = k.shape[0], k.shape[1], k.shape[-1]
  n, g = r // b, h // kvh
  if n * b != r:
    raise ValueError(f"query rows ({r}) must be a multiple of the cache's rows ({b})")
  q = jnp.swapaxes(q.reshape(b, n, kvh, g, dk), 1, 2).reshape(b, kvh, n * g, dk)  # t = 1
  logits = jnp.einsum("bkmd,bkds->bkms", q, k).astype(jnp.float32) * dk**-0.5
  # Softmax (mask, bias) per [b, h, n, s]; the products per [b, kvh, n * g, s].
  probabilities = masked_softmax(
      jnp.swapaxes(logits.reshape(b, kvh, n, g, s), 2, 3).reshape(b, h, n, s), mask, bias)
  w = jnp.swapaxes(probabilities.reshape(b, kvh, g, n, s), 2, 3).reshape(b, kvh, n * g, s)
  y = jnp.einsum("bkms,bksd->bkmd", w.astype(v.dtype), v)
  y = jnp.swapaxes(y.reshape(b, kvh, n, g, -1), 1, 2).reshape(r, t, h, v.shape[-1])
  return y, probabilities.transpose(0, 2, 1, 3).reshape(r, h, t, s)
