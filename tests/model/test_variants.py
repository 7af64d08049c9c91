"""Every variant and every Table 3 row builds and runs forward and backward with finite gradients."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.model.helpers import tiny
from tfm.config import load_config, model_config
from tfm.model.transformer import Transformer
from configs.table3 import ROWS

VARIANTS = [
    dict(), dict(norm="pre"), dict(positions="learned"), dict(positions="rope"),
    dict(positions="alibi"), dict(positions="relative"), dict(num_kv_heads=1), dict(num_kv_heads=2),
    dict(ffn="gelu"), dict(ffn="swiglu"), dict(architecture="decoder_only"),
    dict(architecture="encoder_only"), dict(tie_embeddings=False),
    dict(attention_dropout_rate=0.2, ffn_dropout_rate=0.2, dropout_rate=0.3),
    dict(dtype="bfloat16"), dict(remat="full"), dict(remat="dots", norm="pre"),
    dict(d_k=4, d_v=12),
]


def _numpy_params(model, inputs, targets):
  """Random parameters of the built shapes, drawn with numpy: initializing a 200M-parameter model
  through JAX's PRNG costs more CPU time than the forward and backward pass being tested."""
  shapes = nn.meta.unbox(jax.eval_shape(model.init, jax.random.PRNGKey(0), inputs, targets))["params"]
  rng = np.random.default_rng(0)
  return jax.tree.map(lambda s: jnp.asarray(rng.standard_normal(s.shape, np.float32) * 0.05), shapes)


def _forward_backward(cfg, batch=2, length=6, numpy_init=False):
  tokens = (jnp.arange(batch * length).reshape(batch, length) % (cfg.vocab_size - 3) + 3).astype(jnp.int32)
  inputs = None if cfg.architecture == "decoder_only" else tokens
  targets = None if cfg.architecture == "encoder_only" else tokens
  model = Transformer(cfg)
  if numpy_init:
    params = _numpy_params(model, inputs, targets)
  else:
    params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), inputs, targets))["params"]

  @jax.jit
  def loss_and_grad(p):
    def loss(p):
      logits = model.apply({"params": p}, inputs, targets, train=True,
                           rngs={"dropout": jax.random.PRNGKey(1)})
      return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[..., None], -1)), logits
    return jax.value_and_grad(loss, has_aux=True)(p)

  (value, logits), grads = loss_and_grad(params)
  expected_len = length
  assert logits.shape == (batch, expected_len, cfg.vocab_size) and logits.dtype == jnp.float32
  assert np.isfinite(float(value))
  assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grads))
  assert sum(float(jnp.abs(g).sum()) for g in jax.tree.leaves(grads)) > 0
  # Parameters are float32 whatever the compute dtype.
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(params))


@pytest.mark.parametrize("change", VARIANTS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "paper")
def test_variant_forward_backward(change):
  _forward_backward(tiny(**change))


def _row_model(row):
  # The row's real widths and depths; a small vocabulary and a tiny batch keep it fast on CPU.
  return model_config(load_config(f"configs/table3.py:{row}", ["model.vocab_size=64", "model.dtype=float32"]))


def _distinct_models():
  """Rows that build a model no earlier row builds (D3 and D4 change only the loss: base's model)."""
  seen, rows = set(), []
  for row in ROWS:
    cfg = _row_model(row)
    if cfg not in seen:
      seen.add(cfg)
      rows.append(row)
  return rows


def test_distinct_models_cover_every_row():
  distinct = _distinct_models()
  covered = {_row_model(r) for r in distinct}
  assert all(_row_model(r) in covered for r in ROWS)
  assert set(ROWS) - set(distinct) == {"D3", "D4"}


@pytest.mark.slow
@pytest.mark.parametrize("row", _distinct_models())
def test_table3_row_forward_backward(row):
  _forward_backward(_row_model(row), batch=1, length=4, numpy_init=True)
