"""Dev-set loss and perplexity: per-token sums over every dev batch, then one division.

Perplexity is exp(NLL per real target token) without label smoothing -- the figure Table 3 reports
(per word-piece); `loss` is the smoothed objective on the same tokens.
"""

from __future__ import annotations

import jax

from tfm.data import pipeline, prefetch
from tfm.train.loss import per_token
from tfm.train.sharding import batch_sharding


class DevEvaluator:
  """Holds this host's dev batches; evaluator(params) -> {loss, nll, perplexity, accuracy, tokens}."""

  def __init__(self, config, tokenizer, eval_step, mesh, rules, split: str = "dev"):
    self.eval_step = eval_step
    sharding = batch_sharding(mesh, rules)
    host_batches = pipeline.eval_batches(config.data, tokenizer, split,
                                         process_index=jax.process_index(),
                                         process_count=jax.process_count())
    self.batches = [prefetch.to_device(b, sharding) for b in host_batches]

  def __call__(self, params) -> dict[str, float]:
    totals = None
    for batch in self.batches:
      sums = self.eval_step(params, batch)
      totals = sums if totals is None else jax.tree.map(lambda a, b: a + b, totals, sums)
    return {k: float(v) for k, v in per_token(jax.device_get(totals)).items()}
