"""Task 'lm': a causal language model of monolingual text (GPT: next-token prediction), a
decoder-only stack.

Its batches are the texts of data.text_key, each ending with EOS, concatenated and cut into rows
of data.max_length (tfm/data/stream.py), with zero inputs; every piece is a target, predicted from
the pieces before it in its row. Its evaluation adds per-word perplexity (exp(NLL sum / the texts'
whitespace words), tfm/eval/word_perplexity.py) and the scores at other context lengths
(eval.context_lengths); `tfm generate` continues prompts with it.
"""

from __future__ import annotations

from tfm.tasks.task import Task


class LanguageModel(Task):
  name = "lm"
  architecture = "decoder_only"
  has_inputs = False
  word_perplexity = True
  scores_context_lengths = True
  generates = True
  dev_ppl_note = ("every piece, EOS included, predicted from the pieces before it in its row of "
                  "data.max_length")

  def not_translating(self) -> str:
    return "a language model continues text: tfm generate continues prompts with it"


TASK = LanguageModel()
