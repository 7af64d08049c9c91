"""A sweep's runs in TensorBoard's HParams dashboard: `tensorboard --logdir ROOT` compares them.

Each run that ends well writes ROOT/NAME/tensorboard/events.out.tfevents.*.sweep-hparams beside its
training scalars: the hparams plugin's experiment, session-start and session-end records (its row,
group and seed, and the value of every config key the sweep varies, the same keys for every run)
and its final dev figures as scalars `sweep/dev_ppl`, `sweep/bleu`, `sweep/tokenized_bleu`,
`sweep/chrf`, `sweep/ter` and `sweep/wall_s` at the evaluated step (a language model's
`sweep/word_ppl`, `sweep/dev_accuracy`, and `sweep/ppl_ctx<N>` at each of eval.context_lengths: no
`@`, which MLflow refuses in a name). A later attempt of the run replaces the file. The records are
made by tensorboardX (as the training events are); without it nothing is written.
"""

from __future__ import annotations

import glob
import os
from typing import Any, Mapping

from tfm.sweep.result import RunResult
from tfm.train.trackers.events import EventWriter

SUFFIX = ".sweep-hparams"
# RunResult's fields, as sweep/<name> (those a run has: no BLEU for lm / mlm, word_ppl for lm)
METRICS = ("dev_ppl", "bleu", "tokenized_bleu", "chrf", "ter", "wall_s", "word_ppl",
           "dev_accuracy")


def _value(value: Any) -> str | float | bool:
  """A config value as the dashboard takes one: a number, a bool or a string (lists, None: text)."""
  if isinstance(value, (bool, int, float, str)):
    return value
  return str(list(value) if isinstance(value, tuple) else value)


def run_hparams(result: RunResult, varied: Mapping[str, Any]) -> dict[str, Any]:
  """The run's hyperparameters: row, group, seed, then `varied` ({config key: this run's value})."""
  return {"row": result.row or "", "group": result.group, "seed": result.seed,
          **{key: _value(value) for key, value in sorted(varied.items())}}


def metrics(result: RunResult) -> dict[str, float]:
  """{'sweep/<figure>': value} of the run's final figures that it has; an lm run scored at
  eval.context_lengths also sweep/ppl_ctx<N>, its per-piece perplexity in rows of N pieces."""
  out = {f"sweep/{name}": float(getattr(result, name)) for name in METRICS
         if getattr(result, name) is not None}
  out.update({f"sweep/ppl_ctx{e['context_length']}": float(e["perplexity"])
              for e in result.context_lengths or ()})
  return out


def write(workdir: str, result: RunResult, varied: Mapping[str, Any]) -> str | None:
  """Writes the run's HParams records into workdir/tensorboard; returns the file (None where the
  run did not end well, or tensorboardX is missing)."""
  if not result.ok:
    return None
  try:
    from tensorboardX.summary import hparams as plugin_records  # pylint: disable=import-outside-toplevel
  except ModuleNotFoundError:
    return None
  directory = os.path.join(workdir, "tensorboard")
  for old in glob.glob(os.path.join(directory, f"*{SUFFIX}")):
    os.remove(old)
  figures = metrics(result)
  experiment, start, end = plugin_records(run_hparams(result, varied), figures)
  writer = EventWriter(directory, suffix=SUFFIX)
  try:
    step = result.trained_steps or result.steps
    writer.summaries(step, [experiment, start])
    writer.scalars(step, figures)
    writer.summaries(step, [end])
  finally:
    writer.close()
  return writer.path
