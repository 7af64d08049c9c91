"""The tokenizer files of a language-model export: the run's SentencePiece model, read by
transformers' SentencePiece tokenizer, so `AutoTokenizer.from_pretrained(NEW)` gives tfm's ids.

transformers' Llama, GPT-2 and BERT tokenizers are no route to tfm's ids: GPT-2's and BERT's are
their own vocabularies (byte-level BPE, WordPiece), and LlamaTokenizer in transformers 5 rebuilds
the SentencePiece model as a `tokenizers` pipeline without SentencePiece's normaliser (NFKC,
whitespace collapsing) nor its unknown-piece handling: a text with two spaces, "ﬁ" or "1,234"
comes out as other ids. BertGenerationTokenizer is SentencePiece itself (`SentencePieceBackend`
over spiece.model, no special tokens added): its ids are SentencePiece's encode, which is tfm's
Tokenizer.encode less the EOS tfm appends. So:

- a language model (task lm) reads [0] + ids: tfm's start token, pad (id 0, "<pad>"), first,
  which the config names bos_token_id; generation ends at EOS (id 1);
- a masked language model (task mlm) reads ids + [1], tfm's rows of texts each ending in EOS;
  "<mask>" (id 3) is the mask token.

Every special token is named by its piece in the vocabulary (none is added: the tokenizer's length
is the vocabulary's), and split_special_tokens makes a text quoting "</s>" or "<pad>" go through
SentencePiece as tfm's encode does (transformers' default would cut it out as the special id).
Decoding with skip_special_tokens drops "<unk>" where tfm writes " ⁇ ".
"""

from __future__ import annotations

from tfm.export.layout import to_json

SPM_FILE = "spiece.model"  # BertGenerationTokenizer's vocab file name


def tokenizer_files(spm_model: bytes, pieces: list[str], *, max_length: int,
                    mask: bool = False) -> dict[str, bytes]:
  """spiece.model and tokenizer_config.json. pieces: the vocabulary's pieces by tfm id (0 pad,
  1 EOS, 2 unknown, 3 "<mask>" with mask); max_length: the tokenizer's model_max_length (the
  longest input the exported model takes)."""
  config = {
      "tokenizer_class": "BertGenerationTokenizer", "model_max_length": max_length,
      "bos_token": pieces[0], "pad_token": pieces[0], "eos_token": pieces[1],
      "sep_token": pieces[1], "unk_token": pieces[2], "sp_model_kwargs": {},
      "split_special_tokens": True, "clean_up_tokenization_spaces": False,
  }
  if mask:
    config["mask_token"] = pieces[3]
  return {SPM_FILE: spm_model, "tokenizer_config.json": to_json(config)}
