"""`tfm translate --workdir DIR [--input FILE] [--average N | --checkpoint best|ema] [--beam_size K]
[--length_penalty A] [--max_extra_length E] [--n_best N | --score | --sample ...]`.

Translates lines (stdin by default) with beam search (the workdir's eval settings, the flags given
overriding them), or samples one translation per line with --sample --temperature T [--top_k K]
[--top_p P] [--seed S].
--n_best N prints the N best hypotheses of each line, best first, as `LINE<TAB>SCORE<TAB>TEXT`
(LINE counts from 0; SCORE = log P / ((5 + |Y|) / 6) ** alpha, the search's own score).
--score reads `SOURCE<TAB>TARGET` lines and prints, a line each, `LOGP<TAB>TOKENS<TAB>SCORE`: the
model's log P(TARGET | SOURCE), teacher-forced, the target's tokens (its EOS included) and log P
over the length penalty, the score beam search gives that target.
Every source is translated whole wherever the model's positions allow it (all but a learned
table). A learned table (model.max_length rows) holds sources of up to model.max_length -
max_extra_length pieces; a longer line is not translated (an empty line is printed for it, no
hypotheses with --n_best, an empty line with --score) unless --truncate cuts it to that length.
The last stderr line counts the lines refused or cut, and names them.
"""

from __future__ import annotations

import sys

from absl import flags
from etils import epath

from tfm import tasks
from tfm.commands import (UsageError, announce_backend, define_trained_flags, refuse_config,
                           require_workdir, text_lines)


def define_flags(fv: flags.FlagValues):
  define_trained_flags(fv)
  flags.DEFINE_string("input", None, "a UTF-8 file with one sentence per line (default: stdin)",
                      flag_values=fv)
  flags.DEFINE_integer("beam_size", None, "override eval.beam_size (1 = greedy)", lower_bound=1,
                       flag_values=fv)
  flags.DEFINE_float("length_penalty", None, "override eval.length_penalty (alpha >= 0)",
                     flag_values=fv)
  flags.DEFINE_integer("max_extra_length", None, "override eval.max_extra_length (outputs of at "
                       "most input length + this many tokens)", lower_bound=0, flag_values=fv)
  flags.DEFINE_integer("n_best", None, "print the N best hypotheses of each line with their scores "
                       "(N <= the beam size)", lower_bound=1, flag_values=fv)
  flags.DEFINE_boolean("score", False, "score given translations: read SOURCE<TAB>TARGET lines, "
                       "print LOGP<TAB>TOKENS<TAB>SCORE", flag_values=fv)
  flags.DEFINE_boolean("truncate", False, "with a learned position table: cut a source longer "
                       "than it holds (model.max_length - max_extra_length pieces; --score: "
                       "model.max_length) to that length instead of leaving its line "
                       "untranslated (counted on stderr either way)", flag_values=fv)
  flags.DEFINE_boolean("sample", False, "sample instead of searching", flag_values=fv)
  flags.DEFINE_float("temperature", 1.0, "with --sample: softmax temperature (> 0)", flag_values=fv)
  flags.DEFINE_integer("top_k", 0, "with --sample: keep the K most likely tokens (0 = all)",
                       lower_bound=0, flag_values=fv)
  flags.DEFINE_float("top_p", 1.0, "with --sample: nucleus mass in (0, 1] (1 = all)", flag_values=fv)
  flags.DEFINE_integer("seed", 0, "with --sample: the random seed", flag_values=fv)


SEARCH_FLAGS = ("beam_size", "length_penalty", "max_extra_length", "n_best")


def _check_flags(fv: flags.FlagValues):
  if fv.length_penalty is not None and not (fv.length_penalty >= 0 and fv.length_penalty < float("inf")):
    raise UsageError(f"--length_penalty: expected a non-negative number, got {fv.length_penalty}")
  if fv.score:
    given = [f"--{n}" for n in SEARCH_FLAGS + ("sample",) if fv[n].present and n != "length_penalty"]
    if given:
      raise UsageError(f"--score scores the given targets; {', '.join(given)} apply to searching")
  if fv.sample:
    if not fv.temperature > 0:
      raise UsageError(f"--temperature: expected a number > 0, got {fv.temperature}")
    if not 0 < fv.top_p <= 1:
      raise UsageError(f"--top_p: expected a number in (0, 1], got {fv.top_p}")
    given = [f"--{n}" for n in SEARCH_FLAGS if fv[n].present]
    if given:
      raise UsageError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to search, "
                       "not with --sample")
  elif any(fv[name].present for name in ("temperature", "top_k", "top_p", "seed")):
    raise UsageError("--temperature, --top_k, --top_p and --seed apply with --sample only")


def _refuse_non_translating(workdir: str, config) -> None:
  """One line for a workdir whose model does not translate (lm, mlm, span), asked of its task,
  before anything is read or loaded (--score too: a span model would score its decoder's targets,
  not a translation)."""
  task = tasks.get(config.task)
  if not task.translates:
    raise ValueError(f"--workdir={workdir}: tfm translate translates with a translation model "
                     f"(task='translate'); this run's config.task is {config.task!r} "
                     f"({task.not_translating()})")


