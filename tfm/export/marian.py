"""A trained encoder-decoder as Hugging Face transformers' MarianMTModel: the files and the mapping.

The export is the same function as the tfm model, written in Marian's layout:

- d_model order. tfm interleaves its sinusoids (column 2i holds sin(pos w_i), column 2i+1
  cos(pos w_i), w_i = 10000^(-2i/d), tfm/model/positions.py); MarianSinusoidalPositionalEmbedding
  puts every sine first and every cosine after (column i sin(pos w_i), column d/2 + i
  cos(pos w_i)). So the residual stream is permuted: Marian's feature m is tfm's feature
  D[m], D = [0, 2, 4, ..., d-2, 1, 3, ..., d-1] (`d_model_order`). Every weight axis of width
  d_model is indexed by D: embeddings' columns, LayerNorm scales and biases (mean and variance
  do not depend on the order), the input columns of the query, key, value and first
  feed-forward projections, the output rows (and biases) of the attention output and second
  feed-forward projections. Logits x E^T are sums over d_model, unchanged by the order.
- Token ids. Marian's converters (CTranslate2's among them) take the last id for <pad> (the
  decoder's start token) and drop it; tfm's pad is 0, EOS 1, UNK 2. The export moves pad to the
  end: Marian id j holds tfm id V[j], V = [1, 2, ..., vocab_size - 1, 0] (`id_order`), so EOS is
  0, UNK 1 and pad vocab_size - 1, Opus-MT's layout. vocab.json names every Marian id by its
  SentencePiece piece (MarianTokenizer maps pieces to ids through it); embedding rows (and an
  untied output projection's columns) are reordered by V.
- Biases. Every Marian Linear has one: tfm's model.use_bias=False exports zeros; the logits bias
  `final_logits_bias` is zeros (tfm has none).
- Embeddings are scaled by sqrt(d_model) in both (scale_embedding=True); tied embeddings are one
  matrix in both (share_encoder_decoder_embeddings, tie_word_embeddings); untied ones are the
  source embedding, the target embedding and the output projection, both flags False.
- Decoding starts from pad in both (decoder_start_token_id = pad) and never emits pad
  (generation_config's bad_words_ids: tfm's search drops pad's candidates without renormalising,
  as transformers' bad-words processor does).
- LayerNorm epsilon: Marian's is 1e-5, fixed in its code (nn.LayerNorm's default); a tfm model
  of another model.norm_epsilon (the default is 1e-6) exports to a function that differs by that
  much (`EPSILON`; docs/export.md measures it).
- Positions from 0 in both; max_position_embeddings (the size of Marian's table, computed at load)
  covers data.max_length + eval.max_extra_length + 1 and at least model.max_length; the tokenizer's
  model_max_length is the longest input whose output, as tfm limits it, fits that table
  (`longest_input`). tfm's sinusoids take any length: only longer inputs translate differently.

Only numpy, safetensors and json here: exporting needs neither torch nor transformers.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np

from tfm.export import layout
from tfm.export.layout import unrolled as _unrolled
from tfm.model.config import ModelConfig

EPSILON = 1e-5  # MarianMTModel's LayerNorm epsilon (torch.nn.LayerNorm's default, not configurable)
UNUSED = "<tfm_unused_{}>"  # the piece name of an embedding row past the vocabulary's pieces


def d_model_order(d_model: int) -> np.ndarray:
  """D [d_model]: Marian's feature m is tfm's feature D[m] (sines first, then cosines)."""
  return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def id_order(vocab_size: int) -> np.ndarray:
  """V [vocab_size]: Marian's id j is tfm's id V[j] (pad, tfm's 0, moved to the end)."""
  return np.concatenate([np.arange(1, vocab_size), [0]])


def marian_id(tfm_id: int, vocab_size: int) -> int:
  """The inverse of `id_order`: tfm id -> Marian id."""
  return vocab_size - 1 if tfm_id == 0 else tfm_id - 1


def _linear(kernel: np.ndarray, bias: np.ndarray | None, in_dims: int, order: np.ndarray,
            permute: str) -> tuple[np.ndarray, np.ndarray]:
  """A tfm Dense kernel [*in, *out] (+ bias [*out] or None) -> torch Linear weight [OUT, IN] and
  bias [OUT] (zeros for None), the d_model axis (`permute`: 'in' or 'out') indexed by `order`."""
  ins, outs = kernel.shape[:in_dims], kernel.shape[in_dims:]
  weight = kernel.reshape(int(np.prod(ins)), int(np.prod(outs))).T
  b = np.zeros(weight.shape[0], np.float32) if bias is None else bias.reshape(-1)
  if permute == "in":
    weight = weight[:, order]
  else:
    weight, b = weight[order], b[order]
  return weight, b


def state_dict(params: Mapping[str, Any], cfg: ModelConfig) -> dict[str, np.ndarray]:
  """tfm parameters (host numpy arrays, unboxed; unrolled or scanned stacks) -> MarianMTModel's
  state dict (float32, contiguous), every name transformers loads."""
  d = d_model_order(cfg.d_model)
  v = id_order(cfg.vocab_size)
  out: dict[str, np.ndarray] = {}
  f32 = lambda x: np.asarray(x, np.float32)

  def dense(name, node, in_dims, permute):
    weight, bias = _linear(f32(node["kernel"]), None if "bias" not in node else f32(node["bias"]),
                           in_dims, d, permute)
    out[f"{name}.weight"], out[f"{name}.bias"] = weight, bias

  def attention(name, node):
    for ours, theirs in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
      dense(f"{name}.{theirs}", node[ours], 1, "in")
    dense(f"{name}.out_proj", node["out"], 2, "out")

  def norm(name, node):
    out[f"{name}.weight"], out[f"{name}.bias"] = f32(node["scale"])[d], f32(node["bias"])[d]

  def layer(name, node, cross):
    attention(f"{name}.self_attn", node["self_attention"])
    norm(f"{name}.self_attn_layer_norm", node["self_attention_norm"])
    if cross:
      attention(f"{name}.encoder_attn", node["cross_attention"])
      norm(f"{name}.encoder_attn_layer_norm", node["cross_attention_norm"])
    dense(f"{name}.fc1", node["ffn"]["wi"], 1, "in")
    dense(f"{name}.fc2", node["ffn"]["wo"], 1, "out")
    norm(f"{name}.final_layer_norm", node["ffn_norm"])

  for stack, count, cross in (("encoder", cfg.num_encoder_layers, False),
                              ("decoder", cfg.num_decoder_layers, True)):
    layers = _unrolled(params[stack])
    for i in range(count):
      layer(f"model.{stack}.layers.{i}", layers[f"layer_{i}"], cross)

  embed = lambda table: f32(table)[v][:, d]
  if cfg.tie_embeddings:
    out["model.shared.weight"] = embed(params["token_embedding"]["embedding"])
  else:
    out["model.encoder.embed_tokens.weight"] = embed(params["source_embedding"]["embedding"])
    out["model.decoder.embed_tokens.weight"] = embed(params["target_embedding"]["embedding"])
    out["lm_head.weight"] = embed(f32(params["decoder"]["logits"]["kernel"]).T)
  out["final_logits_bias"] = np.zeros((1, cfg.vocab_size), np.float32)
  return {k: np.ascontiguousarray(x, dtype=np.float32) for k, x in out.items()}


def max_positions(cfg: ModelConfig, data_max_length: int, max_extra_length: int) -> int:
  """Rows of Marian's position table: the longest input (data.max_length) plus its output limit
  (+ eval.max_extra_length, + 1 for the start token), at least model.max_length."""
  return max(cfg.max_length, data_max_length + max_extra_length + 1)


def longest_input(cfg: ModelConfig, data_max_length: int, max_extra_length: int) -> int:
  """The longest input (pieces, EOS included) the export translates as tfm does: its output of up
  to input + max_extra_length tokens, after the start token, within Marian's position table
  (max_positions) -- the tokenizer's model_max_length. tfm itself (sinusoids) takes any length;
  data.max_length, the training rows, is no limit on what it translates."""
  return max_positions(cfg, data_max_length, max_extra_length) - max_extra_length - 1


def model_config(cfg: ModelConfig, *, data_max_length: int, max_extra_length: int) -> dict:
  """config.json: MarianConfig's fields for `cfg` (its refusals checked: tfm/export/refusals.py)."""
  tied = cfg.tie_embeddings
  return {
      "architectures": ["MarianMTModel"], "model_type": "marian", "dtype": "float32",
      "vocab_size": cfg.vocab_size, "decoder_vocab_size": cfg.vocab_size,
      "max_position_embeddings": max_positions(cfg, data_max_length, max_extra_length),
      "d_model": cfg.d_model,
      "encoder_layers": cfg.num_encoder_layers, "decoder_layers": cfg.num_decoder_layers,
      "encoder_attention_heads": cfg.num_heads, "decoder_attention_heads": cfg.num_heads,
      "encoder_ffn_dim": cfg.d_ff, "decoder_ffn_dim": cfg.d_ff,
      "activation_function": layout.activation(cfg.ffn, cfg.gelu),
      "dropout": cfg.dropout_rate, "attention_dropout": cfg.attention_dropout_rate,
      "activation_dropout": cfg.ffn_dropout_rate,
      "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
      "scale_embedding": True,
      "share_encoder_decoder_embeddings": tied, "tie_word_embeddings": tied,
      "is_encoder_decoder": True, "use_cache": True,
      "pad_token_id": marian_id(0, cfg.vocab_size), "eos_token_id": marian_id(1, cfg.vocab_size),
      "decoder_start_token_id": marian_id(0, cfg.vocab_size),
      "bos_token_id": None, "forced_eos_token_id": None,
  }


def generation_config(cfg: ModelConfig, *, beam_size: int, length_penalty: float,
                      data_max_length: int, max_extra_length: int) -> dict:
  """generation_config.json: the run's eval section as transformers' generate reads it.

  max_length counts the start token: data.max_length + eval.max_extra_length + 1 is tfm's longest
  output for its longest input (tfm's limit is per input, |input| + max_extra_length, which
  generate cannot express). length_penalty is the run's alpha, but generate divides log P by
  |Y|^alpha where tfm divides by ((5 + |Y|) / 6)^alpha (docs/export.md compares the two). Beam
  search stops when no live beam can still win ("never" stops early by that bound only), as
  tfm's does."""
  pad = marian_id(0, cfg.vocab_size)
  return {
      "decoder_start_token_id": pad, "pad_token_id": pad, "eos_token_id": marian_id(1, cfg.vocab_size),
      "bad_words_ids": [[pad]], "num_beams": beam_size, "length_penalty": length_penalty,
      "early_stopping": "never" if beam_size > 1 else False,
      "max_length": data_max_length + max_extra_length + 1,
  }


def vocabulary(pieces: list[str], vocab_size: int) -> dict[str, int]:
  """vocab.json: piece -> Marian id for every Marian id. pieces: the SentencePiece model's pieces
  by tfm id; embedding rows past them (model.vocab_size above the pieces) get UNUSED names."""
  if len(pieces) > vocab_size:
    raise ValueError(f"config key model.vocab_size: expected at least the vocabulary's "
                     f"{len(pieces)} pieces, got {vocab_size}")
  names = list(pieces) + [UNUSED.format(i) for i in range(len(pieces), vocab_size)]
  if len(set(names)) != len(names):
    raise ValueError("the SentencePiece model has repeated pieces: vocab.json needs one id a piece")
  return {names[int(t)]: j for j, t in enumerate(id_order(vocab_size))}


def tokenizer_config(pieces: list[str], *, source_lang: str, target_lang: str,
                     max_length: int) -> dict:
  """tokenizer_config.json for MarianTokenizer: one shared SentencePiece model (source.spm and
  target.spm are the same file), model_max_length `max_length` (`longest_input`: inputs are cut
  there, EOS included, only when asked to truncate, and longer ones are warned about), pad, EOS
  and UNK named by the pieces of tfm ids 0, 1 and 2, no other special tokens. split_special_tokens: a text holding a special token's piece ("</s>", "<unk>",
  "<pad>") is SentencePiece's to split, as tfm's Tokenizer.encode does (transformers' default
  cuts such a text out as the special token's id before SentencePiece sees it: a verse quoting
  "</s>" would end there)."""
  return {
      "tokenizer_class": "MarianTokenizer", "source_lang": source_lang,
      "target_lang": target_lang, "model_max_length": max_length, "separate_vocabs": False,
      "pad_token": pieces[0], "eos_token": pieces[1], "unk_token": pieces[2],
      "additional_special_tokens": [], "sp_model_kwargs": {}, "split_special_tokens": True,
  }


def export_files(config, params: Mapping[str, Any], spm_model: bytes, pieces: list[str],
                 provenance: Mapping[str, Any]) -> dict[str, bytes]:
  """Every file of the export directory, name -> bytes: config.json, generation_config.json,
  model.safetensors, source.spm and target.spm (the run's SentencePiece model), vocab.json,
  tokenizer_config.json and tfm_export.json (`provenance`: which run and checkpoints, the id
  and feature orders, the epsilons). config: the run's tfm Config; params: host numpy arrays."""
  from safetensors.numpy import save  # pylint: disable=import-outside-toplevel
  cfg, data, e = config.model, config.data, config.eval
  lengths = dict(data_max_length=data.max_length, max_extra_length=e.max_extra_length)
  text = lambda value: to_json(value).encode("utf-8")
  record = {**provenance, "tfm_norm_epsilon": cfg.norm_epsilon, "marian_norm_epsilon": EPSILON,
            "marian_id_to_tfm_id": "[1, 2, ..., vocab_size - 1, 0]: pad moved to the end",
            "marian_feature_to_tfm_feature": "[0, 2, ..., d_model - 2, 1, 3, ..., d_model - 1]"}
  return {
      "config.json": text(model_config(cfg, **lengths)),
      "generation_config.json": text(generation_config(
          cfg, beam_size=e.beam_size, length_penalty=e.length_penalty, **lengths)),
      "model.safetensors": save(state_dict(params, cfg), metadata={"format": "pt"}),
      "source.spm": spm_model, "target.spm": spm_model,
      "vocab.json": text(vocabulary(pieces, cfg.vocab_size)),
      "tokenizer_config.json": text(tokenizer_config(
          pieces, source_lang=data.source_lang, target_lang=data.target_lang,
          max_length=longest_input(cfg, **lengths))),
      "tfm_export.json": text(record),
  }


def to_json(value: Any) -> str:
  return json.dumps(value, indent=2, ensure_ascii=False) + "\n"
