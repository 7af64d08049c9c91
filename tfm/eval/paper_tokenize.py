"""Paper-style tokenization for tokenized BLEU: Moses tokenizer plus "##AT##" compound splitting.

PAPER.md ("How the paper's BLEU was scored"): the paper's BLEU is multi-bleu on Moses-tokenized
text with compound hyphens split as "##AT##-##AT##" (the convention of GNMT / ConvS2S /
tensor2tensor: "rich-text format" -> "rich ##AT##-##AT## text format"). Hypotheses and references
go through the same steps:

  1. Moses tokenization with sacremoses' `MosesTokenizer(lang).tokenize(line, escape=False)`,
     language-aware (nonbreaking prefixes, apostrophes for en/fr/it, ...). Escaping is off:
     Moses' XML escaping (& -> &amp;, ...) maps tokens one-to-one, so it cannot change BLEU.
  2. compound splitting, one of
     - "aggressive" (default): `aggressive_dash_splits=True` (Moses' -a), which splits a hyphen
       between two alphanumeric characters into the token "@-@"; every "@-@" token is then
       rewritten to "##AT##-##AT##". "state-of-the-art" -> "state ##AT##-##AT## of ##AT##-##AT##
       the ##AT##-##AT## art".
     - "t2t": the tensor2tensor get_ende_bleu.sh recipe: Moses without -a, then the regular
       expression s/(\\S)-(\\S)/\\1 ##AT##-##AT## \\2/g. It also splits hyphens next to punctuation
       ("e.g.-like", "x--y"), but, matches not overlapping, misses the second hyphen of a
       one-letter middle part ("a-b-c" -> "a ##AT##-##AT## b-c"). "aggressive" splits both of
       "a-b-c" and leaves hyphens between non-alphanumerics alone; on ordinary compounds
       ("E-Mail-Programm", "Baden-Württemberg") the two agree.
     - "none": Moses tokenization only.
Not done (as in the recipe the paper describes): punctuation normalisation, lowercasing.
"""

from __future__ import annotations

import functools
import re
from typing import Sequence

from sacremoses import MosesTokenizer

ATAT = "##AT##-##AT##"
COMPOUND_MODES = ("aggressive", "t2t", "none")
_T2T_COMPOUND = re.compile(r"(\S)-(\S)")


@functools.lru_cache(maxsize=None)
def _moses(lang: str) -> MosesTokenizer:
  return MosesTokenizer(lang=lang)


def paper_tokenize_line(line: str, lang: str, compounds: str = "aggressive") -> str:
  """One detokenized line -> space-separated paper-style tokens (see the module docstring)."""
  if compounds not in COMPOUND_MODES:
    raise ValueError(f"compounds must be one of {COMPOUND_MODES}, got {compounds!r}")
  tokens = _moses(lang).tokenize(line, aggressive_dash_splits=compounds == "aggressive",
                                 escape=False, return_str=False)
  if compounds == "aggressive":
    return " ".join(ATAT if t == "@-@" else t for t in tokens)
  text = " ".join(tokens)
  return _T2T_COMPOUND.sub(rf"\1 {ATAT} \2", text) if compounds == "t2t" else text


def paper_tokenize(lines: Sequence[str], lang: str, compounds: str = "aggressive") -> list[str]:
  """`paper_tokenize_line` over a corpus."""
  return [paper_tokenize_line(line, lang, compounds) for line in lines]
