"""A decoder-only language model (task lm) with rotary positions as transformers' LlamaForCausalLM.

Llama (transformers' modeling_llama.py) is pre-norm with RMS norms (x = x + Attn(RMSNorm(x)),
x = x + MLP(RMSNorm(x)), a final RMSNorm `norm`), rotary positions on queries and keys, the SwiGLU
feed-forward down(silu(gate(x)) * up(x)), grouped key/value heads, no biases. Keys and what becomes
of them:

  norm                 pre exports; post is refused
  norm_kind            rms exports (RMSNorm: x rsqrt(mean(x^2) + eps) scale, tfm's rms_norm);
                       layer is refused
  norm_epsilon         rms_norm_eps, exactly
  positions            rope exports: rope_parameters {rope_type: default, rope_theta:
                       model.rope_base}. tfm's apply_rope pairs feature j with j + d_k/2 and turns
                       the pair by pos base^(-2j/d_k) (tfm/model/positions.py), which is Llama's
                       rotate_half on [first half, second half] with the same frequencies: the q
                       and k projections export unpermuted (tests/export/test_lm_exports.py checks
                       the two formulas against each other)
  ffn                  swiglu exports: gate_proj = wi_gate (through silu), up_proj = wi,
                       down_proj = wo; relu, gelu, gated_gelu are refused
  num_kv_heads         any divisor of num_heads: num_key_value_heads (tfm's query head i reads key
                       head i // (num_heads / kv_heads), as Llama's repeat_kv)
  d_k, d_v             head_dim = d_k; d_v must equal it
  use_bias             False exports; True is refused (attention_bias and mlp_bias would add
                       biases to q, k, v, o and to the three MLP projections at once, which tfm has;
                       the export is not written)
  tie_embeddings       True -> embed_tokens is the output projection; False -> lm_head
  embedding_norm       False exports; True is refused
  max_length           max_position_embeddings (generation's default limit; rope takes any position)
  dropout_rate         no Llama counterpart (Llama has only attention_dropout); used only in training

Parameters: embed_tokens = sqrt(d_model) E; tied, the final norm's scale is divided by
sqrt(d_model) (tfm/export/layout.py). Token ids as GPT-2's export (gpt2.py).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tfm.export import layout
from tfm.export.gpt2 import generation_config
from tfm.export.spm_tokenizer import tokenizer_files
from tfm.model.config import ModelConfig

CLASS = "LlamaForCausalLM"


def refusals(cfg: ModelConfig) -> list[str]:
  """Why `cfg` cannot be a LlamaForCausalLM, one line each; [] when it can."""
  out = []

  def refuse(key: str, expected: str, got) -> None:
    out.append(f"config key model.{key}: expected {expected} to export to {CLASS}, got {got!r}")

  if cfg.norm != "pre":
    refuse("norm", "'pre' (Llama's blocks are x + Sublayer(RMSNorm(x)), ending in a final norm)",
           cfg.norm)
  if cfg.norm_kind != "rms":
    refuse("norm_kind", "'rms' (Llama's norms are RMS norms, a scale and no bias)", cfg.norm_kind)
  if cfg.ffn != "swiglu":
    refuse("ffn", "'swiglu' (Llama's MLP is down(silu(gate(x)) * up(x)))", cfg.ffn)
  if cfg.use_bias:
    refuse("use_bias", "False (Llama's projections have no biases)", cfg.use_bias)
  if cfg.d_v != cfg.d_k:
    refuse("d_v", f"model.d_k={cfg.d_k} (Llama's values are head_dim wide, as its keys)", cfg.d_v)
  if cfg.embedding_norm:
    refuse("embedding_norm", "False (Llama has no norm of the embeddings)", cfg.embedding_norm)
  return out


def state_dict(params: Mapping[str, Any], cfg: ModelConfig) -> dict[str, np.ndarray]:
  """tfm parameters (host numpy, unboxed; unrolled or scanned) -> LlamaForCausalLM's state dict
  (float32; lm_head.weight only when untied)."""
  d = cfg.d_model
  decoder = layout.unrolled(params["decoder"])
  out: dict[str, np.ndarray] = {}
  for i in range(cfg.num_decoder_layers):
    layer, name = decoder[f"layer_{i}"], f"model.layers.{i}"
    attention, ffn = layer["self_attention"], layer["ffn"]
    for ours, theirs in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
      out[f"{name}.self_attn.{theirs}.weight"] = layout.linear(attention[ours], 1)
    out[f"{name}.self_attn.o_proj.weight"] = layout.linear(attention["out"], 2)
    for ours, theirs in (("wi_gate", "gate_proj"), ("wi", "up_proj"), ("wo", "down_proj")):
      out[f"{name}.mlp.{theirs}.weight"] = layout.linear(ffn[ours], 1)
    out[f"{name}.input_layernorm.weight"] = layout.f32(layer["self_attention_norm"]["scale"])
    out[f"{name}.post_attention_layernorm.weight"] = layout.f32(layer["ffn_norm"]["scale"])
  table = params["token_embedding" if cfg.tie_embeddings else "target_embedding"]["embedding"]
  out["model.embed_tokens.weight"] = layout.scaled_input(table, d)
  divide = np.float32(np.sqrt(d)) if cfg.tie_embeddings else np.float32(1.0)
  out["model.norm.weight"] = layout.f32(decoder["final_norm"]["scale"]) / divide
  if not cfg.tie_embeddings:
    out["lm_head.weight"] = layout.f32(decoder["logits"]["kernel"]).T
  return layout.contiguous(out)


def model_config(cfg: ModelConfig) -> dict:
  """config.json: LlamaConfig's fields for `cfg` (refusals checked first)."""
  return {
      "architectures": [CLASS], "model_type": "llama", "dtype": "float32",
      "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model, "intermediate_size": cfg.d_ff,
      "num_hidden_layers": cfg.num_decoder_layers, "num_attention_heads": cfg.num_heads,
      "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.d_k, "hidden_act": "silu",
      "max_position_embeddings": cfg.max_length, "rms_norm_eps": cfg.norm_epsilon,
      "rope_parameters": {"rope_type": "default", "rope_theta": float(cfg.rope_base)},
      "attention_bias": False, "mlp_bias": False, "attention_dropout": cfg.attention_dropout_rate,
      "tie_word_embeddings": cfg.tie_embeddings, "use_cache": True, "pretraining_tp": 1,
      "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 0,
  }


def export_files(config, params: Mapping[str, Any], spm_model: bytes, pieces: list[str],
                 provenance: Mapping[str, Any]) -> dict[str, bytes]:
  """Every file of the export directory, as gpt2.export_files."""
  from safetensors.numpy import save  # pylint: disable=import-outside-toplevel
  cfg = config.model
  record = {**provenance, "class": CLASS, "input_ids": "[0] + SentencePiece ids (0: the start token)",
            "embed_tokens": "sqrt(d_model) x tfm's embedding", "norm": (
                "tfm's final_norm / sqrt(d_model) (tied embeddings)" if cfg.tie_embeddings
                else "tfm's final_norm"),
            "rope": "tfm's half-split pairs are Llama's rotate_half: q and k unpermuted"}
  return {
      "config.json": layout.to_json(model_config(cfg)),
      "generation_config.json": layout.to_json(generation_config(None)),
      "model.safetensors": save(state_dict(params, cfg), metadata={"format": "pt"}),
      **tokenizer_files(spm_model, pieces, max_length=cfg.max_length - 1),
      "tfm_export.json": layout.to_json(record),
  }
