"""Model hyperparameters: one frozen dataclass, validated once.

The paper's encoder-decoder (section 3) is the default; every variant is one field. Modules take this
dataclass, never the whole experiment config. `from_config` builds it from the `model` section of an
ml_collections config and reports errors with the config key (`model.num_heads`, ...).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax.numpy as jnp

from tfm import sections

ARCHITECTURES = ("encoder_decoder", "decoder_only", "encoder_only")
NORMS = ("post", "pre")  # where the norm stands (model.norm); model.norm_kind says which norm
NORM_KINDS = ("layer", "rms")  # LayerNorm (tfm/model/layer_norm.py) or RMS norm (rms_norm.py)
POSITIONS = ("sinusoidal", "learned", "rope", "alibi", "relative", "none")
FFNS = ("relu", "gelu", "swiglu", "gated_gelu")
GATED_FFNS = ("swiglu", "gated_gelu")  # two input projections, one through the activation
# GELU's two forms (model.gelu): 'tanh', 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), flax's
# nn.gelu, GPT-2's, the released BERT code's and T5 v1.1's (transformers' "gelu_new"); 'erf', the
# exact x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))) (transformers' "gelu"). They differ by under 5e-4.
GELUS = ("tanh", "erf")
ATTENTION_IMPLS = ("auto", "einsum", "xla", "cudnn")
DTYPES = ("float32", "bfloat16")  # no float16: it would need loss scaling, which tfm has not
REMAT = ("none", "full", "dots", "offload")  # policies: tfm/model/remat.py
LAYER_NORM_GRADS = ("auto", "written", "autodiff")  # tfm/model/layer_norm.py
# How float32 matrix products are computed (jax_default_matmul_precision, set by tfm/experiment.py):
# "default" is the platform's own (full float32 on CPUs; TF32 tensor cores on recent NVIDIA GPUs,
# bfloat16 passes on TPUs), "highest" full float32 everywhere, "tensorfloat32" and "bfloat16" their
# rounded inputs wherever the hardware has them.
MATMUL_PRECISIONS = ("default", "highest", "tensorfloat32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Hyperparameters of a Transformer; defaults are the paper's base model (Table 3, row base).

  d_k and d_v are independent of d_model / num_heads (Table 3 rows A, B, C change them separately).
  num_kv_heads: None = num_heads (multi-head), 1 = multi-query, otherwise grouped-query.

  Parts of later models, off by default (configs/t5_small.py and configs/bert_base.py use them):
  norm_kind 'rms' (T5's RMS norm: a scale, no mean, no bias), ffn 'gated_gelu' (T5 v1.1's),
  share_embeddings (with tie_embeddings=False: one input table for the encoder and the decoder, the
  output projection its own, T5 v1.1's layout), token_types (BERT's token-type embeddings, rows of
  a table; every token reads row 0), embedding_norm (a norm of the summed embeddings, BERT's),
  mlm_head (BERT's masked-LM head: a dense layer, GELU and a norm before the output projection, and
  a bias on the logits). T5's relative bias is positions='relative' (one table a stack).
  gelu: the form of every GELU of the model (the 'gelu' and 'gated_gelu' FFNs', the MLM head's),
  'tanh' or 'erf' (GELUS).
  """

  vocab_size: int = 37000
  d_model: int = 512
  d_ff: int = 2048
  num_heads: int = 8
  num_kv_heads: int | None = None
  d_k: int = 64
  d_v: int = 64
  num_encoder_layers: int = 6
  num_decoder_layers: int = 6
  architecture: str = "encoder_decoder"
  norm: str = "post"
  norm_kind: str = "layer"  # 'layer' (LayerNorm) or 'rms' (RMS norm: scale only); every norm
  norm_epsilon: float = 1e-6
  positions: str = "sinusoidal"
  max_length: int = 1024  # size of the learned position table
  rope_base: float = 10000.0
  relative_buckets: int = 32
  relative_max_distance: int = 128
  ffn: str = "relu"
  gelu: str = "tanh"  # every GELU's form: 'tanh' (approximation) or 'erf' (exact); see GELUS
  tie_embeddings: bool = True
  share_embeddings: bool = False  # untied: one input table for both stacks (T5 v1.1)
  use_bias: bool = True
  token_types: int = 0  # rows of a token-type table added to the embeddings (BERT: 2); 0: none
  embedding_norm: bool = False  # a norm of the summed embeddings, before their dropout (BERT)
  mlm_head: bool = False  # BERT's masked-LM head: dense, GELU, norm, then logits + a bias
  dropout_rate: float = 0.1  # residual and embedding dropout (P_drop)
  attention_dropout_rate: float = 0.0
  ffn_dropout_rate: float = 0.0
  dtype: str = "float32"  # compute dtype; parameters are always float32
  attention_impl: str = "auto"
  remat: str = "none"  # per layer: none, full, dots or offload (tfm/model/remat.py)
  layer_norm_grad: str = "auto"  # LayerNorm's backward pass: auto, written or autodiff (layer_norm.py)
  matmul_precision: str = "default"  # float32 products: default, highest, tensorfloat32, bfloat16
  scan_layers: bool = False  # one nn.scan over each stack, parameters stacked (tfm/model/layer_stack.py)

  def __post_init__(self):
    validate(self)

  @property
  def kv_heads(self) -> int:
    return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

  @property
  def gelu_approximate(self) -> bool:
    """Whether the model's GELUs are the tanh approximation (jax.nn.gelu's `approximate`)."""
    return self.gelu == "tanh"

  @property
  def compute_dtype(self):
    return jnp.dtype(self.dtype)

  @property
  def has_encoder(self) -> bool:
    return self.architecture in ("encoder_decoder", "encoder_only")

  @property
  def has_decoder(self) -> bool:
    return self.architecture in ("encoder_decoder", "decoder_only")


