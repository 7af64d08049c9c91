"""BLEU on (a subset of) the dev split during training: beam search with the config's eval settings."""

from __future__ import annotations

from tfm.data import pipeline
from tfm.decode.text import translate_texts
from tfm.eval.bleu import score


def dev_bleu(config, tokenizer, model, params, split: str = "dev", limit: int | None = None) -> dict:
  """{'bleu': sacreBLEU, 'tokenized_bleu': the paper's tokenized BLEU, 'sacrebleu_signature',
  'sentences', 'decode_tokens_per_s' (compilation excluded), 'decode_compile_s'}.

  limit: number of pairs (default eval.bleu_examples); the first pairs of the split, in order.
  """
  pairs = pipeline.eval_text_pairs(config.data, split)
  limit = limit if limit is not None else config.eval.get("bleu_examples", None)
  if limit:
    pairs = pairs[:limit]
  e = config.eval
  hyps, stats = translate_texts(model, params, tokenizer, [s for s, _ in pairs],
                                beam_size=e.beam_size, alpha=e.length_penalty,
                                max_extra_length=e.max_extra_length, batch_size=e.batch_size,
                                max_input_length=config.data.max_length)
  scores = score(hyps, [t for _, t in pairs], config.data.target_lang)
  return dict(bleu=scores["sacrebleu"], tokenized_bleu=scores["tokenized_bleu"],
              sacrebleu_signature=scores["sacrebleu_signature"], sentences=len(pairs),
              decode_tokens_per_s=stats["tokens_per_s"], decode_compile_s=stats["compile_seconds"])
