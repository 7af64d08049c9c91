"""BLEU on (a subset of) a split or evaluation set: the eval section's beam search, then sacreBLEU
and tokenized BLEU, over every pair whose source the model can take whole (tfm/decode/text.py:
every pair, unless a learned position table is too short for a source)."""

from __future__ import annotations

from tfm.data import pipeline
from tfm.data.config import DataConfig
from tfm.data.sources import DataSource
from tfm.decode.text import translate_texts
from tfm.eval.bleu import score
from tfm.eval.chrf_ter import chrf_ter


class DevBleu:
  """Holds the split's sentence pairs and one search; dev_bleu(params) -> scores.

  Built once (in the training loop), so the pairs are read and the search for each input length is
  compiled once, not at every evaluation. translate: translate(params, inputs, rng) on the mesh
  (Experiment.translate_fn); batch_size: rows per decode batch (a multiple of the batch shards);
  source: the run's DataSource (Experiment.data_source); limit: number of pairs (0 or None = all),
  the first pairs of the split, in order.
  pairs: these (source, target) texts instead of the split's (a length bucket's:
  tfm/eval/by_length.py); max_input_length: the longest source decoded (tfm/decode/text.py's
  source_limit for the search: None, every source whole, unless the positions are a learned
  table), a longer one left out of the scores (counted: sentences_dropped) or, with truncate,
  cut to it (counted: sentences_truncated). A set none of whose sources fits is refused
  (ValueError, one line) when it is built.
  """

  def __init__(self, data: DataConfig, source: DataSource | None, tokenizer, translate, *,
               batch_size: int, split: str = "dev", limit: int | None = None,
               compounds: str = "t2t", pairs: list[tuple[str, str]] | None = None,
               max_input_length: int | None = None, truncate: bool = False):
    self.data, self.tokenizer, self.translate, self.batch_size = data, tokenizer, translate, batch_size
    self.compounds = compounds
    self.max_input_length, self.truncate = max_input_length, truncate
    self.pairs = pipeline.eval_text_pairs(data, source, split) if pairs is None else list(pairs)
    if limit:
      self.pairs = self.pairs[:limit]
    if (max_input_length is not None and not truncate and self.pairs
        and all(len(tokenizer.encode(s)) > max_input_length for s, _ in self.pairs)):
      raise ValueError(f"evaluation set {split!r}: every source of its {len(self.pairs)} pairs is "
                       f"longer than the {max_input_length} pieces the learned position table "
                       "holds (model.max_length - max_extra_length); expected at least one that "
                       "fits (tfm eval --truncate cuts them)")

  def __call__(self, params, progress=None, translate=None, search_args: tuple = (),
               compiled: dict | None = None) -> dict:
    """progress: called with the sentences decoded so far (translate_texts); translate: another
    search than the one built with (tfm eval's grid of decoding settings), on the same pairs;
    search_args, compiled: translate_texts' (another search decodes as far as the one built
    with: max_input_length is the built one's).
    {'bleu': sacreBLEU, 'tokenized_bleu': the paper's tokenized BLEU, 'sacrebleu_signature',
    'compounds' (the tokenized BLEU's hyphen splitting), 'chrf', 'ter' and their signatures
    (tfm/eval/chrf_ter.py), 'sentences' (the pairs scored), 'sentences_dropped' (not
    translated: a source longer than max_input_length), 'sentences_truncated' (scored with the
    source cut), 'decode_tokens_per_s' (compilation excluded), 'decode_compile_s'}."""
    longest = self.max_input_length
    hyps, stats = translate_texts(translate or self.translate, params, self.tokenizer,
                                  [s for s, _ in self.pairs],
                                  batch_size=self.batch_size, max_input_length=longest,
                                  truncate=self.truncate, progress=progress,
                                  search_args=search_args, compiled=compiled)
    dropped = set(stats["refused"])
    kept = [i for i in range(len(self.pairs)) if i not in dropped]
    hyps = [hyps[i] for i in kept]
    references = [self.pairs[i][1] for i in kept]
    scores = score(hyps, references, self.data.target_lang, compounds=self.compounds)
    return dict(bleu=scores["sacrebleu"], tokenized_bleu=scores["tokenized_bleu"],
                sacrebleu_signature=scores["sacrebleu_signature"], compounds=self.compounds,
                **chrf_ter(hyps, references),
                sentences=len(kept), sentences_dropped=len(dropped),
                sentences_truncated=len(stats["truncated"]),
                decode_tokens_per_s=stats["tokens_per_s"],
                decode_compile_s=stats["compile_seconds"])
