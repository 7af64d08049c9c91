"""BLEU: hand-computed examples, agreement with sacreBLEU, paper-style tokenization."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sacrebleu
from sacrebleu.metrics import BLEU

from tfm.eval import bleu, ngram_bleu, paper_tokenize

HYPS = ["the cat sat on the mat", "there is a cat on the mat"]
REFS = ["the cat is on the mat", "there is a cat on the red mat"]


def test_hand_computed_corpus_bleu():
  # Counted by hand (clipped matches / hypothesis n-grams, sentence 1 + sentence 2):
  #   1-grams 5/6 + 7/7, 2-grams 3/5 + 5/6, 3-grams 1/4 + 4/5, 4-grams 0/3 + 3/4;
  #   hypothesis 6 + 7 = 13 tokens, reference 6 + 8 = 14 tokens.
  stats = ngram_bleu.tokenized_corpus_bleu(HYPS, REFS)
  assert stats.matches == (12, 8, 5, 3) and stats.totals == (13, 11, 9, 7)
  assert (stats.hyp_len, stats.ref_len) == (13, 14)
  bp = math.exp(1 - 14 / 13)
  expect = 100 * bp * (12 / 13 * 8 / 11 * 5 / 9 * 3 / 7) ** 0.25  # = 58.549...
  assert stats.brevity_penalty == pytest.approx(bp)
  assert stats.bleu == pytest.approx(expect, rel=1e-12)
  assert stats.bleu == pytest.approx(58.549, abs=1e-3)
  np.testing.assert_allclose(stats.precisions,
                             [100 * 12 / 13, 100 * 8 / 11, 100 * 5 / 9, 100 * 3 / 7])


def test_clipping_and_zero_precision():
  # Papineni et al.'s example: 7 x "the" against a reference with two "the" -> unigram p = 2/7,
  # no bigram matches, so (unsmoothed) BLEU is 0.
  stats = ngram_bleu.tokenized_corpus_bleu(["the the the the the the the"],
                                           ["the cat is on the mat"])
  assert stats.matches[:2] == (2, 0) and stats.totals[:2] == (7, 6)
  assert stats.bleu == 0.0 and stats.brevity_penalty == 1.0
  empty = ngram_bleu.tokenized_corpus_bleu([""], ["a b c d"])
  assert empty.bleu == 0.0 and empty.brevity_penalty == 0.0


def test_perfect_match_is_100():
  refs = ["Die Katze sitzt auf der Matte .", "Ein hochmodernes E-Mail-Programm , oder ?"]
  assert ngram_bleu.tokenized_corpus_bleu(refs, refs).bleu == pytest.approx(100.0)
  s = bleu.score(refs, refs, "de")
  assert s["sacrebleu"] == pytest.approx(100.0) and s["tokenized_bleu"] == pytest.approx(100.0)
  assert s["tokenized_bp"] == 1.0 and s["tokenized_ratio"] == 1.0


def _random_corpus(seed, n=60, vocab=8):
  rng = np.random.default_rng(seed)
  words = [f"w{i}" for i in range(vocab)] + [".", ",", "Ab", "ab"]
  refs, hyps = [], []
  for _ in range(n):
    ref = list(rng.choice(words, size=rng.integers(1, 16)))
    hyp = [w for w in ref if rng.random() > 0.15]  # drop some tokens
    hyp = [rng.choice(words) if rng.random() < 0.2 else w for w in hyp]  # substitute some
    if rng.random() < 0.3:
      hyp += list(rng.choice(words, size=rng.integers(1, 4)))  # and add some
    refs.append(" ".join(ref))
    hyps.append(" ".join(hyp))
  return hyps, refs


@pytest.mark.parametrize("seed", range(4))
def test_tokenized_bleu_equals_sacrebleu_without_tokenization(seed):
  hyps, refs = _random_corpus(seed)
  ours = ngram_bleu.tokenized_corpus_bleu(hyps, refs)
  ref = BLEU(tokenize="none", smooth_method="none").corpus_score(hyps, [refs])
  assert ours.bleu > 0
  assert ours.bleu == pytest.approx(ref.score, abs=1e-9)
  np.testing.assert_allclose(ours.precisions, ref.precisions, atol=1e-9)
  assert ours.brevity_penalty == pytest.approx(ref.bp, abs=1e-12)
  assert (ours.hyp_len, ours.ref_len) == (ref.sys_len, ref.ref_len)
  assert list(ours.matches) == list(ref.counts) and list(ours.totals) == list(ref.totals)


def test_compound_splitting():
  en = "A state-of-the-art model, isn't it?"
  assert paper_tokenize.paper_tokenize_line(en, "en") == (
      "A state ##AT##-##AT## of ##AT##-##AT## the ##AT##-##AT## art model , isn 't it ?")
  assert paper_tokenize.paper_tokenize_line(en, "en", "none") == (
      "A state-of-the-art model , isn 't it ?")
  de = "Ein E-Mail-Programm für Baden-Württemberg."
  want = ("Ein E ##AT##-##AT## Mail ##AT##-##AT## Programm für Baden ##AT##-##AT## Württemberg .")
  assert paper_tokenize.paper_tokenize_line(de, "de") == want
  assert paper_tokenize.paper_tokenize_line(de, "de", "aggressive") == want
  # Where the two recipes differ (documented in tfm.eval.paper_tokenize): the default is
  # tensor2tensor's s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g, whose matches do not overlap.
  assert paper_tokenize.paper_tokenize_line("a-b-c", "en") == "a ##AT##-##AT## b-c"
  assert paper_tokenize.paper_tokenize_line("a-b-c", "en", "aggressive") == (
      "a ##AT##-##AT## b ##AT##-##AT## c")
  assert paper_tokenize.paper_tokenize_line("x--y", "en") == "x ##AT##-##AT## -y"
  assert paper_tokenize.paper_tokenize_line("x--y", "en", "aggressive") == "x--y"
  with pytest.raises(ValueError):
    paper_tokenize.paper_tokenize_line("x", "en", "bogus")


def test_german_compounds_as_tensor2tensor_split_them():
  # By hand: Moses (-l de, no -a) keeps each compound one token; the first match takes
  # "n-D" / "G-7", so "D" and "7" cannot start a second match.
  line = "Der Vitamin-D-Mangel der G-7-Staaten ist ein Baden-Württemberg-Thema."
  assert paper_tokenize.paper_tokenize_line(line, "de") == (
      "Der Vitamin ##AT##-##AT## D-Mangel der G ##AT##-##AT## 7-Staaten ist ein "
      "Baden ##AT##-##AT## Württemberg ##AT##-##AT## Thema .")
  assert paper_tokenize.paper_tokenize_line(line, "de", "aggressive") == (
      "Der Vitamin ##AT##-##AT## D ##AT##-##AT## Mangel der G ##AT##-##AT## 7 ##AT##-##AT## "
      "Staaten ist ein Baden ##AT##-##AT## Württemberg ##AT##-##AT## Thema .")
  # Non-ASCII letters are single characters to the expression, as bytes are to Perl's.
  assert paper_tokenize.paper_tokenize_line("Öl-Ära", "de") == "Öl ##AT##-##AT## Ära"
  # The recipe is named in the score, and the default is tensor2tensor's.
  assert bleu.score(["Vitamin-D-Mangel ."], ["Vitamin-D-Mangel ."], "de")["compounds"] == "t2t"


def test_compound_splitting_gives_partial_credit():
  hyp, ref = ["We built a state-of-the-art system ."], ["We built a state-of-the-science system ."]
  split = bleu.score(hyp, ref, "en")
  whole = bleu.score(hyp, ref, "en", compounds="none")
  # Split: 12 tokens, 11 matching unigrams; whole: 6 tokens, 5 matching unigrams, and every
  # 4-gram of the 6 contains the differing compound, so unsmoothed BLEU is 0.
  assert split["tokenized_precisions"][0] == pytest.approx(100 * 11 / 12)
  assert whole["tokenized_precisions"][0] == pytest.approx(100 * 5 / 6)
  assert whole["tokenized_precisions"][3] == 0 and whole["tokenized_bleu"] == 0
  assert split["tokenized_bleu"] > 50


def test_sacrebleu_wrapper_and_signature():
  hyps = ["The cat sat on the mat.", "It's a state-of-the-art model; really!"]
  refs = ["The cat is on the mat.", "It is a state-of-the-art model, really!"]
  for tok in ("13a", "intl"):
    got = bleu.sacrebleu_score(hyps, refs, tokenize=tok)
    direct = sacrebleu.corpus_bleu(hyps, [refs], tokenize=tok)
    assert got["score"] == pytest.approx(direct.score)
    assert got["brevity_penalty"] == pytest.approx(direct.bp)
    assert f"tok:{tok}" in got["signature"] and "nrefs:1" in got["signature"]
    assert f"version:{sacrebleu.__version__}" in got["signature"]
  s = bleu.score(hyps, refs, "en")
  assert s["sacrebleu"] == pytest.approx(bleu.sacrebleu_score(hyps, refs)["score"])
  assert s["sacrebleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
  assert set(s) >= {"sacrebleu", "sacrebleu_signature", "tokenized_bleu", "tokenized_bp",
                    "tokenized_precisions", "sacrebleu_precisions", "sacrebleu_bp"}
  assert 0 < s["tokenized_bleu"] < 100 and s["num_sentences"] == 2


def test_mismatched_or_bad_inputs_raise():
  with pytest.raises(ValueError, match="2 hypotheses but 3 references"):
    bleu.score(["a b", "c d"], ["a b", "c d", "e f"], "en")
  with pytest.raises(ValueError, match="1 hypotheses but 0 references"):
    ngram_bleu.tokenized_corpus_bleu(["a"], [])
  with pytest.raises(ValueError):
    bleu.sacrebleu_score(["a", "b"], ["a"])
  with pytest.raises(ValueError, match="empty"):
    bleu.score([], [], "en")
  with pytest.raises(TypeError):
    bleu.score("a b c", "a b c", "en")


def test_chrf_and_ter_are_sacrebleus_corpus_scores():
  """chrf_ter against sacrebleu's own corpus_chrf / corpus_ter on the same strings, and TER by
  hand: sentence 1 needs 1 substitution (sat -> is) over 6 reference words, sentence 2 one
  insertion (red) over 7: 2 / 14 = 14.29%."""
  from tfm.eval.chrf_ter import chrf_ter  # pylint: disable=import-outside-toplevel
  got = chrf_ter(HYPS, REFS)
  assert got["chrf"] == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score, abs=1e-12)
  assert got["ter"] == pytest.approx(sacrebleu.corpus_ter(HYPS, [REFS]).score, abs=1e-12)
  assert got["ter"] == pytest.approx(100 * 2 / 14)
  assert got["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no")
  assert chrf_ter(REFS, REFS)["ter"] == 0.0 and chrf_ter(REFS, REFS)["chrf"] == pytest.approx(100)
  with pytest.raises(ValueError):
    chrf_ter(HYPS, REFS[:1])
