"""Per-word perplexity of a language model: its per-token NLL re-expressed per word of the text.

A model over subword pieces assigns the whole text the log-likelihood sum_i log p(t_i | t_<i)
whatever its vocabulary; dividing by the number of words W (whitespace-separated, counted on the
raw texts) instead of the number of pieces N gives a figure comparable across tokenizers:

    word_perplexity = exp(-sum_i log p(t_i | t_<i) / W) = exp(NLL_sum / W) = perplexity^(N / W)

The sum includes each text's EOS piece (the model predicts where a text ends, which a word count
has no token for): the convention of per-word perplexities on one-sentence-a-line corpora such as
the One Billion Word benchmark, where each sentence's end counts.
"""

from __future__ import annotations

import math


def word_perplexity(nll_sum: float, words: int) -> float:
  """exp(nll_sum / words): nll_sum the summed NLL (nats) of every scored piece, EOS included;
  words the whitespace-separated words of the same texts (> 0)."""
  if words <= 0:
    raise ValueError(f"word perplexity needs a positive word count, got {words}")
  return math.exp(nll_sum / words)


def with_words(figures: dict[str, float], nll_sum: float, words: int) -> dict[str, float]:
  """A language model's dev figures (tfm/train/loss.py's per_token of the summed losses) with the
  per-word perplexity of the same texts and their word count."""
  return {**figures, "word_perplexity": word_perplexity(nll_sum, words), "words": words}
