"""An encoder-only masked language model (task mlm) as transformers' BertForMaskedLM (post-LN) or
RobertaPreLayerNormForMaskedLM (pre-LN).

Both (modeling_bert.py, modeling_roberta_prelayernorm.py) sum token, position and token-type
embeddings and put them through a LayerNorm, run layers with a bias on every Linear and one
activation, and end in BERT's masked-LM head: dense, activation, LayerNorm, the output projection
plus a bias. BERT's layers are post-LN, x = LayerNorm(x + Sublayer(x)); RoBERTa-PreLayerNorm's
pre-LN, x = x + Sublayer(LayerNorm(x)), with a final LayerNorm. Keys and what becomes of them:

  norm                 post -> BertForMaskedLM, pre -> RobertaPreLayerNormForMaskedLM
  norm_kind            layer exports; rms is refused
  norm_epsilon         layer_norm_eps, exactly
  embedding_norm       True exports (the embeddings' LayerNorm); False is refused (both have it)
  mlm_head             True exports (cls.predictions / lm_head); False is refused (both have it)
  token_types          type_vocab_size max(1, token_types): tfm adds row 0 at every token, as
                       both do with token_type_ids left out; with 0 the export's one row is zeros
  positions            learned exports; sinusoidal exports its sinusoids as the table (model.
                       max_length rows); rope, alibi, relative, none are refused. RoBERTa numbers
                       positions from pad_token_id + 1 = 1 (pad, tfm's 0, takes row 0), so its
                       table is tfm's shifted down a row, a zero row 0 in front
  ffn                  gelu exports; relu, swiglu, gated_gelu are refused (BERT's head's
                       activation is hidden_act too, and tfm's head is GELU)
  gelu                 hidden_act "gelu_new" with 'tanh' (the tanh approximation), "gelu" with
                       'erf' (the exact form), in the layers and in BERT's head transform alike.
                       RoBERTa-PreLayerNorm's layers read hidden_act, but its head calls the exact
                       GELU whatever the config says (`HEAD_GELU`): 'tanh' is refused there, so
                       that every export computes tfm's logits
  num_kv_heads, d_k, d_v: one key/value head a query head, d_model / num_heads wide
  use_bias             False exports with zero biases
  tie_embeddings       True -> the word embeddings are the output projection; False -> the
                       decoder weight

Parameters: word_embeddings = sqrt(d_model) E; tied, the head's LayerNorm is divided by
sqrt(d_model) (tfm/export/layout.py). Token ids are tfm's (tfm/export/spm_tokenizer.py): a text
is its pieces then EOS (1), "<mask>" is id 3, pad 0.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tfm.export import layout
from tfm.export.spm_tokenizer import tokenizer_files
from tfm.model.config import ModelConfig

BERT, ROBERTA = "BertForMaskedLM", "RobertaPreLayerNormForMaskedLM"
# The masked-LM head's GELU: BERT's is hidden_act (model.gelu's either way); RoBERTa-PreLayerNorm's
# head calls transformers' exact gelu, fixed in modeling_roberta_prelayernorm.py.
HEAD_GELU = {BERT: None, ROBERTA: "erf"}


def target_class(cfg: ModelConfig) -> str:
  return ROBERTA if cfg.norm == "pre" else BERT


def refusals(cfg: ModelConfig) -> list[str]:
  """Why `cfg` cannot be its class (`target_class`), one line each; [] when it can."""
  out, name = [], target_class(cfg)

  def refuse(key: str, expected: str, got) -> None:
    out.append(f"config key model.{key}: expected {expected} to export to {name}, got {got!r}")

  if cfg.norm_kind != "layer":
    refuse("norm_kind", "'layer' (BERT's norms are LayerNorms, with a bias)", cfg.norm_kind)
  if not cfg.embedding_norm:
    refuse("embedding_norm", "True (the class puts its summed embeddings through a LayerNorm)",
           cfg.embedding_norm)
  if not cfg.mlm_head:
    refuse("mlm_head", "True (the class ends in BERT's masked-LM head: dense, activation, "
           "LayerNorm)", cfg.mlm_head)
  if cfg.positions not in ("learned", "sinusoidal"):
    refuse("positions", "'learned' or 'sinusoidal' (the class adds a table of absolute positions)",
           cfg.positions)
  if cfg.ffn != "gelu":
    refuse("ffn", "'gelu' (one activation, hidden_act, serves the layers and the head, and tfm's "
           "head is GELU)", cfg.ffn)
  elif HEAD_GELU[name] not in (None, cfg.gelu):
    refuse("gelu", f"{HEAD_GELU[name]!r} (the class's masked-LM head calls the exact GELU "
           "whatever its config says: another form's logits would not be tfm's)", cfg.gelu)
  if cfg.kv_heads != cfg.num_heads:
    refuse("num_kv_heads", f"None or model.num_heads={cfg.num_heads} (a key and value head for "
           "every query head)", cfg.num_kv_heads)
  width = cfg.d_model / cfg.num_heads
  if cfg.d_k != width:
    refuse("d_k", f"model.d_model / model.num_heads = {width:g} (the class's head width)", cfg.d_k)
  elif cfg.d_v != width:
    refuse("d_v", f"model.d_model / model.num_heads = {width:g} (the class's head width)", cfg.d_v)
  return out


def _prefix(cfg: ModelConfig) -> str:
  return "roberta_prelayernorm" if cfg.norm == "pre" else "bert"


def state_dict(params: Mapping[str, Any], cfg: ModelConfig) -> dict[str, np.ndarray]:
  """tfm parameters (host numpy, unboxed; unrolled or scanned) -> the class's state dict (float32;
  the decoder weight only when untied)."""
  d, pre, base = cfg.d_model, cfg.norm == "pre", _prefix(cfg)
  encoder = layout.unrolled(params["encoder"])
  inputs = encoder.get("inputs", {})
  out: dict[str, np.ndarray] = {}

  def dense(name, node, in_dims, width):
    out[f"{name}.weight"], out[f"{name}.bias"] = layout.linear(node, in_dims), layout.bias(node, width)

  def norm(name, node, divide=1.0):
    out[f"{name}.weight"] = layout.f32(node["scale"]) / np.float32(divide)
    out[f"{name}.bias"] = layout.f32(node["bias"]) / np.float32(divide)

  for i in range(cfg.num_encoder_layers):
    layer, name = encoder[f"layer_{i}"], f"{base}.encoder.layer.{i}"
    attention = layer["self_attention"]
    for part in ("query", "key", "value"):
      dense(f"{name}.attention.self.{part}", attention[part], 1, d)
    dense(f"{name}.attention.output.dense", attention["out"], 2, d)
    dense(f"{name}.intermediate.dense", layer["ffn"]["wi"], 1, cfg.d_ff)
    dense(f"{name}.output.dense", layer["ffn"]["wo"], 1, d)
    if pre:
      norm(f"{name}.attention.LayerNorm", layer["self_attention_norm"])
      norm(f"{name}.intermediate.LayerNorm", layer["ffn_norm"])
    else:
      norm(f"{name}.attention.output.LayerNorm", layer["self_attention_norm"])
      norm(f"{name}.output.LayerNorm", layer["ffn_norm"])
  if pre:
    norm(f"{base}.LayerNorm", encoder["final_norm"])

  embeddings = f"{base}.embeddings"
  table = params["token_embedding" if cfg.tie_embeddings else "source_embedding"]["embedding"]
  out[f"{embeddings}.word_embeddings.weight"] = layout.scaled_input(table, d)
  positions = layout.position_table(inputs, cfg.positions, cfg.max_length, d)
  if pre:  # RoBERTa's position of token t is t + 1 (pad_token_id 0 + 1)
    positions = np.concatenate([np.zeros((1, d), np.float32), positions])
  out[f"{embeddings}.position_embeddings.weight"] = positions
  types = inputs.get("token_type_embedding")
  out[f"{embeddings}.token_type_embeddings.weight"] = (
      np.zeros((1, d), np.float32) if types is None else layout.f32(types))
  norm(f"{embeddings}.LayerNorm", inputs["embedding_norm"])

  head = params["mlm_head"]
  names = (("lm_head", "lm_head.dense", "lm_head.layer_norm") if pre else
           ("cls.predictions", "cls.predictions.transform.dense",
            "cls.predictions.transform.LayerNorm"))
  dense(names[1], head["transform"], 1, d)
  norm(names[2], head["transform_norm"], np.sqrt(d) if cfg.tie_embeddings else 1.0)
  out[f"{names[0]}.bias"] = (layout.f32(head["output_bias"]) if "output_bias" in head
                             else np.zeros(cfg.vocab_size, np.float32))
  if not cfg.tie_embeddings:
    out[f"{names[0]}.decoder.weight"] = layout.f32(params["logits"]["kernel"]).T
  return layout.contiguous(out)


def model_config(cfg: ModelConfig) -> dict:
  """config.json: BertConfig's or RobertaPreLayerNormConfig's fields for `cfg`."""
  pre = cfg.norm == "pre"
  return {
      "architectures": [target_class(cfg)],
      "model_type": "roberta-prelayernorm" if pre else "bert", "dtype": "float32",
      "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model,
      "num_hidden_layers": cfg.num_encoder_layers, "num_attention_heads": cfg.num_heads,
      "intermediate_size": cfg.d_ff, "hidden_act": layout.activation(cfg.ffn, cfg.gelu),
      "hidden_dropout_prob": cfg.dropout_rate,
      "attention_probs_dropout_prob": cfg.attention_dropout_rate,
      "max_position_embeddings": cfg.max_length + (1 if pre else 0),
      "type_vocab_size": max(1, cfg.token_types), "layer_norm_eps": cfg.norm_epsilon,
      "position_embedding_type": "absolute", "is_decoder": False, "add_cross_attention": False,
      "tie_word_embeddings": cfg.tie_embeddings, "use_cache": False,
      "pad_token_id": 0, "eos_token_id": 1, **({"bos_token_id": 0} if pre else {}),
  }


def export_files(config, params: Mapping[str, Any], spm_model: bytes, pieces: list[str],
                 provenance: Mapping[str, Any]) -> dict[str, bytes]:
  """Every file of the export directory: config.json, model.safetensors, the tokenizer's (with
  "<mask>") and tfm_export.json (`provenance`)."""
  from safetensors.numpy import save  # pylint: disable=import-outside-toplevel
  cfg = config.model
  if len(pieces) < 4 or pieces[3] != "<mask>":
    raise ValueError("the run's SentencePiece model has no <mask> at id 3: expected a task mlm "
                     "vocabulary")
  name = target_class(cfg)
  record = {**provenance, "class": name, "input_ids": "SentencePiece ids + [1] (EOS); <mask> 3",
            "word_embeddings": "sqrt(d_model) x tfm's embedding",
            "gelu": f"{cfg.gelu} (hidden_act {layout.activation(cfg.ffn, cfg.gelu)}: the layers' "
                    "and the head's)"}
  return {
      "config.json": layout.to_json(model_config(cfg)),
      "model.safetensors": save(state_dict(params, cfg), metadata={"format": "pt"}),
      **tokenizer_files(spm_model, pieces, max_length=cfg.max_length, mask=True),
      "tfm_export.json": layout.to_json(record),
  }