def _fail(key: str, expected: str, got: Any):
  sections.fail(f"model.{key}", expected, got)


def cudnn_head_width(d_k: int, widest: int = 256) -> bool:
  """Whether jax 0.10.2's cuDNN fused attention takes heads d_k wide: a multiple of 8, at most
  `widest` (256 on Hopper and later GPUs, 128 before; jax/_src/cudnn/fused_attention_stablehlo.py)."""
  return d_k % 8 == 0 and d_k <= widest


def validate(cfg: ModelConfig) -> None:
  """Raises ValueError naming the offending `model.*` key."""
  for key in ("vocab_size", "d_model", "d_ff", "num_heads", "d_k", "d_v", "max_length"):
    value = getattr(cfg, key)
    if not sections.is_int(value) or value < 1:
      _fail(key, "a positive integer", value)
  for key in ("num_encoder_layers", "num_decoder_layers"):
    value = getattr(cfg, key)
    if not sections.is_int(value) or value < 0:
      _fail(key, "a non-negative integer", value)
  for key, allowed in (("architecture", ARCHITECTURES), ("norm", NORMS), ("norm_kind", NORM_KINDS),
                       ("positions", POSITIONS),
                       ("ffn", FFNS), ("gelu", GELUS), ("attention_impl", ATTENTION_IMPLS), ("dtype", DTYPES),
                       ("remat", REMAT), ("layer_norm_grad", LAYER_NORM_GRADS),
                       ("matmul_precision", MATMUL_PRECISIONS)):
    if getattr(cfg, key) not in allowed:
      _fail(key, f"one of {allowed}", getattr(cfg, key))
  if cfg.num_kv_heads is not None:
    if not sections.is_int(cfg.num_kv_heads) or cfg.num_kv_heads < 1:
      _fail("num_kv_heads", "None or a positive integer", cfg.num_kv_heads)
    if cfg.num_heads % cfg.num_kv_heads:
      _fail("num_kv_heads", f"a divisor of model.num_heads={cfg.num_heads}", cfg.num_kv_heads)
  for key in ("dropout_rate", "attention_dropout_rate", "ffn_dropout_rate"):
    value = getattr(cfg, key)
    if not sections.is_number(value) or not 0.0 <= value < 1.0:
      _fail(key, "a probability in [0, 1)", value)
  if cfg.positions == "sinusoidal" and cfg.d_model % 2:
    _fail("d_model", "an even number with sinusoidal positions", cfg.d_model)
  if cfg.positions == "rope" and cfg.d_k % 2:
    _fail("d_k", "an even number with rope positions", cfg.d_k)
  if cfg.attention_impl in ("xla", "cudnn"):
    if cfg.d_k != cfg.d_v:
      _fail("attention_impl", "'auto' or 'einsum' when model.d_k != model.d_v "
            "(jax.nn.dot_product_attention needs equal key and value widths)", cfg.attention_impl)
    if cfg.attention_dropout_rate:
      _fail("attention_impl", "'auto' or 'einsum' with attention dropout "
            "(jax.nn.dot_product_attention has no dropout)", cfg.attention_impl)
  if cfg.attention_impl == "cudnn" and cfg.dtype != "bfloat16":
    _fail("attention_impl", "'auto', 'xla' or 'einsum' unless model.dtype='bfloat16' (cuDNN's fused "
          f"attention takes no {cfg.dtype})", cfg.attention_impl)
  if cfg.vocab_size < 3:
    _fail("vocab_size", "at least 3 (pad 0, end 1 and a word)", cfg.vocab_size)
  if cfg.attention_impl == "cudnn" and not cudnn_head_width(cfg.d_k):
    _fail("attention_impl", "'auto', 'xla' or 'einsum' when model.d_k is not a multiple of 8 up "
          "to 256 (cuDNN's fused attention takes no other head width)", cfg.attention_impl)
  for key in ("norm_epsilon", "rope_base"):
    if not sections.is_number(getattr(cfg, key)) or getattr(cfg, key) <= 0:
      _fail(key, "a positive finite number", getattr(cfg, key))
  for key in ("relative_buckets", "relative_max_distance"):
    if not sections.is_int(getattr(cfg, key)):
      _fail(key, "an integer", getattr(cfg, key))
  for key in ("tie_embeddings", "share_embeddings", "use_bias", "embedding_norm", "mlm_head",
              "scan_layers"):
    if not isinstance(getattr(cfg, key), bool):
      _fail(key, "True or False", getattr(cfg, key))
  if not sections.is_int(cfg.token_types) or cfg.token_types < 0:
    _fail("token_types", "a non-negative integer (0: no token-type embeddings)", cfg.token_types)
  if cfg.share_embeddings and cfg.tie_embeddings:
    _fail("share_embeddings", "False with model.tie_embeddings=True (tied embeddings are one table "
          "already; untie them to share the inputs' alone)", cfg.share_embeddings)
  if cfg.share_embeddings and cfg.architecture != "encoder_decoder":
    _fail("share_embeddings", "False unless model.architecture='encoder_decoder' (one stack has no "
          "other stack to share its embeddings with)", cfg.share_embeddings)
  if cfg.token_types and cfg.architecture != "encoder_only":
    _fail("token_types", "0 unless model.architecture='encoder_only' (BERT's token types mark its "
          "input's segments)", cfg.token_types)
  if cfg.mlm_head and cfg.architecture != "encoder_only":
    _fail("mlm_head", "False unless model.architecture='encoder_only' (BERT's masked-LM head)",
          cfg.mlm_head)
  if cfg.norm_kind == "rms" and cfg.layer_norm_grad == "written":
    _fail("layer_norm_grad", "'auto' or 'autodiff' with model.norm_kind='rms' (the written "
          "backward pass is LayerNorm's; RMS norm's is JAX's derivative)", cfg.layer_norm_grad)
  # positions.relative_buckets divides by log(max_distance / exact), exact = buckets // 2 (one
  # direction) or buckets // 4 (both): it must be >= 1 and below max_distance.
  if cfg.relative_buckets < 4 or cfg.relative_max_distance <= cfg.relative_buckets // 2:
    _fail("relative_buckets", "at least 4 and less than 2 * model.relative_max_distance",
          cfg.relative_buckets)
  if cfg.architecture == "encoder_decoder" and not (cfg.num_encoder_layers and cfg.num_decoder_layers):
    _fail("num_encoder_layers", "encoder and decoder layers both > 0 for encoder_decoder",
          (cfg.num_encoder_layers, cfg.num_decoder_layers))
  if cfg.architecture == "decoder_only" and not cfg.num_decoder_layers:
    _fail("num_decoder_layers", "> 0 for decoder_only", cfg.num_decoder_layers)
  if cfg.architecture == "encoder_only" and not cfg.num_encoder_layers:
    _fail("num_encoder_layers", "> 0 for encoder_only", cfg.num_encoder_layers)


def from_config(section: Mapping[str, Any] | None, **overrides) -> ModelConfig:
  """Builds a ModelConfig from the `model` section of a config (a ConfigDict or dict)."""
  values = dict(section.items()) if section is not None else {}
  values.update(overrides)
  return sections.from_mapping(ModelConfig, "model", values)
