r"""Paper-style tokenization for tokenized BLEU: Moses tokenizer plus "##AT##" compound splitting.

PAPER.md ("How the paper's BLEU was scored"): the paper's BLEU is multi-bleu on Moses-tokenized
text with compound hyphens split as "##AT##-##AT##" (the convention of GNMT / ConvS2S /
tensor2tensor: "rich-text format" -> "rich ##AT##-##AT## text format"). Hypotheses and references
go through the same steps:

  1. Moses tokenization with sacremoses' `MosesTokenizer(lang).tokenize(line, escape=False)`,
     language-aware (nonbreaking prefixes, apostrophes for en/fr/it, ...), without Moses' -a.
     Escaping is off: Moses' XML escaping (& -> &amp;, ...) maps tokens one-to-one, so it cannot
     change BLEU.
  2. compound splitting, one of
     - "t2t" (default, the paper's): tensor2tensor's get_ende_bleu.sh applies
       `perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'` to the tokenized text; here the same
       expression, with Perl's byte-level \S (ASCII whitespace only). Matches do not overlap, so a
       character that ends one split cannot start the next: "Vitamin-D-Mangel" -> "Vitamin
       ##AT##-##AT## D-Mangel", "G-7-Staaten" -> "G ##AT##-##AT## 7-Staaten", while longer parts
       split every hyphen ("state-of-the-art" -> "state ##AT##-##AT## of ##AT##-##AT## the
       ##AT##-##AT## art"). It also splits hyphens next to punctuation ("x--y" -> "x
       ##AT##-##AT## -y").
     - "aggressive" (opt-in, more splitting than the paper): Moses' -a
       (`aggressive_dash_splits=True`) splits every hyphen between two alphanumeric characters
       into "@-@", then rewritten to "##AT##-##AT##": "Vitamin-D-Mangel" -> "Vitamin ##AT##-##AT##
       D ##AT##-##AT## Mangel"; hyphens between non-alphanumerics stay.
     - "none": Moses tokenization only.
Not done (as in the recipe the paper describes): punctuation normalisation, lowercasing.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
  from sacremoses import MosesTokenizer

ATAT = "##AT##-##AT##"
COMPOUND_MODES = ("t2t", "aggressive", "none")
_T2T_COMPOUND = re.compile(r"(\S)-(\S)", re.ASCII)


@functools.lru_cache(maxsize=None)
def _moses(lang: str) -> MosesTokenizer:
  from sacremoses import MosesTokenizer  # noqa: PLC0415 (0.3 s of regexes; configs import this module)
  return MosesTokenizer(lang=lang)


def paper_tokenize_line(line: str, lang: str, compounds: str = "t2t") -> str:
  """One detokenized line -> space-separated paper-style tokens (see the module docstring)."""
  if compounds not in COMPOUND_MODES:
    raise ValueError(f"compounds must be one of {COMPOUND_MODES}, got {compounds!r}")
  tokens = _moses(lang).tokenize(line, aggressive_dash_splits=compounds == "aggressive",
                                 escape=False, return_str=False)
  if compounds == "aggressive":
    return " ".join(ATAT if t == "@-@" else t for t in tokens)
  text = " ".join(tokens)
  return _T2T_COMPOUND.sub(rf"\1 {ATAT} \2", text) if compounds == "t2t" else text


def paper_tokenize(lines: Sequence[str], lang: str, compounds: str = "t2t") -> list[str]:
  """`paper_tokenize_line` over a corpus."""
  return [paper_tokenize_line(line, lang, compounds) for line in lines]
