"""What MarianMTModel cannot hold: every model.* key of tfm/model/config.py decided once.

MarianMTModel (transformers' modeling_marian.py) is the paper's encoder-decoder: post-LN layers
(x = LayerNorm(x + Sublayer(x))), sinusoidal positions from 0 computed by the class itself, token
embeddings scaled by sqrt(d_model), multi-head attention with d_model / heads wide heads, a
two-layer feed-forward with one activation, a bias on every Linear. Keys and what becomes of them:

  architecture         encoder_decoder exports; decoder_only (task lm) and encoder_only (task
                       mlm) are no translation models: they export to transformers' language-model
                       classes instead (tfm/export/targets.py chooses)
  norm                 post exports; pre is refused (Marian has no pre-LN layers nor final norm)
  norm_kind            layer exports; rms is refused (Marian's norms are LayerNorms)
  positions            sinusoidal exports; learned is refused (the class recomputes its sinusoid
                       table at load and leaves it out of save_pretrained, so a trained table would
                       not survive), rope, alibi, relative and none are refused
  num_kv_heads         None or num_heads exports; fewer key/value heads (GQA, MQA) are refused
  d_k, d_v             must be d_model / num_heads (Marian's head width); otherwise refused
  ffn                  relu -> "relu", gelu -> "gelu_new" with model.gelu 'tanh' (the same
                       formula), "gelu" with 'erf'; swiglu and gated_gelu are refused (Marian's
                       feed-forward has one input projection)
  tie_embeddings       True -> one shared matrix (share_encoder_decoder_embeddings and
                       tie_word_embeddings); False -> three matrices, both flags False
  share_embeddings     False exports; True (one input table, the output untied) is refused: its
                       export is not written yet
  use_bias             False exports with zero biases (the same function)
  embedding_norm       False exports; True is refused (MarianMTModel has no norm of the embeddings)
  token_types, mlm_head: BERT's, encoder-only models' (refused by architecture)
  norm_epsilon         Marian's LayerNorms use 1e-5 whatever the config says: exported anyway,
                       the difference stated (docs/export.md measures it)
  vocab_size, d_model, d_ff, num_heads, num_encoder_layers, num_decoder_layers: carried over
  dropout_rate, attention_dropout_rate, ffn_dropout_rate: dropout, attention_dropout,
                       activation_dropout (used only if the model is trained further)
  max_length, rope_base, relative_buckets, relative_max_distance: unused by what exports
  dtype, attention_impl, remat, layer_norm_grad, matmul_precision, scan_layers: how tfm computes,
                       not what it computes (parameters are float32; scanned stacks are unstacked)
"""

from __future__ import annotations

from tfm.model.config import GATED_FFNS, ModelConfig


def refusals(cfg: ModelConfig) -> list[str]:
  """The reasons `cfg` cannot be a MarianMTModel, one line each in sections.fail's form
  (`config key model.x: expected ..., got ...`), in the order of the module docstring; [] when
  it can."""
  out = []

  def refuse(key: str, expected: str, got) -> None:
    out.append(f"config key model.{key}: expected {expected} to export to MarianMTModel, got {got!r}")

  if cfg.architecture != "encoder_decoder":
    kind = {"decoder_only": "a decoder-only language model (task lm) has no encoder",
            "encoder_only": "an encoder-only masked language model (task mlm) has no decoder"}
    refuse("architecture", f"'encoder_decoder' (MarianMTModel translates with an encoder and a "
           f"decoder; {kind.get(cfg.architecture, 'this stack is not one')}: tfm/export/targets.py "
           "exports it to a language-model class)", cfg.architecture)
  if cfg.norm != "post":
    refuse("norm", "'post' (MarianMTModel's layers are LayerNorm(x + Sublayer(x)))", cfg.norm)
  if cfg.norm_kind != "layer":
    refuse("norm_kind", "'layer' (MarianMTModel's norms are LayerNorms, with a bias)",
           cfg.norm_kind)
  if cfg.positions != "sinusoidal":
    why = ("MarianMTModel recomputes its sinusoid table at load and leaves it out of "
           "save_pretrained, so a trained table would not survive" if cfg.positions == "learned"
           else "MarianMTModel adds the paper's sinusoids to the embeddings, no other scheme")
    refuse("positions", f"'sinusoidal' ({why})", cfg.positions)
  if cfg.kv_heads != cfg.num_heads:
    refuse("num_kv_heads", f"None or model.num_heads={cfg.num_heads} (MarianMTModel has a key and "
           "value head for every query head)", cfg.num_kv_heads)
  width = cfg.d_model // cfg.num_heads
  if cfg.num_heads * width != cfg.d_model or cfg.d_k != width:
    refuse("d_k", f"model.d_model / model.num_heads = {cfg.d_model / cfg.num_heads:g} "
           "(MarianMTModel's head width)", cfg.d_k)
  elif cfg.d_v != width:
    refuse("d_v", f"model.d_model / model.num_heads = {width} (MarianMTModel's head width)", cfg.d_v)
  if cfg.ffn in GATED_FFNS:
    refuse("ffn", "'relu' or 'gelu' (MarianMTModel's feed-forward has one input projection)",
           cfg.ffn)
  if cfg.share_embeddings:
    refuse("share_embeddings", "False (an export of one shared input table with an untied output "
           "is not written yet)", cfg.share_embeddings)
  if cfg.embedding_norm:
    refuse("embedding_norm", "False (MarianMTModel has no norm of the embeddings)",
           cfg.embedding_norm)
  return out


def check_task(task, data) -> None:
  """Raises ValueError (one line naming config key task) for an encoder-decoder whose task does not
  translate (span): MarianMTModel is a translation model, and such a vocabulary's top ids are
  sentinels (task.sentinels) MarianTokenizer's SentencePiece model lacks. task: the run's
  tfm/tasks object; data: its data section."""
  if task.architecture == "encoder_decoder" and not task.translates:
    raise ValueError(f"config key task: expected 'translate' to export to MarianMTModel (a "
                     f"translation model), got {task.name!r}: its model does not translate, and "
                     f"its vocabulary's top {task.sentinels(data)} ids are sentinels "
                     "MarianTokenizer's SentencePiece model lacks")


def check(cfg: ModelConfig) -> None:
  """Raises ValueError with the first refusal's line, and how many more there are."""
  found = refusals(cfg)
  if found:
    more = f" (and {len(found) - 1} more: {'; '.join(found[1:])})" if found[1:] else ""
    raise ValueError(found[0] + more)
