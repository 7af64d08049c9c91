"""The sown attention weights (tfm/model/attention.py, tfm/model/attention_weights.py) are the model's
own: an independent numpy forward pass of the paper's model recomputes softmax(Q K^T / sqrt(d_k) +
mask) per head and layer from the parameters, with padded sources and targets and the causal mask."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from tests.model.helpers import draw, random_tokens, tiny
from tfm.model.attention_weights import attention_weights
from tfm.model.scan_convert import stack_layers
from tfm.model.transformer import Transformer

# Row 0's source is padded after 5 tokens, row 1's target after 4.
INPUTS = np.asarray(random_tokens(jax.random.PRNGKey(1), (2, 7), 40)).copy()
TARGETS = np.asarray(random_tokens(jax.random.PRNGKey(2), (2, 6), 40)).copy()
INPUTS[0, 5:] = 0
TARGETS[1, 4:] = 0


def _layer_norm(x, p, eps=1e-6):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def _sinusoids(length, d):
  angles = np.arange(length)[:, None] / 10000.0 ** (2 * np.arange(d // 2) / d)
  pe = np.zeros((length, d))
  pe[:, 0::2], pe[:, 1::2] = np.sin(angles), np.cos(angles)
  return pe


def _attend(p, xq, xkv, allowed):
  """One example's attention: xq [t, d], xkv [s, d], allowed bool [t, s] ->
  (output [t, d], weights [heads, t, s])."""
  proj = lambda x, name: np.einsum("td,dhk->thk", x, p[name]["kernel"]) + p[name]["bias"]
  q, k, v = proj(xq, "query"), proj(xkv, "key"), proj(xkv, "value")
  heads, d_k = q.shape[1], q.shape[2]
  weights = np.zeros((heads, len(xq), len(xkv)))
  for h in range(heads):
    logits = np.where(allowed, q[:, h] @ k[:, h].T / np.sqrt(d_k), -1e30)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    weights[h] = e / e.sum(-1, keepdims=True)
  y = np.einsum("hts,shd->thd", weights, v)
  return np.einsum("thd,hdm->tm", y, p["out"]["kernel"]) + p["out"]["bias"], weights


def _ffn(p, x):
  hidden = np.maximum(0, x @ p["wi"]["kernel"] + p["wi"]["bias"])
  return hidden @ p["wo"]["kernel"] + p["wo"]["bias"]


def _reference(params, inputs, targets, layers):
  """{kind: [layers, heads, q, k]} of one example (post-LN, sinusoids, tied embeddings, ReLU)."""
  params = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
  table = params["token_embedding"]["embedding"]
  d = table.shape[1]
  embed = lambda ids: table[ids] * np.sqrt(d) + _sinusoids(len(ids), d)
  out = {"encoder": [], "decoder": [], "cross": []}
  source_real = inputs != 0
  x = embed(inputs)
  for i in range(layers):
    p = params["encoder"][f"layer_{i}"]
    y, w = _attend(p["self_attention"], x, x, np.broadcast_to(source_real, (len(x), len(x))))
    out["encoder"].append(w)
    x = _layer_norm(x + y, p["self_attention_norm"])
    x = _layer_norm(x + _ffn(p["ffn"], x), p["ffn_norm"])
  encoded = x
  t = len(targets)
  causal = np.arange(t)[None, :] <= np.arange(t)[:, None]
  x = embed(np.concatenate([[0], targets[:-1]]))  # shifted right, 0 the start token
  for i in range(layers):
    p = params["decoder"][f"layer_{i}"]
    y, w = _attend(p["self_attention"], x, x, causal & (targets != 0)[None, :])
    out["decoder"].append(w)
    x = _layer_norm(x + y, p["self_attention_norm"])
    y, w = _attend(p["cross_attention"], x, encoded, np.broadcast_to(source_real, (t, len(inputs))))
    out["cross"].append(w)
    x = _layer_norm(x + y, p["cross_attention_norm"])
    x = _layer_norm(x + _ffn(p["ffn"], x), p["ffn_norm"])
  return {kind: np.stack(ws) for kind, ws in out.items()}


def _weights(cfg, params):
  """attention_weights jitted (the eager op-by-op forward pass is much slower on CPU)."""
  return jax.jit(lambda p, i, t: attention_weights(Transformer(cfg), p, i, t))(params, INPUTS, TARGETS)


@pytest.fixture(scope="module")
def params():
  return draw(tiny(), INPUTS, TARGETS)[1]["params"]  # the shapes of model.init's tree


def test_sown_weights_equal_an_independent_numpy_forward_pass(params):
  cfg = tiny()
  got = jax.device_get(_weights(cfg, params))
  assert {k: v.shape for k, v in got.items()} == {
      "encoder": (2, 2, 4, 7, 7), "decoder": (2, 2, 4, 6, 6), "cross": (2, 2, 4, 6, 7)}
  for row in range(2):
    ref = _reference(params, INPUTS[row], TARGETS[row], cfg.num_encoder_layers)
    real_q = {"encoder": INPUTS[row] != 0, "decoder": TARGETS[row] != 0, "cross": TARGETS[row] != 0}
    for kind, weights in ref.items():
      # padding queries attend nowhere meaningful (all keys masked); every real query compared
      np.testing.assert_allclose(got[kind][:, row][:, :, real_q[kind]],
                                 weights[:, :, real_q[kind]], atol=2e-6, err_msg=f"{kind} row {row}")
  # the masks: padded keys and future positions get exactly 0, and every real row sums to 1
  assert np.all(got["encoder"][:, 0, :, :5, 5:] == 0) and np.all(got["cross"][:, 0, ..., 5:] == 0)
  assert np.all(got["decoder"][:, 0][..., np.triu(np.ones((6, 6), bool), 1)] == 0)
  assert np.all(got["decoder"][:, 1, :, :4, 4:] == 0)
  np.testing.assert_allclose(got["cross"].sum(-1), 1, atol=1e-6)


@pytest.mark.parametrize("change", [dict(scan_layers=True), dict(remat="full"),
                                    dict(scan_layers=True, remat="dots")])
def test_scanned_and_rematerialised_stacks_sow_the_same_weights(change, params):
  """nn.scan stacks the sown weights along the layers axis (axis 0), as it stacks the parameters."""
  expected = _weights(tiny(), params)
  cfg = tiny(**change)
  got = _weights(cfg, stack_layers(params) if cfg.scan_layers else params)
  assert got.keys() == expected.keys()
  for kind in expected:
    np.testing.assert_allclose(got[kind], expected[kind], atol=1e-6, err_msg=kind)


@pytest.mark.parametrize("impl", ["xla", "einsum"])
def test_requesting_weights_changes_neither_outputs_nor_parameters(impl):
  """The fused kernels expose no probabilities: requesting weights runs the einsum path, which
  gives the same logits to float rounding; init still creates parameters only."""
  # One layer a stack: each layer's attention takes the einsum path when asked for its weights.
  cfg = tiny(attention_impl=impl, num_encoder_layers=1, num_decoder_layers=1)
  model = Transformer(cfg)
  variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), INPUTS, TARGETS)  # traced
  assert set(variables) == {"params"}
  params = draw(cfg, INPUTS, TARGETS)[1]["params"]
  plain = jax.jit(model.apply)({"params": params}, INPUTS, TARGETS)
  logits, state = jax.jit(lambda v: model.apply(v, INPUTS, TARGETS, mutable=["intermediates"]))(
      {"params": params})
  np.testing.assert_allclose(logits, plain, atol=1e-5)
  assert set(state) == {"intermediates"}


def test_decoder_only_and_encoder_only_models_have_their_kinds():
  for arch, kinds in (("decoder_only", {"decoder"}), ("encoder_only", {"encoder"})):
    cfg = tiny(architecture=arch)
    inputs = None if arch == "decoder_only" else INPUTS
    targets = None if arch == "encoder_only" else TARGETS
    model = Transformer(cfg)
    shapes = jax.eval_shape(lambda: attention_weights(
        model, nn.meta.unbox(model.init(jax.random.PRNGKey(0), inputs, targets))["params"], inputs,
        targets))
    assert set(shapes) == kinds
