"""BLEU on (a subset of) the dev split: beam search with the config's eval settings."""

from __future__ import annotations

from tfm.data import pipeline
from tfm.decode.text import translate_texts
from tfm.decode.translate import make_translate_fn
from tfm.eval.bleu import score


class DevBleu:
  """Holds the split's sentence pairs and one compiled search; dev_bleu(params) -> scores.

  Built once (in the training loop), so the pairs are read and the beam search for each input
  length is compiled once, not at every evaluation. limit: number of pairs (default
  eval.bleu_examples; 0 or None = all); the first pairs of the split, in order.
  """

  def __init__(self, config, tokenizer, model, split: str = "dev", limit: int | None = None):
    self.config, self.tokenizer, self.model = config, tokenizer, model
    self.pairs = pipeline.eval_text_pairs(config.data, split)
    limit = limit if limit is not None else config.eval.get("bleu_examples", None)
    if limit:
      self.pairs = self.pairs[:limit]
    e = config.eval
    self.translate = make_translate_fn(model, beam_size=e.beam_size, alpha=e.length_penalty,
                                       max_extra_length=e.max_extra_length,
                                       eos_id=tokenizer.eos_id)

  def __call__(self, params) -> dict:
    """{'bleu': sacreBLEU, 'tokenized_bleu': the paper's tokenized BLEU, 'sacrebleu_signature',
    'sentences', 'decode_tokens_per_s' (compilation excluded), 'decode_compile_s'}."""
    c = self.config
    hyps, stats = translate_texts(self.model, params, self.tokenizer, [s for s, _ in self.pairs],
                                  batch_size=c.eval.batch_size, max_input_length=c.data.max_length,
                                  translate_fn=self.translate)
    scores = score(hyps, [t for _, t in self.pairs], c.data.target_lang)
    return dict(bleu=scores["sacrebleu"], tokenized_bleu=scores["tokenized_bleu"],
                sacrebleu_signature=scores["sacrebleu_signature"], sentences=len(self.pairs),
                decode_tokens_per_s=stats["tokens_per_s"],
                decode_compile_s=stats["compile_seconds"])


def dev_bleu(config, tokenizer, model, params, split: str = "dev", limit: int | None = None) -> dict:
  """One evaluation: DevBleu(config, tokenizer, model, split, limit)(params)."""
  return DevBleu(config, tokenizer, model, split, limit)(params)
