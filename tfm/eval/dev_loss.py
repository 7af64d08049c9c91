"""Dev-set loss and perplexity: per-token sums over every dev batch, then one division.

Perplexity is exp(NLL per real target token) without label smoothing -- the figure Table 3 reports
(per word-piece); `loss` is the smoothed objective on the same tokens.
"""

from __future__ import annotations

import jax

from tfm.data import pipeline, prefetch
from tfm.data.config import DataConfig
from tfm.data.sources import DataSource
from tfm.train.loss import per_token


class DevLoss:
  """Holds this host's batches of a split or evaluation set (data.eval_sets: DataSource.open) on
  the devices; dev_loss(params) -> {loss, nll, perplexity, accuracy, tokens}.

  source: the run's DataSource (Experiment.data_source); eval_step: params, batch -> loss sums (Experiment.eval_step); sharding: the batch sharding;
  row_multiple: the batch shards (Experiment.batch_shards), which every batch's rows must split over.
  """

  def __init__(self, data: DataConfig, source: DataSource, tokenizer, eval_step, sharding,
               split: str = "dev", row_multiple: int = 1):
    self.eval_step = eval_step
    host_batches = pipeline.eval_batches(data, source, tokenizer, split,
                                         process_index=jax.process_index(),
                                         process_count=jax.process_count(),
                                         row_multiple=row_multiple)
    self.batches = [prefetch.to_device(b, sharding) for b in host_batches]

  def __call__(self, params) -> dict[str, float]:
    return loss_over(self.eval_step, params, self.batches)


def loss_over(eval_step, params, batches) -> dict[str, float]:
  """{loss, nll, perplexity, accuracy, tokens} of device `batches`: eval_step's per-token sums
  added over every batch, then one division (also tfm/eval/by_length.py's, a bucket at a time)."""
  totals = None
  for batch in batches:
    sums = eval_step(params, batch)
    totals = sums if totals is None else jax.tree.map(lambda a, b: a + b, totals, sums)
  return {k: float(v) for k, v in per_token(jax.device_get(totals)).items()}
