"""FLOPs per example against the model's own parameter shapes, and the peak-FLOPs table."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from tfm.model.config import ModelConfig
from tfm.model.transformer import Transformer
from tfm.train.flops import forward_flops, mfu, peak_flops, train_flops, train_flops_per_token


def matmul_weights(cfg: ModelConfig):
  """Weights of the real model, grouped by the tokens they see: (encoder, decoder, cross k/v, output).

  Read from the initialised parameter shapes; biases, LayerNorm and position tables excluded.
  """
  tokens = jnp.ones((1, 4), jnp.int32)
  variables = jax.eval_shape(lambda: Transformer(cfg).init(
      jax.random.PRNGKey(0), tokens if cfg.has_encoder else None, tokens))
  groups = {"encoder": 0, "decoder": 0, "cross_kv": 0, "output": 0}
  flat = jax.tree_util.tree_flatten_with_path(nn.meta.unbox(variables["params"]))[0]
  for path, leaf in flat:
    name = jax.tree_util.keystr(path)
    if not name.endswith("['kernel']") and "['token_embedding']" not in name:
      continue  # untied input tables are looked up, not multiplied
    if "['token_embedding']" in name or "['logits']" in name:
      groups["output"] += leaf.size  # the pre-softmax projection, tied or not
    elif "cross_attention" in name and ("['key']" in name or "['value']" in name):
      groups["cross_kv"] += leaf.size
    elif name.startswith("['encoder']"):
      groups["encoder"] += leaf.size
    else:
      groups["decoder"] += leaf.size
  return groups


CFG = dict(vocab_size=50, d_model=16, d_ff=24, num_heads=4, num_kv_heads=2, d_k=6, d_v=5,
           num_encoder_layers=2, num_decoder_layers=3)


@pytest.mark.parametrize("changes", [{}, dict(ffn="swiglu", num_kv_heads=None),
                                     dict(ffn="gated_gelu", tie_embeddings=False,
                                          share_embeddings=True),
                                     dict(architecture="decoder_only", num_encoder_layers=0)])
def test_matmul_flops_match_the_models_weights(changes):
  cfg = ModelConfig(**{**CFG, **changes})
  w = matmul_weights(cfg)
  s, t = 7, 9
  linear = 2 * ((w["encoder"] + w["cross_kv"]) * s + (w["decoder"] + w["output"]) * t)
  quadratic = 2 * cfg.num_heads * (cfg.d_k + cfg.d_v) * (
      cfg.num_encoder_layers * s * s * cfg.has_encoder + cfg.num_decoder_layers * t * t
      + cfg.num_decoder_layers * t * s * (cfg.architecture == "encoder_decoder"))
  assert forward_flops(cfg, s, t) == linear + quadratic
  assert train_flops(cfg, s, t) == 3 * (linear + quadratic)


def test_the_mlm_heads_transform_is_one_more_matrix_over_the_tokens():
  cfg = dict(CFG, architecture="encoder_only", num_decoder_layers=0)
  head = ModelConfig(**cfg, mlm_head=True)
  tokens = jnp.ones((1, 4), jnp.int32)
  kernel = jax.eval_shape(lambda: Transformer(head).init(jax.random.PRNGKey(0), tokens, None))[
      "params"]["mlm_head"]["transform"]["kernel"].value
  assert kernel.shape == (16, 16)
  assert forward_flops(head, 7, 0) - forward_flops(ModelConfig(**cfg), 7, 0) == 2 * 16 * 16 * 7


def test_decoder_only_is_6n_plus_12_lnhd_per_token():
  cfg = ModelConfig(**{**CFG, "architecture": "decoder_only", "num_encoder_layers": 0, "d_v": 6,
                       "num_kv_heads": None})
  n = 32
  weights = sum(matmul_weights(cfg).values())
  expected = 6 * weights + 12 * cfg.num_decoder_layers * n * cfg.num_heads * cfg.d_k
  assert train_flops_per_token(cfg, 0, n) == expected


def test_causal_half():
  cfg = ModelConfig(**{**CFG, "architecture": "decoder_only", "num_encoder_layers": 0})
  n = 16
  full = train_flops(cfg, 0, n) - train_flops(cfg, 0, n, exclude_masked=True)
  assert full == 3 * cfg.num_decoder_layers * n * n * cfg.num_heads * (cfg.d_k + cfg.d_v)


def test_base_model_per_token():
  """Base model, 37000 vocabulary, S = T = 25: ~6 x 63M weights per target token, plus attention."""
  cfg = ModelConfig()
  per_token = train_flops_per_token(cfg, 25, 25)
  weights = 6 * 4 * 512 * 512 + 6 * 2 * 512 * 2048 + 6 * 8 * 512 * 512 + 6 * 2 * 512 * 2048 + 37000 * 512
  assert per_token == pytest.approx(6 * weights + 3 * 2 * 25 * 8 * 128 * 18, rel=1e-12)


@pytest.mark.parametrize("kind, peak", [
    ("TPU v4", 275e12), ("TPU v5 lite", 197e12), ("TPU v5e", 197e12), ("TPU v5", 459e12),
    ("TPU v5p", 459e12), ("TPU v6 lite", 918e12), ("NVIDIA A100-SXM4-80GB", 312e12),
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H100 NVL", 835e12),
    ("NVIDIA H200", 989e12), ("NVIDIA H200 NVL", 835e12),
    ("Tesla P100-PCIE-16GB", None)])
def test_peak_flops_table(kind, peak):
  assert peak_flops(kind) == peak


def test_cpu_has_no_peak_and_mfu():
  assert peak_flops() is None  # this test machine is a CPU
  assert mfu(1e12, 1.0, 4, None) is None
  assert mfu(2e14, 0.5, 4, 200e12) == pytest.approx(0.5)
