"""chrF and TER beside BLEU, as sacreBLEU computes them (its defaults, reported with signatures).

- chrF (Popovic 2015): the character n-gram F-score (n <= 6, beta = 2) on detokenized text,
  higher is better; it credits a hypothesis for a word's stem where BLEU sees a miss.
- TER (Snover et al. 2006): word edits (insertions, deletions, substitutions, shifts) per
  reference word, in percent, lower is better.
Both take the hypotheses and references `tfm.eval.bleu.score` takes: detokenized, one line each.
"""

from __future__ import annotations

from typing import Any, Sequence

from sacrebleu.metrics import CHRF, TER

from tfm.eval.ngram_bleu import check_corpus


def chrf_ter(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
  """{'chrf', 'chrf_signature', 'ter', 'ter_signature'}: corpus chrF and TER (percent). Raises
  ValueError if the lists differ in length or are empty."""
  check_corpus(hypotheses, references)
  hyps, refs = list(hypotheses), [list(references)]
  chrf, ter = CHRF(), TER()
  return {"chrf": float(chrf.corpus_score(hyps, refs).score),
          "chrf_signature": str(chrf.get_signature()),
          "ter": float(ter.corpus_score(hyps, refs).score),
          "ter_signature": str(ter.get_signature())}
