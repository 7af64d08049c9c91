"""BLEU as the paper reports it and as sacreBLEU reports it (PAPER.md, "How the paper's BLEU was
scored": the paper's tokenized BLEU reads roughly 0.7 to 1.5 points above sacreBLEU; a faithful
reproduction reports both).

- sacreBLEU (Post 2018): corpus BLEU on *detokenized* hypotheses against raw references with
  sacrebleu's own tokenizer ('13a' by default, 'intl' for Unicode punctuation/symbols), exp
  smoothing (sacrebleu's default, only matters when an n-gram order has no match), reported with
  its signature string (e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0").
- tokenized BLEU (the paper's number): both sides Moses-tokenized with tensor2tensor's
  "##AT##-##AT##" compound splitting (`tfm.eval.paper_tokenize`, compounds='t2t'), then multi-bleu.perl-style BLEU (`tfm.eval.ngram_bleu`):
  case-sensitive, 4-gram, brevity penalty, no smoothing.
Hypotheses must be detokenized text (the subword vocabulary decoded back to strings), one line per
sentence, in the order of the references. Where sacremoses (the Moses tokenizer) is not installed,
as on a GPU node with a preinstalled Python (docs/gpu.md), the tokenized BLEU's figures are NaN and
one warning says so; sacreBLEU needs only sacrebleu.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from typing import Any, Sequence

from sacrebleu.metrics import BLEU

from tfm.eval.ngram_bleu import check_corpus, tokenized_corpus_bleu
from tfm.eval.paper_tokenize import paper_tokenize

NAN = float("nan")


def sacrebleu_score(hypotheses: Sequence[str], references: Sequence[str], *, tokenize: str = "13a",
                    lowercase: bool = False) -> dict[str, Any]:
  """sacreBLEU corpus score: {'score', 'signature', 'brevity_penalty', 'precisions' (percent,
  orders 1-4), 'hyp_len', 'ref_len'}.

  tokenize: any sacrebleu BLEU tokenizer ('13a' = mteval-v13a, 'intl', ...).
  """
  check_corpus(hypotheses, references)
  metric = BLEU(tokenize=tokenize, lowercase=lowercase)
  result = metric.corpus_score(list(hypotheses), [list(references)])
  return {
      "score": float(result.score),
      "signature": str(metric.get_signature()),
      "brevity_penalty": float(result.bp),
      "precisions": [float(p) for p in result.precisions],
      "hyp_len": int(result.sys_len),
      "ref_len": int(result.ref_len),
  }


def score(hypotheses: Sequence[str], references: Sequence[str], target_lang: str, *,
          sacrebleu_tokenize: str = "13a", compounds: str = "t2t") -> dict[str, Any]:
  """Both BLEU scores of detokenized hypotheses against references in target_lang ('de', 'fr', ...).

  Returns a dict (BLEU values and precisions in percent):
    sacrebleu, sacrebleu_signature, sacrebleu_bp, sacrebleu_precisions,
    tokenized_bleu, tokenized_bp, tokenized_precisions, tokenized_hyp_len, tokenized_ref_len,
    tokenized_ratio, compounds, num_sentences.
  compounds: the "##AT##" splitting of the tokenized score ('t2t', the paper's; 'aggressive' or
  'none', each named in the result; see
  `tfm.eval.paper_tokenize`). Raises ValueError if the lists differ in length or are empty.
  """
  check_corpus(hypotheses, references)
  sacre = sacrebleu_score(hypotheses, references, tokenize=sacrebleu_tokenize)
  if _moses_installed():
    tok = tokenized_corpus_bleu(paper_tokenize(hypotheses, target_lang, compounds),
                                paper_tokenize(references, target_lang, compounds))
    tokenized = {"tokenized_bleu": tok.bleu, "tokenized_bp": tok.brevity_penalty,
                 "tokenized_precisions": list(tok.precisions), "tokenized_hyp_len": tok.hyp_len,
                 "tokenized_ref_len": tok.ref_len, "tokenized_ratio": tok.ratio}
  else:
    tokenized = {"tokenized_bleu": NAN, "tokenized_bp": NAN, "tokenized_precisions": [NAN] * 4,
                 "tokenized_hyp_len": 0, "tokenized_ref_len": 0, "tokenized_ratio": NAN}
  return {
      "sacrebleu": sacre["score"],
      "sacrebleu_signature": sacre["signature"],
      "sacrebleu_bp": sacre["brevity_penalty"],
      "sacrebleu_precisions": sacre["precisions"],
      **tokenized,
      "compounds": compounds,
      "num_sentences": len(hypotheses),
  }


@functools.lru_cache(maxsize=None)
def _moses_installed() -> bool:
  """Whether sacremoses can be imported; says once when it cannot."""
  if importlib.util.find_spec("sacremoses") is not None:
    return True
  logging.getLogger(__name__).warning(
      "sacremoses is not installed: the paper's tokenized BLEU is NaN, sacreBLEU is computed")
  return False
