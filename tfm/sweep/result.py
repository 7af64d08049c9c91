"""One run's result, as a sweep writes it (ROOT/NAME/sweep_result.json, a line of results.jsonl) and
as execute, publish, slurm, compare and report read it: one type, so a field has one name.

The dev figures come from the run's `tfm eval` result (tfm/commands/eval.py writes
eval_dev_<step>_avg<N>[_first<K>].json), whose names are the evaluation's (perplexity, sentences,
sentences_dropped, train_target_tokens, checkpoints); `with_eval` is the one place they become the
sweep's (dev_ppl, bleu_sentences, bleu_dropped, tokens_seen, trained_steps).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tfm import tasks

STATUSES = ("pending", "ok", "failed", "stopped")


@dataclasses.dataclass
class RunResult:
  """A run of a sweep: what it is (name, row, seed, config changes, parameters, the paper's
  figures), how it ended (status, error, wall time) and its dev evaluation (None until evaluated)."""

  name: str
  group: str
  row: str | None  # a row of a table config, or None (a grid point)
  seed: int
  index: int  # its place in the sweep's order
  steps: int  # train.steps of its config
  status: str = "pending"  # ok | failed | stopped (pending: not ended yet)
  error: str | None = None  # why it failed or stopped
  fingerprint: str | None = None  # its config and vocabulary (tfm/sweep/publish.py)
  changes: dict = dataclasses.field(default_factory=dict)  # 'section.key' -> value, vs. the file
  params: int | None = None
  paper: dict = dataclasses.field(default_factory=dict)  # ppl, bleu, params_m (table rows)
  wall_s: float = 0.0  # training + evaluation, this attempt's
  dev_ppl: float | None = None  # per word-piece, without label smoothing
  bleu: float | None = None  # sacreBLEU
  tokenized_bleu: float | None = None  # the paper's tokenized BLEU
  bleu_sentences: int | None = None  # dev pairs the BLEUs were scored on
  # dev pairs of the same first ones left out of the BLEUs: a source longer than a learned
  # position table holds (the evaluation's sentences_dropped)
  bleu_dropped: int | None = None
  compounds: str | None = None  # how tokenized BLEU split compounds
  chrf: float | None = None  # sacreBLEU's chrF (tfm/eval/chrf_ter.py)
  ter: float | None = None  # sacreBLEU's TER, lower is better
  tokens_seen: int | None = None  # real target tokens trained on
  trained_steps: int | None = None  # the step of the evaluated checkpoint
  # [[step, dev PPL]] of the dev evaluations during training (its TensorBoard events): how far
  # from converged the run ended (tfm/sweep/compare.py: late_change)
  dev_curve: list | None = None
  # the evaluation by source length (eval.length_buckets; tfm/eval/by_length.py): one dict per
  # bucket with its sentences, perplexity and BLEUs
  by_length: list | None = None
  # the EMA of the parameters (train.ema_decay), scored as the run (`tfm eval --checkpoint ema`)
  ema_dev_ppl: float | None = None
  ema_bleu: float | None = None
  # what the run learns (config.task): 'lm' and 'mlm' runs have no BLEU, chrF or TER; their dev PPL
  # is per piece of the dev texts (mlm: of the masked pieces)
  task: str = tasks.DEFAULT.name  # results written before config.task: translations
  word_ppl: float | None = None  # lm: per whitespace word (tfm/eval/word_perplexity.py)
  dev_accuracy: float | None = None  # lm / mlm: next-piece (mlm: masked-piece) accuracy
  # lm: the dev texts scored in rows of each of eval.context_lengths (`tfm eval`'s
  # context_lengths): one dict per length with its context_length, perplexity (per piece),
  # word_perplexity, nll, accuracy and tokens
  context_lengths: list | None = None

  @property
  def ok(self) -> bool:
    return self.status == "ok"

  def finished(self, steps: int) -> bool:
    """Ended well after `steps` steps, its dev figures on disk: nothing left to run."""
    return self.ok and self.steps == steps and self.dev_ppl is not None

  def with_eval(self, evaluation: dict) -> "RunResult":
    """This result with the dev figures of a `tfm eval` result file's contents."""
    return dataclasses.replace(
        self, dev_ppl=evaluation["perplexity"], bleu=evaluation.get("bleu"),  # none for lm / mlm
        tokenized_bleu=evaluation.get("tokenized_bleu"), bleu_sentences=evaluation.get("sentences"),
        bleu_dropped=evaluation.get("sentences_dropped"),  # absent from older results
        word_ppl=evaluation.get("word_perplexity"),
        dev_accuracy=evaluation.get("accuracy") if "task" in evaluation else None,
        chrf=evaluation.get("chrf"), ter=evaluation.get("ter"),  # absent from older results
        compounds=evaluation.get("compounds"), tokens_seen=evaluation.get("train_target_tokens"),
        trained_steps=evaluation["checkpoints"][-1], by_length=evaluation.get("by_length"),
        context_lengths=evaluation.get("context_lengths"))

  def with_ema_eval(self, evaluation: dict) -> "RunResult":
    """This result with the EMA's dev figures (a `tfm eval --checkpoint ema` result's contents)."""
    return dataclasses.replace(self, ema_dev_ppl=evaluation["perplexity"],
                               ema_bleu=evaluation.get("bleu"))

  def ended(self, status: str, error: str | None, wall_s: float | None = None) -> "RunResult":
    if status not in STATUSES:
      raise ValueError(f"run status {status!r}: expected one of {STATUSES}")
    return dataclasses.replace(self, status=status, error=error,
                               wall_s=self.wall_s if wall_s is None else wall_s)

  def to_json(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, values: dict[str, Any]) -> "RunResult":
    """From a sweep_result.json or results.jsonl line; keys of no field are dropped (a result
    written by an older tfm may carry some), missing ones take their defaults."""
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in values.items() if k in names}
    values["paper"] = values.get("paper") or {}
    return cls(**values)
