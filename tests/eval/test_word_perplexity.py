"""Per-word perplexity against its definition: the texts' probability, per word, inverted."""

import math

import numpy as np
import pytest

from tfm.eval.word_perplexity import with_words, word_perplexity


def test_word_perplexity_is_the_inverse_geometric_mean_per_word():
  # Two texts, "the cat sat" and "a dog": 5 words; their pieces (EOS included) with the model's
  # probabilities of each piece given those before it.
  texts = ["the cat sat", "a dog"]
  pieces_p = [[0.2, 0.05, 0.5, 0.9], [0.1, 0.3, 0.02, 0.8]]  # 4 + 4 pieces, each ending in EOS
  words = sum(len(t.split()) for t in texts)
  probability = np.prod([p for text in pieces_p for p in text])  # of both texts, every piece
  expected = probability ** (-1.0 / words)  # perplexity per word, by its definition
  nll_sum = -sum(math.log(p) for text in pieces_p for p in text)
  assert word_perplexity(nll_sum, words) == pytest.approx(expected, rel=1e-12)
  # The same figure as the per-piece perplexity raised to pieces / words.
  pieces = sum(map(len, pieces_p))
  assert word_perplexity(nll_sum, words) == pytest.approx(
      math.exp(nll_sum / pieces) ** (pieces / words), rel=1e-12)
  figures = with_words({"perplexity": math.exp(nll_sum / pieces)}, nll_sum, words)
  assert figures["words"] == 5 and figures["word_perplexity"] == pytest.approx(expected)


def test_no_words_is_refused():
  with pytest.raises(ValueError, match="positive word count, got 0"):
    word_perplexity(1.0, 0)
