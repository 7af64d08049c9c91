"""Dev perplexity and BLEU by source length: does a model translate sentences longer than any it
trained on? (Section 3.5 of the paper chose sinusoids because they "may allow the model to
extrapolate to sequence lengths longer than the ones encountered during training".)

The split is cut into buckets by source length (tfm/data/length_buckets.py); each bucket gets the
figures of the whole split's evaluation: perplexity per target token without smoothing (as
tfm/eval/dev_loss.py), and beam search with the eval section's settings scored by sacreBLEU and the
paper's tokenized BLEU (as tfm/eval/dev_bleu.py), over every pair of the bucket.

A model with a learned position table (model.positions='learned') has no position past
model.max_length - 1: a bucket whose rows are longer gets no perplexity, and one whose sources plus
the decode's max_extra_length tokens exceed the table gets no BLEU; its entry says so ("note")
instead of reading positions the table does not have. Every other encoding computes positions of
any length.
"""

from __future__ import annotations

import jax

from tfm.data import prefetch
from tfm.data.length_buckets import split_by_length
from tfm.eval.dev_bleu import DevBleu
from tfm.eval.dev_loss import loss_over


class ByLength:
  """Holds a split's buckets; by_length(params) -> one dict per bucket (see __call__).

  eval_step, sharding, row_multiple: as tfm/eval/dev_loss.py's DevLoss; translate, batch_size,
  compounds: as tfm/eval/dev_bleu.py's DevBleu. max_extra_length: the one `translate` decodes
  with (tfm eval's grid point; default eval.max_extra_length), which decides whether a bucket's
  decodes fit the learned position table (model.max_length; None for encodings without one).
  """

  def __init__(self, config, source, tokenizer, eval_step, sharding, translate, *, edges,
               batch_size: int, split: str = "dev", row_multiple: int = 1,
               max_extra_length: int | None = None):
    data, model = config.data, config.model
    self.eval_step, self.sharding, self.translate = eval_step, sharding, translate
    self.tokenizer, self.batch_size, self.data = tokenizer, batch_size, data
    self.compounds = config.eval.compounds
    self.extra = config.eval.max_extra_length if max_extra_length is None else max_extra_length
    self.table = model.max_length if model.positions == "learned" else None
    self.buckets, self.beyond = split_by_length(
        data, source, tokenizer, split, edges, process_index=jax.process_index(),
        process_count=jax.process_count(), row_multiple=row_multiple)

  def _loss(self, params, bucket) -> dict:
    values = loss_over(self.eval_step, params,
                       [prefetch.to_device(b, self.sharding) for b in bucket.batches])
    return dict(perplexity=values["perplexity"], nll=values["nll"],
                target_tokens=int(values["tokens"]))

  def __call__(self, params, progress=None) -> list[dict]:
    """One dict per bucket: bucket ('33-64'), min_length, max_length (source pieces, EOS
    included), sentences, and, where the model allows, perplexity, nll, target_tokens (dev
    perplexity's), bleu, tokenized_bleu; a note where it does not. progress: called with the
    sentences decoded so far, over all buckets."""
    out, done = [], 0
    for bucket in self.buckets:
      entry = dict(bucket=bucket.label, min_length=bucket.lo + 1, max_length=bucket.hi,
                   sentences=len(bucket.pairs))
      notes = []
      if not bucket.pairs:
        out.append(entry)
        continue
      if self.table is not None and bucket.length > self.table:
        notes.append(f"no perplexity: rows of {bucket.length} pieces need positions past the "
                     f"learned table's {self.table} (model.max_length)")
      else:
        entry.update(self._loss(params, bucket))
      if self.table is not None and bucket.hi + self.extra > self.table:
        notes.append(f"no BLEU: sources of up to {bucket.hi} pieces decode up to "
                     f"{bucket.hi + self.extra} positions, past the learned table's {self.table} "
                     "(model.max_length)")
      else:
        count = (lambda n, done=done: progress(done + n)) if progress else None
        scores = DevBleu(self.data, None, self.tokenizer, self.translate,
                         batch_size=self.batch_size, compounds=self.compounds,
                         pairs=bucket.pairs, max_input_length=bucket.hi)(params, progress=count)
        entry.update(bleu=scores["bleu"], tokenized_bleu=scores["tokenized_bleu"])
      done += len(bucket.pairs)
      if notes:
        entry["note"] = "; ".join(notes)
      out.append(entry)
    return out
