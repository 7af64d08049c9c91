"""Every variant and every Table 3 row builds and runs forward and backward with finite gradients
(the rows that differ from base in sizes only are traced to their shapes)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.model.helpers import draw, tiny
from tfm.config import load_config
from tfm.model.params import param_shapes
from tfm.model.transformer import Transformer
from configs.table3 import ROWS

VARIANTS = [
    dict(), dict(norm="pre"), dict(positions="learned"), dict(positions="rope"),
    dict(positions="alibi"), dict(positions="relative"), dict(positions="none"), dict(num_kv_heads=1), dict(num_kv_heads=2),
    dict(ffn="gelu"), dict(ffn="swiglu"), dict(architecture="decoder_only"),
    dict(architecture="encoder_only"), dict(tie_embeddings=False),
    dict(attention_dropout_rate=0.2, ffn_dropout_rate=0.2, dropout_rate=0.3),
    dict(dtype="bfloat16"), dict(remat="full"), dict(remat="dots", norm="pre"),
    dict(d_k=4, d_v=12),
    # T5's parts and BERT's (tests/model/test_t5_parts.py, test_bert_parts.py)
    dict(norm="pre", norm_kind="rms", ffn="gated_gelu", use_bias=False, positions="relative",
         tie_embeddings=False, share_embeddings=True),
    dict(architecture="encoder_only", positions="learned", ffn="gelu", token_types=2,
         embedding_norm=True, mlm_head=True),
]


def _tokens(cfg, batch, length):
  tokens = (jnp.arange(batch * length).reshape(batch, length) % (cfg.vocab_size - 3) + 3).astype(jnp.int32)
  inputs = None if cfg.architecture == "decoder_only" else tokens
  targets = None if cfg.architecture == "encoder_only" else tokens
  return tokens, inputs, targets


def _loss_and_grad(model, tokens, inputs, targets):
  """params -> ((loss, logits [batch, length, vocab]), grads): teacher-forced, dropout on."""
  def loss(p):
    logits = model.apply({"params": p}, inputs, targets, train=True,
                         rngs={"dropout": jax.random.PRNGKey(1)})
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[..., None], -1)), logits
  return jax.value_and_grad(loss, has_aux=True)


def _forward_backward(cfg, batch=2, length=6):
  tokens, inputs, targets = _tokens(cfg, batch, length)
  model, variables = draw(cfg, inputs, targets)
  params = variables["params"]
  (value, logits), grads = jax.jit(_loss_and_grad(model, tokens, inputs, targets))(params)
  expected_len = length
  assert logits.shape == (batch, expected_len, cfg.vocab_size) and logits.dtype == jnp.float32
  assert np.isfinite(float(value))
  grads = [np.asarray(g) for g in jax.tree.leaves(grads)]  # checked in numpy: no compile per leaf shape
  assert all(np.all(np.isfinite(g)) for g in grads)
  assert sum(float(np.abs(g).sum()) for g in grads) > 0
  # Parameters are float32 whatever the compute dtype.
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(params))


@pytest.mark.parametrize("change", VARIANTS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "paper")
def test_variant_forward_backward(change):
  # One layer a stack: a variant changes what a layer computes, and the layers of a stack are one
  # module repeated (test_scan_layers.py runs stacks of two).
  _forward_backward(tiny(**{"num_encoder_layers": 1, "num_decoder_layers": 1, **change}))


def _row_model(row, *overrides):
  # The row's real widths and depths; a small vocabulary and a tiny batch keep it fast on CPU.
  return load_config(f"configs/table3.py:{row}", ["model.vocab_size=64", "data.vocab_size=64",
                                                  "model.dtype=float32", *overrides]).model


def _architecture(row):
  """What a row's forward and backward pass exercises: its model less the dropout rate and depth.

  Rows C1-C3 change only N and D1-D2 only P_drop (D3, D4 only the loss): base runs their graph."""
  cfg = _row_model(row)
  return cfg.__class__(**{**cfg.__dict__, "dropout_rate": 0.1, "num_encoder_layers": 6,
                          "num_decoder_layers": 6})


def _distinct_architectures():
  seen, rows = set(), []
  for row in ROWS:
    if _architecture(row) not in seen:
      seen.add(_architecture(row))
      rows.append(row)
  return rows


def test_distinct_architectures_cover_every_row():
  distinct = _distinct_architectures()
  assert set(ROWS) - set(distinct) == {"C1", "C2", "C3", "D1", "D2", "D3", "D4"}
  assert {_architecture(r) for r in ROWS} == {_architecture(r) for r in distinct}


@pytest.mark.parametrize("row", list(ROWS))
def test_every_table3_row_builds_its_exact_shapes(row):
  """All 20 rows (C1-C3 and D1-D4 included) build: the shapes of init (traced with the layers
  scanned, tfm/model/params.py; test_scan_layers.py checks it against the unrolled trace), layers
  and widths as the row says."""
  cfg = _row_model(row)
  params = param_shapes(cfg)
  assert len([k for k in params["encoder"] if k.startswith("layer_")]) == cfg.num_encoder_layers
  assert len([k for k in params["decoder"] if k.startswith("layer_")]) == cfg.num_decoder_layers
  attention = params["decoder"]["layer_0"]["cross_attention"]
  assert attention["query"]["kernel"].shape == (cfg.d_model, cfg.num_heads, cfg.d_k)
  assert attention["value"]["kernel"].shape == (cfg.d_model, cfg.num_heads, cfg.d_v)
  assert params["encoder"]["layer_0"]["ffn"]["wi"]["kernel"].shape == (cfg.d_model, cfg.d_ff)


# big runs base's graph at other sizes (and another dropout rate), which base runs and the build
# test above builds: its run is in the long tier.
@pytest.mark.slow
@pytest.mark.parametrize("row", [pytest.param(r, marks=pytest.mark.long) if r == "big" else r
                                 for r in _distinct_architectures()])
def test_table3_row_forward_backward(row):
  """Each distinct row's widths (d_model, d_ff, h, d_k, d_v, positions) forward and backward, one
  layer a stack: the layers of a stack are one module repeated (the build test above counts them),
  and six would only multiply the compile time. The paper's two models run (big in the long tier:
  base's graph at other sizes); the other rows differ from base in sizes only, whose forward and
  backward are traced to their shapes (a row with d_k != d_v takes the einsum kernel, which the
  d_k=4, d_v=12 variant above runs)."""
  cfg = _row_model(row, "model.num_encoder_layers=1", "model.num_decoder_layers=1")
  if row in ("base", "big"):
    _forward_backward(cfg, batch=1, length=4)
    return
  tokens, inputs, targets = _tokens(cfg, 1, 4)
  model = Transformer(cfg)
  params = nn.meta.unbox(jax.eval_shape(model.init, jax.random.PRNGKey(0), inputs, targets))["params"]
  (value, logits), grads = jax.eval_shape(_loss_and_grad(model, tokens, inputs, targets), params)
  assert value.shape == () and logits.shape == (1, 4, cfg.vocab_size)
  assert logits.dtype == value.dtype == jnp.float32
  assert jax.tree.structure(grads) == jax.tree.structure(params)
  assert all(g.shape == p.shape and g.dtype == jnp.float32
             for g, p in zip(jax.tree.leaves(grads), jax.tree.leaves(params)))
