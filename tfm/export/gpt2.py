"""A decoder-only language model (task lm) with absolute positions as transformers' GPT2LMHeadModel.

GPT-2 (transformers' modeling_gpt2.py) is pre-LN: x = x + Attn(LayerNorm(x)), x = x + MLP(LayerNorm(x)),
a final LayerNorm `ln_f`, token and position tables added at the input, a bias on every projection,
one activation (config.activation_function) between two projections, heads n_embd / n_head wide.
Keys and what becomes of them:

  norm                 pre exports; post is refused (GPT-2 has no post-LN blocks)
  norm_kind            layer exports; rms is refused (GPT-2's norms are LayerNorms with a bias)
  norm_epsilon         layer_norm_epsilon, exactly
  positions            learned -> wpe, the trained table; sinusoidal -> wpe holding tfm's sinusoids
                       for positions 0 .. model.max_length - 1 (tfm's take any position, the export
                       model.max_length of them); rope exports to LlamaForCausalLM (llama.py), the
                       rest are refused (tfm/export/targets.py)
  ffn                  gelu -> activation_function "gelu_new" with model.gelu 'tanh' (GPT-2's own,
                       the same formula), "gelu" with 'erf'; relu -> "relu"; swiglu and gated_gelu
                       are refused (one input projection)
  num_kv_heads         None or num_heads; fewer key/value heads are refused
  d_k, d_v             must be d_model / num_heads (GPT-2's head width)
  use_bias             False exports with zero biases (the same function)
  tie_embeddings       True -> wte is the output projection (tie_word_embeddings); False -> lm_head
  embedding_norm       False exports; True is refused (GPT-2 has no norm of the embeddings)
  dropout_rate, attention_dropout_rate: resid_pdrop and embd_pdrop, attn_pdrop (off in eval);
                       ffn_dropout_rate has no GPT-2 counterpart (used only in training)

Parameters: wte = sqrt(d_model) E (tfm scales its lookup); tied, ln_f's scale and bias are divided
by sqrt(d_model) (tfm/export/layout.py). c_attn's Conv1D weight [d_model, 3 d_model] is the query,
key and value kernels side by side, each [d_model, heads * d_k] (no transpose: Conv1D multiplies
x W). Token ids are tfm's (tfm/export/spm_tokenizer.py): the input is [0] + pieces, 0 the start
token (bos_token_id, also pad_token_id), EOS 1.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tfm.export import layout
from tfm.export.spm_tokenizer import tokenizer_files
from tfm.model.config import GATED_FFNS, ModelConfig

CLASS = "GPT2LMHeadModel"


def refusals(cfg: ModelConfig) -> list[str]:
  """Why `cfg` cannot be a GPT2LMHeadModel, one line each (`config key model.x: expected ...,
  got ...`); [] when it can. The architecture and positions are targets.py's to decide."""
  out = []

  def refuse(key: str, expected: str, got) -> None:
    out.append(f"config key model.{key}: expected {expected} to export to {CLASS}, got {got!r}")

  if cfg.norm != "pre":
    refuse("norm", "'pre' (GPT-2's blocks are x + Sublayer(LayerNorm(x)), ending in a final "
           "LayerNorm)", cfg.norm)
  if cfg.norm_kind != "layer":
    refuse("norm_kind", "'layer' (GPT-2's norms are LayerNorms, with a bias)", cfg.norm_kind)
  if cfg.ffn in GATED_FFNS:
    refuse("ffn", "'gelu' or 'relu' (GPT-2's MLP has one input projection; a gated feed-forward "
           "with rope positions exports to LlamaForCausalLM)", cfg.ffn)
  if cfg.kv_heads != cfg.num_heads:
    refuse("num_kv_heads", f"None or model.num_heads={cfg.num_heads} (GPT-2 has a key and value "
           "head for every query head)", cfg.num_kv_heads)
  width = cfg.d_model / cfg.num_heads
  if cfg.d_k != width:
    refuse("d_k", f"model.d_model / model.num_heads = {width:g} (GPT-2's head width)", cfg.d_k)
  elif cfg.d_v != width:
    refuse("d_v", f"model.d_model / model.num_heads = {width:g} (GPT-2's head width)", cfg.d_v)
  if cfg.embedding_norm:
    refuse("embedding_norm", "False (GPT-2 has no norm of the embeddings)", cfg.embedding_norm)
  return out


