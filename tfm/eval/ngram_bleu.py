"""Corpus BLEU on pre-tokenized text, as Moses' multi-bleu.perl computes it (Papineni et al. 2002).

  BLEU = 100 * BP * exp(1/4 * sum_{n=1..4} log p_n)
  p_n  = sum over sentences of clipped n-gram matches / sum of hypothesis n-grams
         (a hypothesis n-gram matches at most as often as it occurs in the reference)
  BP   = 1 if c >= r else exp(1 - r / c)      (c, r: corpus hypothesis / reference token counts)
Case-sensitive, tokens are the whitespace-separated words, one reference per sentence, no
smoothing: any p_n = 0 gives BLEU 0 (multi-bleu takes log 0 as -9999999999); an empty
hypothesis corpus has BP 0. This is the scorer of the paper's tokenized BLEU (`tfm.eval.bleu`).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Sequence


def check_corpus(hypotheses: Sequence[str], references: Sequence[str]) -> None:
  """Raises unless both are non-empty sequences of strings of the same length."""
  for name, lines in (("hypotheses", hypotheses), ("references", references)):
    if isinstance(lines, str) or not all(isinstance(x, str) for x in lines):
      raise TypeError(f"{name} must be a list of strings, one per sentence")
  if len(hypotheses) != len(references):
    raise ValueError(f"got {len(hypotheses)} hypotheses but {len(references)} references; "
                     "BLEU needs exactly one reference per hypothesis")
  if not hypotheses:
    raise ValueError("cannot score an empty corpus")


@dataclasses.dataclass(frozen=True)
class BleuStats:
  """bleu and precisions in percent; matches / totals per n-gram order 1..max_order."""

  bleu: float
  precisions: tuple[float, ...]
  brevity_penalty: float
  hyp_len: int
  ref_len: int
  matches: tuple[int, ...]
  totals: tuple[int, ...]

  @property
  def ratio(self) -> float:
    return self.hyp_len / self.ref_len if self.ref_len else 0.0


def ngrams(tokens: Sequence[str], n: int) -> collections.Counter:
  """Counts of the n-grams (tuples of n tokens) of one sentence."""
  return collections.Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def corpus_bleu_from_tokens(hyp_tokens: Sequence[Sequence[str]],
                            ref_tokens: Sequence[Sequence[str]], max_order: int = 4) -> BleuStats:
  """Corpus BLEU from token lists (see the module docstring)."""
  matches, totals = [0] * max_order, [0] * max_order
  hyp_len = ref_len = 0
  for hyp, ref in zip(hyp_tokens, ref_tokens, strict=True):
    hyp_len, ref_len = hyp_len + len(hyp), ref_len + len(ref)
    for n in range(1, max_order + 1):
      hyp_counts, ref_counts = ngrams(hyp, n), ngrams(ref, n)
      matches[n - 1] += sum(min(c, ref_counts[g]) for g, c in hyp_counts.items())
      totals[n - 1] += max(len(hyp) - n + 1, 0)
  precisions = tuple(100.0 * m / t if t else 0.0 for m, t in zip(matches, totals))
  if hyp_len == 0:
    bp = 0.0
  else:
    bp = 1.0 if hyp_len >= ref_len else math.exp(1.0 - ref_len / hyp_len)
  if min(matches) == 0:
    bleu = 0.0
  else:
    log_p = sum(math.log(m / t) for m, t in zip(matches, totals)) / max_order
    bleu = 100.0 * bp * math.exp(log_p)
  return BleuStats(bleu=bleu, precisions=precisions, brevity_penalty=bp, hyp_len=hyp_len,
                   ref_len=ref_len, matches=tuple(matches), totals=tuple(totals))


def tokenized_corpus_bleu(hypotheses: Sequence[str], references: Sequence[str],
                          max_order: int = 4) -> BleuStats:
  """multi-bleu.perl on already tokenized lines (tokens split on whitespace)."""
  check_corpus(hypotheses, references)
  return corpus_bleu_from_tokens([h.split() for h in hypotheses],
                                 [r.split() for r in references], max_order)
