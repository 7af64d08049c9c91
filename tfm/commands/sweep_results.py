"""A sweep's run results (tfm sweep): what each run's sweep_result.json says, from its config, its
workdir's dev evaluation and its TensorBoard dev curve, and the fingerprint that publishing
compares (tfm/sweep/publish.py)."""

from __future__ import annotations

import dataclasses
import functools
import json
import os

from tfm import config as config_lib
from tfm import tasks
from tfm.commands import eval_files
from tfm.sweep import execute, hparams, publish
from tfm.sweep.result import RunResult
from tfm.sweep.runs import Run
from tfm.train.trackers import events


class SweepResults:
  """What a run's sweep_result.json says: the run and its config, then its dev evaluation."""

  def __init__(self, runs: list[Run], configs: dict, reference: config_lib.Config, eval_limit):
    from tfm.model.params import count_params  # pylint: disable=import-outside-toplevel
    self.configs, self.reference, self.eval_limit = configs, reference, eval_limit
    self.index = {r: i for i, r in enumerate(runs)}
    self.params = {r: count_params(c.model) for r, c in configs.items()}
    self._fingerprints = {}

  def fingerprint(self, r: Run) -> str:
    """The run's config and vocabulary as tfm/sweep/publish.py compares them (the vocabulary must
    exist: call this after _prepare_data)."""
    if r not in self._fingerprints:
      from tfm.data import vocabulary  # pylint: disable=import-outside-toplevel
      c = self.configs[r]
      self._fingerprints[r] = publish.fingerprint(
          c, vocabulary.get_tokenizer(c.data, task=tasks.get(c.task)).model_sha256,
          self.eval_limit(r))
    return self._fingerprints[r]

  @functools.cached_property
  def varied_keys(self) -> list[str]:
    """Every config key some run of the sweep changes from the config file (its grid's, its row's,
    the seeds')."""
    return sorted(set().union(*(execute.changed_keys(c, self.reference)
                                for c in self.configs.values())))

  def varied(self, r: Run) -> dict:
    """{key: the run's value} of varied_keys: the same keys for every run of the sweep."""
    values = self.configs[r].to_dict()
    return {key: values[key.split(".")[0]][key.split(".", 1)[1]] for key in self.varied_keys}

  def to_tensorboard(self, root: str, runs: list[Run]):
    """What writes a run's HParams records when it ends (tfm/sweep/hparams.py)."""
    by_name = {r.name: r for r in runs}
    return lambda result: hparams.write(os.path.join(root, result.name), result,
                                        self.varied(by_name[result.name]))

  def to_trackers(self, root: str):
    """What adds a run's final figures (hparams.metrics: 'sweep/bleu', ...) at its last step, and
    its row, group and seed as tags, to its MLflow / W&B run when it ends (train.trackers); a
    tracker that fails then is reported, and the sweep goes on."""
    from tfm.train import trackers  # pylint: disable=import-outside-toplevel

    def record(result: RunResult) -> None:
      if not result.ok:
        return
      try:
        trackers.record_later(os.path.join(root, result.name), metrics=hparams.metrics(result),
                              step=result.trained_steps or result.steps,
                              tags={"row": result.row or "", "group": result.group,
                                    "seed": str(result.seed)})
      except Exception as e:  # pylint: disable=broad-except
        print(f"[sweep] {result.name}: its final figures did not reach its trackers "
              f"({' '.join(str(e).split())[:300]})", flush=True)
    return record

  def static(self, r: Run, wall_s: float) -> RunResult:
    """What the result says before its evaluation is read (also a run that never started)."""
    c = self.configs[r]
    return RunResult(name=r.name, group=r.group, row=r.row, seed=r.seed, index=self.index[r],
                     steps=c.train.steps, fingerprint=self.fingerprint(r),
                     changes=execute.changed_keys(c, self.reference), params=self.params[r],
                     paper=c.paper or {}, wall_s=wall_s, task=c.task)

  def describe(self, r: Run, workdir: str, wall_s: float) -> RunResult:
    out = self.static(r, wall_s)
    buckets = self.configs[r].eval.length_buckets
    contexts = self.configs[r].eval.context_lengths
    limit = self.eval_limit(r) or 0  # None: an lm / mlm run's (no BLEU, no --limit)
    evals = [(int(m["step"]), int(m["limit"] or 0) == limit
              and eval_files.scored_as(name, buckets, contexts),
              os.path.getmtime(os.path.join(workdir, name)), name)
             for name in os.listdir(workdir)
             if (m := eval_files.RESULT.fullmatch(name)) and m["split"] == "dev"
             and os.path.isfile(os.path.join(workdir, name))]  # a file `tfm eval` wrote
    if evals:  # the last step's, scored as this sweep scores it (a hand-run eval may sit beside it)
      with open(os.path.join(workdir, max(evals)[-1]), encoding="utf-8") as f:
        out = out.with_eval(json.load(f))
    emas = [(int(m["step"]), os.path.getmtime(os.path.join(workdir, name)), name)
            for name in os.listdir(workdir)
            if (m := eval_files.EMA_RESULT.fullmatch(name)) and m["split"] == "dev"
            and int(m["limit"] or 0) == limit
            and eval_files.scored_as(name, buckets, contexts)]  # scored as the series is
    if emas and out.trained_steps is not None and max(emas)[0] == out.trained_steps:
      with open(os.path.join(workdir, max(emas)[-1]), encoding="utf-8") as f:
        out = out.with_ema_eval(json.load(f))
    return dataclasses.replace(out, dev_curve=dev_curve(workdir))


def dev_curve(workdir: str) -> list | None:
  """[[step, dev PPL]] of the run's dev evaluations during training, from its TensorBoard events
  (None where it wrote none: no dev evaluation, or no tensorboardX)."""
  directory = os.path.join(workdir, "tensorboard")
  if not os.path.isdir(directory):
    return None
  points = events.read_scalars(directory).get("dev/perplexity")
  return [[step, value] for step, value in points] if points else None
