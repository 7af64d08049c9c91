"""An exported directory as a CTranslate2 model that decodes as tfm does.

GPT2LMHeadModel and LlamaForCausalLM exports convert with CTranslate2's own loaders (a Generator;
pass start tokens ["<pad>"] + the prompt's pieces and suppress_sequences=[["<pad>"]]). The rest of
this docstring is about MarianMTModel's.

CTranslate2's converter for Marian (`ct2-transformers-converter`, its MarianMTLoader) follows
Marian-NMT's convention: the decoder's first input is a zero vector rather than the start token's
embedding, and the start token (pad, the last id) is dropped from the vocabulary. Marian-NMT models
have a zero pad embedding, so for them the two agree; tfm learns its start token's embedding (pad
is the decoder's first input in training), so converted that way the first step sees another
input, and the outputs change (docs/export.md measures it). `convert` runs CTranslate2's own
converter with the loader of Marian's architecture, BART's, which is that loader less those two
conventions: post-LN, no embedding LayerNorm, the decoder starting from the start token's
embedding, every id kept. The result is the exported function; pass
suppress_sequences=[[PAD]] to translate_batch so that pad is never generated, as tfm never
generates it.

Needs torch, transformers and ctranslate2 (the export-check extra), imported on call.
"""

from __future__ import annotations

PAD = "<pad>"  # the start token's piece in an export's vocabulary (tfm's pad)


GENERATORS = ("GPT2LMHeadModel", "LlamaForCausalLM")  # converted by CTranslate2's own loaders


def refusal(name: str, d_k: int, d_model: int, num_heads: int) -> str | None:
  """Why an export of class `name` cannot go through --ct2 (one line), or None. CTranslate2 4.x
  converts MarianMTModel (as below), GPT2LMHeadModel and LlamaForCausalLM (its own loaders, which
  need no change: GPT-2 and Llama start from their BOS embedding, tfm's start token); it has no
  masked-LM generator, and its Llama loader takes head_dim = hidden_size / num_attention_heads
  (it passes no head_dim to its spec)."""
  if name not in GENERATORS + ("MarianMTModel",):
    return (f"--ct2: CTranslate2 converts translation and causal language models (MarianMTModel, "
            f"{', '.join(GENERATORS)}); a {name} export has no CTranslate2 counterpart")
  if name == "LlamaForCausalLM" and d_k * num_heads != d_model:
    return (f"--ct2: CTranslate2's Llama loader takes heads model.d_model / model.num_heads = "
            f"{d_model / num_heads:g} wide; this model's model.d_k is {d_k}")
  return None


def convert(export_dir: str, output_dir: str, quantization: str | None = None) -> str:
  """Converts `export_dir` (written by `tfm export`) into a CTranslate2 model at `output_dir`
  (which must not exist); quantization: CTranslate2's (int8, float16, ...), None = float32.
  A MarianMTModel goes through the start-embedding loader below; GPT-2 and Llama exports through
  CTranslate2's own. Returns output_dir."""
  try:
    # pylint: disable=import-outside-toplevel
    from ctranslate2.converters import transformers as ct2
  except ImportError as e:
    raise ValueError(f"converting to CTranslate2 needs ctranslate2, torch and transformers "
                     f"({e}): pip install -e '.[export-check]'") from None
  import json  # pylint: disable=import-outside-toplevel
  with open(f"{export_dir}/config.json", encoding="utf-8") as f:
    if json.load(f)["architectures"][0] in GENERATORS:
      return ct2.TransformersConverter(export_dir).convert(output_dir, quantization=quantization)

  class StartEmbeddingMarian(ct2.BartLoader):
    """MarianMTLoader without its zero start embedding and without dropping pad."""

    @property
    def architecture_name(self):
      return "MarianMTModel"

    def get_model_spec(self, model):
      model.config.normalize_before = False  # post-LN, as MarianMTLoader sets
      model.config.normalize_embedding = False  # no LayerNorm on the embeddings
      return super().get_model_spec(model)

    def set_config(self, config, model, tokenizer):
      config.eos_token, config.unk_token = tokenizer.eos_token, tokenizer.unk_token
      config.decoder_start_token = tokenizer.convert_ids_to_tokens(
          model.config.decoder_start_token_id)  # pad; no BOS (BART's would be None)

  loaders = ct2._MODEL_LOADERS  # pylint: disable=protected-access
  marian = loaders["MarianConfig"]
  loaders["MarianConfig"] = StartEmbeddingMarian()
  try:
    return ct2.TransformersConverter(export_dir).convert(output_dir, quantization=quantization)
  finally:
    loaders["MarianConfig"] = marian
