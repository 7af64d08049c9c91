"""`tfm eval` of a run whose task does not translate (lm, mlm, span: tfm/tasks): its dev loss
figures in rows of data.max_length and, for a task scored at other context lengths (lm), in rows of
each of --context_lengths; the decoding and BLEU flags refused."""

from __future__ import annotations

import json

from absl import flags
from etils import epath

from tfm import tasks
from tfm.commands import UsageError, announce_backend, save
from tfm.commands.eval_files import result_name
from tfm.commands.eval_results import checkpoint_keys, print_result, record_written

TRANSLATION_FLAGS = ("beam_size", "length_penalty", "max_extra_length", "limit",
                     "length_buckets", "truncate")


def context_lengths(fv: flags.FlagValues, config) -> tuple[int, ...]:
  """--context_lengths checked against the run (without it the run's eval.context_lengths, checked
  with its config; 0: none): an lm run's, positive integers, none past model.max_length with
  learned positions (the table has no row beyond it). A language model's run also refuses the
  flags of decoding and BLEU."""
  if not config.translates:
    given = [f"--{name}" for name in TRANSLATION_FLAGS if fv[name].present]
    if given:
      raise UsageError(f"{', '.join(given)}: decoding and BLEU flags; the run in {fv.workdir} is "
                       f"task {config.task!r}, which is scored by its dev loss alone")
  if fv.context_lengths is None:
    return config.eval.context_lengths  # the run's own (eval.context_lengths; () for others)
  if fv.context_lengths == ["0"]:
    return ()
  if not tasks.get(config.task).scores_context_lengths:
    raise UsageError(f"--context_lengths: scores a language model (task 'lm'); the run in "
                     f"{fv.workdir} is task {config.task!r}")
  try:
    lengths = tuple(int(x) for x in fv.context_lengths)
  except ValueError:
    lengths = ()
  if not lengths or min(lengths) < 1:
    raise UsageError(f"--context_lengths: expected positive integers, e.g. 256,512 (0: none), got "
                     f"{','.join(fv.context_lengths)!r}")
  if config.model.positions == "learned" and max(lengths) > config.model.max_length:
    raise UsageError(f"--context_lengths: {max(lengths)} is past model.max_length "
                     f"({config.model.max_length}), the rows of the run's learned position table")
  return tuple(dict.fromkeys(lengths))


def evaluate_texts(fv: flags.FlagValues, names: list[str], contexts: tuple[int, ...]) -> None:
  """An lm or mlm run's evaluation of each set: the dev loss figures (tfm/eval/dev_loss.py) in
  rows of data.max_length, then (lm, --context_lengths) in rows of each context length; printed
  and written to the workdir (or --out)."""
  # pylint: disable=import-outside-toplevel
  import jax
  from tfm.eval.dev_loss import DevLoss
  from tfm.eval.restore import load_trained
  from tfm.train import checkpoint as ckpt_lib
  t = load_trained(fv.workdir, fv.average, checkpoint=fv.checkpoint)
  announce_backend(t.note)
  exp, c = t.experiment, t.config
  hosts = ckpt_lib.read_data_state(t.checkpoints_in, t.steps[-1])["hosts"]
  tokens = sum(h.get("efficiency", {}).get("real_targets", 0) for h in hosts) or None
  scorer = lambda name, length: DevLoss(
      c.data, exp.data_source, t.tokenizer, exp.eval_step, exp.batch_sharding, split=name,
      row_multiple=exp.batch_shards, task=tasks.get(c.task), context_length=length)
  # Every set's batches first: a set that cannot be scored is refused before any result is written.
  scorers = {name: scorer(name, None) for name in names}
  written = []
  for name in names:
    losses = scorers[name](t.params)
    result = dict(split=name, task=c.task, checkpoints=t.steps, averaged=len(t.steps),
                  **checkpoint_keys(t),
                  perplexity=losses["perplexity"], nll=losses["nll"], loss=losses["loss"],
                  accuracy=losses["accuracy"], target_tokens=losses["tokens"],
                  **({"word_perplexity": losses["word_perplexity"], "words": losses["words"]}
                     if "words" in losses else {}),
                  texts=scorers[name].counts["texts"],
                  texts_skipped=scorers[name].counts["skipped"],
                  context_length=c.data.max_length, train_target_tokens=tokens)
    if result["texts_skipped"]:
      result["note"] = (f"{result['texts_skipped']} example{'s' * (result['texts_skipped'] > 1)}"
                        " of the set skipped, empty or not UTF-8")
    if contexts:
      result["context_lengths"] = [
          dict(context_length=length, perplexity=f["perplexity"], nll=f["nll"],
               word_perplexity=f["word_perplexity"], accuracy=f["accuracy"], tokens=f["tokens"])
          for length, f in ((n, losses if n == c.data.max_length else scorer(name, n)(t.params))
                            for n in contexts)]  # at data.max_length: the figures above
    print_result(result)
    path = fv.out or epath.Path(fv.workdir) / result_name(
        name, t.steps, 0, best=t.best is not None, ema=t.checkpoint == "ema", contexts=contexts)
    if jax.process_index() == 0 and save("results", path, json.dumps(result, indent=1) + "\n",
                                         given=fv.out is not None):
      print(f"{'written':>22}: {path}")
      written.append(path)
  record_written(fv.workdir, written)