def run(fv: flags.FlagValues, config):
  refuse_config(config)
  require_workdir(fv)
  _check_flags(fv)
  # pylint: disable=import-outside-toplevel
  from tfm.decode.beam import length_penalty
  from tfm.decode.text import (n_best_texts, score_texts, source_limit, table_rows,
                               translate_texts)
  from tfm.eval import decoding
  from tfm.eval.restore import load_trained, read_workdir_config

  _refuse_non_translating(fv.workdir, read_workdir_config(fv.workdir))
  if fv.input:
    try:
      lines = text_lines(epath.Path(fv.input).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
      raise ValueError(f"--input {fv.input}: cannot read it as UTF-8 text ({e})") from None
  else:
    stdin = getattr(sys.stdin, "buffer", None)  # bytes, so bad UTF-8 is an error, not a crash
    try:
      text = stdin.read().decode("utf-8") if stdin is not None else sys.stdin.read()
    except UnicodeDecodeError as e:
      raise ValueError(f"stdin: not UTF-8 text ({e})") from None
    lines = text_lines(text)
  if fv.score:
    pairs = []
    for number, line in enumerate(lines, 1):
      source, tab, target = line.partition("\t")
      if not tab:
        raise ValueError(f"{fv.input or 'stdin'} line {number}: expected SOURCE<TAB>TARGET with "
                         "--score, got no tab")
      pairs.append((source, target))
  if fv.n_best is not None:  # before the model is loaded
    beam = fv.beam_size or read_workdir_config(fv.workdir).eval.beam_size
    if fv.n_best > beam:
      raise UsageError(f"--n_best={fv.n_best}: at most the beam size, {beam}")
  t = load_trained(fv.workdir, fv.average, checkpoint=fv.checkpoint)
  announce_backend(t.note)
  exp, e = t.experiment, t.config.eval
  rows = exp.decode_rows(min(e.batch_size, max(len(lines), 1)))
  if fv.score:
    alpha = e.length_penalty if fv.length_penalty is None else fv.length_penalty
    scored, stats = score_texts(exp.score_fn(), t.params, t.tokenizer, pairs, batch_size=rows,
                                max_length=table_rows(t.config.model), truncate=fv.truncate)
    for pair in scored:
      if pair is None:
        print()
        continue
      logp, tokens = pair
      print(f"{logp:.6f}\t{tokens}\t{logp / float(length_penalty(tokens, alpha)):.6f}")
    print(f"tfm translate: scored {len(pairs) - len(stats['refused'])} pairs"
          + _counted(stats, table_rows(t.config.model), "a source or a target", t.config,
                     done="scored", truncate=fv.truncate),
          file=sys.stderr)
    return
  if fv.sample:
    extra = e.max_extra_length
    translate = exp.translate_fn(temperature=fv.temperature, top_k=fv.top_k, top_p=fv.top_p,
                                 eos_id=t.tokenizer.eos_id)
  else:
    (point,) = decoding.points(e, fv.beam_size, fv.length_penalty, fv.max_extra_length)
    decoding.check_lengths(t.config, [point])
    extra = point.max_extra_length
    translate = exp.translate_fn(beam_size=point.beam_size, length_penalty=point.length_penalty,
                                 max_extra_length=point.max_extra_length, n_best=fv.n_best,
                                 eos_id=t.tokenizer.eos_id)
  limit = source_limit(t.config.model, extra)
  if fv.n_best is not None:
    hypotheses, stats = n_best_texts(translate, t.params, t.tokenizer, lines, batch_size=rows,
                                     max_input_length=limit, truncate=fv.truncate)
    for number, best in enumerate(hypotheses):
      for text, score in best:
        print(f"{number}\t{score:.6f}\t{text}")
  else:
    outputs, stats = translate_texts(translate, t.params, t.tokenizer, lines, batch_size=rows,
                                     max_input_length=limit, truncate=fv.truncate, seed=fv.seed)
    for line in outputs:
      print(line)
  print(f"tfm translate: {len(lines)} lines, {stats['tokens_per_s']:.1f} output tokens/s"
        + _counted(stats, limit, "a source", t.config, extra, truncate=fv.truncate,
                   shown="printed empty" if fv.n_best is None else "no hypotheses printed"),
        file=sys.stderr)


def _lines(indices: list[int]) -> str:
  """Input line numbers (from 1) of `indices`, the first five and how many more."""
  shown = ", ".join(str(i + 1) for i in indices[:5])
  return shown + (f" and {len(indices) - 5} more" if len(indices) > 5 else "")


def _counted(stats: dict, limit: int | None, what: str, config, extra: int | None = None,
             done: str = "translated", shown: str = "printed empty", truncate: bool = False) -> str:
  """'' when no line was refused or cut, else how many were, which and why (the end of the stderr
  line). truncate: --truncate was given (a line it could not help, --score's target longer than
  the table, is not told to use it)."""
  refused, truncated = stats["refused"], stats["truncated"]
  parts = []
  table = f"model.max_length {config.model.max_length}" + (
      f" - max_extra_length {extra}" if extra is not None else "")
  if refused:
    parts.append(f"{len(refused)} not {done}, {shown} (line{'s' * (len(refused) > 1)} "
                 f"{_lines(refused)}: {what} longer than the {limit} pieces the learned position "
                 f"table holds, {table}" + ("" if truncate else "; --truncate cuts a source to "
                                            "them") + ")")
  if truncated:
    parts.append(f"{len(truncated)} cut to {limit} pieces by --truncate (line"
                 f"{'s' * (len(truncated) > 1)} {_lines(truncated)})")
  return "".join("; " + part for part in parts)
