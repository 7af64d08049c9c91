"""Dev-set loss and perplexity: per-token sums over every dev batch, then one division.

Perplexity is exp(NLL per real target token) without label smoothing -- the figure Table 3 reports
(per word-piece); `loss` is the smoothed objective on the same tokens. What a "target token" is
follows the run's task (config.task) through its batches:
  translate  every target piece of the dev pairs (EOS included)
  lm         every piece of the dev texts as one stream cut into rows (pipeline.eval_batches: each
             piece scored once, predicted from the pieces before it in its row), EOS included;
             also `word_perplexity` = exp(NLL sum / words of the same texts)
             (tfm/eval/word_perplexity.py) and `words`
  mlm        the masked positions only (the dev stream masked with a fixed seed: the same positions
             every evaluation); perplexity and accuracy are over those
"""

from __future__ import annotations

import jax
import numpy as np
from jax.experimental import multihost_utils

from tfm import tasks
from tfm.data import pipeline, prefetch
from tfm.data.config import DataConfig
from tfm.data.sources import DataSource
from tfm.eval.word_perplexity import with_words
from tfm.train.loss import per_token


class DevLoss:
  """Holds this host's batches of a split or evaluation set (data.eval_sets: DataSource.open) on
  the devices; dev_loss(params) -> {loss, nll, perplexity, accuracy, tokens} (lm: and
  word_perplexity, words).

  source: the run's DataSource (Experiment.data_source); eval_step: params, batch -> loss sums
  (Experiment.eval_step); sharding: the batch sharding; row_multiple: the batch shards
  (Experiment.batch_shards), which every batch's rows must split over. task: the run's task
  (tasks.get(config.task));
  context_length: lm and mlm's rows (None: data.max_length; `tfm eval --context_lengths` scores
  others).
  counts: what the figures cover, every host's: translate {'pairs' scored, 'dropped' (longer than
  data.max_length, data.overlong='filter'), 'truncated' (cut to it, 'truncate'), 'skipped'
  (empty or not UTF-8)}; lm and mlm {'texts' scored whole, 'skipped'}.
  """

  def __init__(self, data: DataConfig, source: DataSource, tokenizer, eval_step, sharding,
               split: str = "dev", row_multiple: int = 1, task: tasks.Task = tasks.DEFAULT,
               context_length: int | None = None):
    self.eval_step = eval_step
    counts = {}
    host_batches = pipeline.eval_batches(data, source, tokenizer, split,
                                         process_index=jax.process_index(),
                                         process_count=jax.process_count(),
                                         row_multiple=row_multiple, task=task,
                                         context_length=context_length, counts=counts)
    self.counts = _check_scored(data, split, task, host_batches, counts)
    self.batches = [prefetch.to_device(b, sharding) for b in host_batches]
    # Every host's words: the NLL sums the eval step returns are the global batch's.
    self.words = (pipeline.eval_word_count(data, source, split, task=task)
                  if task.word_perplexity else None)

  def __call__(self, params) -> dict[str, float]:
    totals = sums_over(self.eval_step, params, self.batches)
    figures = {k: float(v) for k, v in per_token(totals).items()}
    if self.words is None:
      return figures
    return with_words(figures, float(totals["nll"]), self.words)


def _check_scored(data: DataConfig, split: str, task: tasks.Task, host_batches,
                  counts: dict) -> dict:
  """The counts of what every host's batches score (eval_batches' `counts`, summed over the hosts
  where they are a host's own). Raises ValueError in one line, on every host, when no host's
  batches hold a target to score: a perplexity of no tokens is exp(0 / 0), which the sums would
  print as tokens 0, perplexity 1.0. (lm sets with no text are refused by pipeline.eval_batches,
  naming the texts.)"""
  # The loss's weights (tfm/train/loss.py target_weights): an mlm batch keeps every piece's
  # segmentation and zeroes the targets of the pieces not masked.
  targets = sum(int(np.count_nonzero((b["targets"] != 0) & (b["targets_segmentation"] != 0)))
                for b in host_batches)
  own = () if task.monolingual else ("kept", "dropped", "truncated")  # pairs: a host's own
  values = np.array([targets] + [counts[k] for k in own], np.int64)
  if jax.process_count() > 1:  # every host must agree to raise: the evaluations are collective
    values = np.sum(multihost_utils.process_allgather(values), axis=0)
  out = ({"pairs": int(values[1]), "dropped": int(values[2]), "truncated": int(values[3]),
          "skipped": counts["skipped"]} if own else dict(counts))
  if values[0]:
    return out
  what = "texts" if task.monolingual else "pairs"
  first = (what if data.eval_max_examples is None
           else f"first {data.eval_max_examples} {what} (data.eval_max_examples)")
  if own and not out["pairs"] + out["dropped"]:
    raise ValueError(f"evaluation set {split!r}: its {out['skipped']} examples hold no pair, "
                     "each side empty or not UTF-8; expected at least one pair to score")
  raise ValueError(f"evaluation set {split!r}: its {first} leave no target piece to score, "
                   f"{task.unscorable(data)}; expected at least one")


def sums_over(eval_step, params, batches) -> dict:
  """eval_step's per-token sums (loss, nll, correct, tokens) added over every device batch, on
  the host."""
  totals = None
  for batch in batches:
    sums = eval_step(params, batch)
    totals = sums if totals is None else jax.tree.map(lambda a, b: a + b, totals, sums)
  return jax.device_get(totals)


def loss_over(eval_step, params, batches) -> dict[str, float]:
  """{loss, nll, perplexity, accuracy, tokens} of device `batches`: eval_step's per-token sums
  added over every batch, then one division (also tfm/eval/by_length.py's, a bucket at a time)."""
  return {k: float(v) for k, v in per_token(sums_over(eval_step, params, batches)).items()}