def state_dict(params: Mapping[str, Any], cfg: ModelConfig) -> dict[str, np.ndarray]:
  """tfm parameters (host numpy, unboxed; unrolled or scanned) -> GPT2LMHeadModel's state dict
  (float32; lm_head.weight only when untied)."""
  d = cfg.d_model
  decoder = layout.unrolled(params["decoder"])
  out: dict[str, np.ndarray] = {}

  def norm(name, node, divide=1.0):
    out[f"{name}.weight"] = layout.f32(node["scale"]) / np.float32(divide)
    out[f"{name}.bias"] = layout.f32(node["bias"]) / np.float32(divide)

  def conv(name, node, in_dims, width):
    out[f"{name}.weight"], out[f"{name}.bias"] = layout.conv1d(node, in_dims), layout.bias(node, width)

  for i in range(cfg.num_decoder_layers):
    layer, name = decoder[f"layer_{i}"], f"transformer.h.{i}"
    attention = layer["self_attention"]
    parts = [attention[p] for p in ("query", "key", "value")]
    out[f"{name}.attn.c_attn.weight"] = np.concatenate([layout.conv1d(p, 1) for p in parts], 1)
    out[f"{name}.attn.c_attn.bias"] = np.concatenate([layout.bias(p, d) for p in parts])
    conv(f"{name}.attn.c_proj", attention["out"], 2, d)
    norm(f"{name}.ln_1", layer["self_attention_norm"])
    norm(f"{name}.ln_2", layer["ffn_norm"])
    conv(f"{name}.mlp.c_fc", layer["ffn"]["wi"], 1, cfg.d_ff)
    conv(f"{name}.mlp.c_proj", layer["ffn"]["wo"], 1, d)
  table = params["token_embedding" if cfg.tie_embeddings else "target_embedding"]["embedding"]
  out["transformer.wte.weight"] = layout.scaled_input(table, d)
  out["transformer.wpe.weight"] = layout.position_table(decoder.get("inputs", {}), cfg.positions,
                                                        cfg.max_length, d)
  norm("transformer.ln_f", decoder["final_norm"], np.sqrt(d) if cfg.tie_embeddings else 1.0)
  if not cfg.tie_embeddings:
    out["lm_head.weight"] = layout.f32(decoder["logits"]["kernel"]).T
  return layout.contiguous(out)


def model_config(cfg: ModelConfig) -> dict:
  """config.json: GPT2Config's fields for `cfg` (refusals checked first)."""
  return {
      "architectures": [CLASS], "model_type": "gpt2", "dtype": "float32",
      "vocab_size": cfg.vocab_size, "n_positions": cfg.max_length, "n_embd": cfg.d_model,
      "n_layer": cfg.num_decoder_layers, "n_head": cfg.num_heads, "n_inner": cfg.d_ff,
      "activation_function": layout.activation(cfg.ffn, cfg.gelu), "layer_norm_epsilon": cfg.norm_epsilon,
      "resid_pdrop": cfg.dropout_rate, "embd_pdrop": cfg.dropout_rate,
      "attn_pdrop": cfg.attention_dropout_rate, "scale_attn_weights": True,
      "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
      "tie_word_embeddings": cfg.tie_embeddings, "use_cache": True,
      "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 0,
  }


def generation_config(max_length: int) -> dict:
  """generation_config.json: start token 0, EOS 1, pad (0) never generated (tfm's generate drops
  it), at most `max_length` positions (None: no limit)."""
  config = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 0, "bad_words_ids": [[0]],
            "do_sample": False}
  if max_length is not None:
    config["max_length"] = max_length
  return config


def export_files(config, params: Mapping[str, Any], spm_model: bytes, pieces: list[str],
                 provenance: Mapping[str, Any]) -> dict[str, bytes]:
  """Every file of the export directory: config.json, generation_config.json, model.safetensors,
  the tokenizer's (spm_tokenizer.py) and tfm_export.json (`provenance`)."""
  from safetensors.numpy import save  # pylint: disable=import-outside-toplevel
  cfg = config.model
  record = {**provenance, "class": CLASS, "input_ids": "[0] + SentencePiece ids (0: the start token)",
            "wte": "sqrt(d_model) x tfm's embedding", "ln_f": (
                "tfm's final_norm / sqrt(d_model) (tied embeddings)" if cfg.tie_embeddings
                else "tfm's final_norm")}
  return {
      "config.json": layout.to_json(model_config(cfg)),
      "generation_config.json": layout.to_json(generation_config(cfg.max_length)),
      "model.safetensors": save(state_dict(params, cfg), metadata={"format": "pt"}),
      **tokenizer_files(spm_model, pieces, max_length=cfg.max_length - 1),
      "tfm_export.json": layout.to_json(record),
  }
