"""Model FLOPs of a training step, and the accelerators' peak FLOP/s, for MFU.

Counted per example (a source row of S tokens and a target row of T tokens), forward + backward =
3 x forward, a multiply-add = 2 FLOPs:

  * matmuls: 6 x (weights a token passes through) x tokens. Encoder weights see S tokens; decoder
    weights see T tokens, except the encoder-decoder attention's key and value projections, which
    project the S encoder outputs in each decoder layer. The pre-softmax projection (tied or not) is
    counted (and BERT's masked-LM head's d_model x d_model transform, model.mlm_head); embedding
    lookups, biases, norms, softmax and the loss are not.
  * attention products, per layer and head: scores Q K^T cost 2 x queries x keys x d_k, the weighted
    sum of values 2 x queries x keys x d_v (d_k and d_v may differ, Table 3 row B), times 3 for the
    backward pass -- 6 x n x n x h x (d_k + d_v) for self-attention over n tokens, which is the familiar
    12 x layers x n x h x d_k per token when d_k = d_v. Cross-attention has T queries over S keys.
  * causal self-attention is counted in full by default, as is common practice (PaLM, Chowdhery et al.
    2022, appendix B): the kernels compute the masked half too. `exclude_masked=True` halves it.
  * packed rows: n is the row length, since attention is computed over the whole row.

"Per token" means per target token (the tokens the loss is taken on); for decoder-only models there are
only targets. For an encoder-decoder with S = T this is ~6 x (all matmul weights) per token.
"""

from __future__ import annotations

import jax

from tfm.model.config import GATED_FFNS, ModelConfig
from tfm.train.tpu_chips import chip_by_device_kind

# Dense bf16 peak FLOP/s per GPU (vendor figures, without sparsity); TPU chips are in
# tfm/train/tpu_chips.py. Matched against jax.devices()[0].device_kind (case-insensitive
# substring, first match wins).
GPU_PEAK_FLOPS = (
    ("h200 nvl", 835e12),  # 1,671 TFLOP/s with sparsity, as the H100 NVL
    ("h200", 989e12),
    ("h100 pcie", 756e12),
    ("h100 nvl", 835e12),  # 1,671 TFLOP/s with sparsity on NVIDIA's H100 NVL datasheet
    ("h100", 989e12),  # SXM / HBM3
    ("a100", 312e12),
)


def peak_flops(device_kind: str | None = None) -> float | None:
  """Peak bf16 FLOP/s of one device; None for CPUs and unknown devices.

  device_kind defaults to jax.devices()[0].device_kind.
  """
  if device_kind is None:
    device = jax.devices()[0]
    if device.platform == "cpu":
      return None
    device_kind = device.device_kind
  chip = chip_by_device_kind(device_kind)
  if chip is not None:
    return chip.peak_bf16_flops
  kind = device_kind.lower()
  for name, flops in GPU_PEAK_FLOPS:
    if name in kind:
      return flops
  return None


def _attention_weights(cfg: ModelConfig) -> tuple[int, int]:
  """(query + output, key + value) projection weights of one attention sub-layer."""
  d, h, kvh = cfg.d_model, cfg.num_heads, cfg.kv_heads
  return d * h * cfg.d_k + h * cfg.d_v * d, d * kvh * (cfg.d_k + cfg.d_v)


def _ffn_weights(cfg: ModelConfig) -> int:
  return (3 if cfg.ffn in GATED_FFNS else 2) * cfg.d_model * cfg.d_ff


def _attention_products(cfg: ModelConfig, queries: int, keys: int) -> int:
  """Forward FLOPs of Q K^T and weights V for one layer: 2 q k h (d_k + d_v)."""
  return 2 * queries * keys * cfg.num_heads * (cfg.d_k + cfg.d_v)


def forward_flops(cfg: ModelConfig, source_length: int, target_length: int,
                  exclude_masked: bool = False) -> int:
  """Forward FLOPs of one example: S = source_length tokens in, T = target_length tokens out.

  Decoder-only models ignore source_length; encoder-only models ignore target_length and project the
  S encoder outputs to the vocabulary.
  """
  qo, kv = _attention_weights(cfg)
  ffn = _ffn_weights(cfg)
  output = cfg.d_model * cfg.vocab_size
  flops = 0
  if cfg.has_encoder:
    s = source_length
    flops += cfg.num_encoder_layers * (2 * (qo + kv + ffn) * s + _attention_products(cfg, s, s))
    if cfg.architecture == "encoder_only":
      flops += 2 * (output + cfg.d_model * cfg.d_model * cfg.mlm_head) * s  # the head's transform
  if cfg.has_decoder:
    t = target_length
    self_products = _attention_products(cfg, t, t) // (2 if exclude_masked else 1)
    layer = 2 * (qo + kv + ffn) * t + self_products
    if cfg.architecture == "encoder_decoder":
      s = source_length
      layer += 2 * qo * t + 2 * kv * s + _attention_products(cfg, t, s)
    flops += cfg.num_decoder_layers * layer + 2 * output * t
  return flops


def train_flops(cfg: ModelConfig, source_length: int, target_length: int,
                exclude_masked: bool = False) -> int:
  """Forward + backward FLOPs of one example (3 x forward)."""
  return 3 * forward_flops(cfg, source_length, target_length, exclude_masked)


def train_flops_per_token(cfg: ModelConfig, source_length: int, target_length: int,
                          exclude_masked: bool = False) -> float:
  """Training FLOPs per target token (per source token for encoder-only models)."""
  tokens = source_length if cfg.architecture == "encoder_only" else target_length
  return train_flops(cfg, source_length, target_length, exclude_masked) / tokens


def batch_flops(cfg: ModelConfig, batch) -> int:
  """Model training FLOPs of one step on `batch` (dict of [rows, length] arrays; shapes only):
  rows x train_flops(source length, target length), padding and packing included."""
  rows, target_length = batch["targets"].shape
  source_length = batch["inputs"].shape[1] if "inputs" in batch else 0
  return rows * train_flops(cfg, source_length, target_length)


def mfu(flops_per_step: float, step_seconds: float, num_devices: int,
        peak: float | None) -> float | None:
  """Model FLOPs utilisation: achieved FLOP/s over the devices' peak; None without a peak."""
  if peak is None or step_seconds <= 0:
    return None
  return flops_per_step / step_seconds / (num_devices * peak)
