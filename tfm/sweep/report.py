"""A sweep's results at a glance: results.jsonl, table.md (ours beside the paper's) and a figure;
for runs evaluated by source length also their table by length (tfm/sweep/by_length.py) and
by_length.png; for language models scored at several context lengths their table by context
(tfm/sweep/by_context.py) and by_context.png.

The statistics are tfm/sweep/compare.py's: per group the mean over its finished seeds with the
sample standard deviation; for rows of configs/table3*.py, the paper's figures beside ours, each
row's change from base (ours and the paper's, in percent of base's PPL), whether it goes the
paper's way and whether it exceeds the seeds' spread, the key rows marked, and both Spearman
figures. The figure is tfm/figures/sweep.py's.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import textwrap
from typing import Sequence

from tfm import storage, tasks
from tfm.sweep import by_context, by_length, compare
from tfm.sweep.result import RunResult

def _fmt(mean: float, std: float, digits: int) -> str:
  if math.isnan(mean):
    return "–"
  return f"{mean:.{digits}f}" + ("" if math.isnan(std) else f" ± {std:.{digits}f}")


def _paper(value, digits: int) -> str:
  return "" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _changes(changes: dict) -> str:
  shown = {k.split(".", 1)[1]: v for k, v in changes.items()
           if k not in ("train.seed", "data.shuffle_seed")}
  return ", ".join(f"{k}={v}" for k, v in shown.items()) or "·"


def _common(rows: Sequence[compare.Group]) -> dict:
  """The changes every group shares (the command line's overrides): stated once, not per row."""
  if not rows:
    return {}
  common = dict(rows[0].changes)
  for g in rows[1:]:
    common = {k: v for k, v in common.items() if g.changes.get(k) == v}
  return common if len(rows) > 1 else {}


def _bleu_sentences(results: Sequence[RunResult]) -> str:
  """How many dev sentences the runs' BLEU covers (`tfm eval --limit`: the first N pairs, those
  scored and those left out), then the runs whose BLEU left some of them out (a source longer than
  a learned position table holds: the evaluation's sentences_dropped); '' where their results do
  not say."""
  counts = sorted({r.bleu_sentences + (r.bleu_dropped or 0) for r in results if r.bleu_sentences})
  if not counts:
    return ""
  short = [r for r in results if r.bleu_sentences and r.bleu_dropped]
  return (f"; both BLEUs over the first {' / '.join(map(str, counts))} dev sentences (dev PPL over "
          "the whole split, or its first data.eval_max_examples where set)"
          + ("" if not short else "; fewer where a source is longer than a run's learned position "
             "table holds (model.max_length - eval.max_extra_length pieces), left untranslated: "
             + ", ".join(f"{r.name} over {r.bleu_sentences} of {r.bleu_sentences + r.bleu_dropped}"
                         for r in short)))


def _percent(x) -> str:
  return "" if x is None else f"{100 * x:+.1f}%"


_DIRECTION = {"same": "yes", "other": "**no**", None: ""}
_RESOLVED = {True: "yes", False: "no", None: ""}


def _language_model_table(rows: Sequence[compare.Group], results: Sequence[RunResult],
                          common: dict, command: str | None) -> str:
  """table_markdown's form for a sweep of lm / mlm runs (config.task): dev PPL, lm's per-word
  PPL, lm's per-piece PPL at each of eval.context_lengths (ppl@N), the dev accuracy and the
  parameters, each the seeds' mean ± sample std; no BLEU column (they translate nothing)."""
  words = any(tasks.get(g.task).word_perplexity for g in rows)
  contexts = sorted({n for g in rows for n in g.context_ppl})  # eval.context_lengths of lm runs
  head = (["row", "task", "changes", "seeds", "dev PPL", "last fifth"] + (["word PPL"] if words
                                                                       else [])
          + [f"ppl@{n}" for n in contexts] + ["accuracy", "params (M)"])
  has_ema = any(not math.isnan(g.ema_dev_ppl) for g in rows)
  head += ["EMA dev PPL"] if has_ema else []
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for g in rows:
    cells = [g.row or g.group, g.task, _changes(g.changes), f"{g.finished}/{g.runs}",
             _fmt(g.dev_ppl, g.dev_ppl_std, 2),
             "" if math.isnan(g.late_change) else _percent(g.late_change)]
    cells += [_fmt(g.word_ppl, g.word_ppl_std, 2)] if words else []
    cells += [_fmt(*g.context_ppl[n][:2], 2) if n in g.context_ppl else "" for n in contexts]
    cells += [_fmt(100 * g.dev_accuracy, 100 * g.dev_accuracy_std, 1),
              "" if g.params is None else f"{g.params / 1e6:.2f}"]
    cells += [_fmt(g.ema_dev_ppl, g.ema_dev_ppl_std, 2)] if has_ema else []
    lines.append("| " + " | ".join(cells) + " |")
  out = [f"Command: `{command}`", ""] if command else []
  if common:
    out += ["Every run: " + ", ".join(f"{k}={v}" for k, v in common.items()), ""]
  done = [r for r in results if r.ok]
  wall = sum(r.wall_s for r in results)
  out += lines + [
      "", f"{len(done)} of {len(results)} runs finished; their wall time adds up to "
      f"{wall / 3600:.2f} h. dev PPL is per piece of the dev texts without label smoothing ("
      + "; ".join(f"{t.name}: {t.dev_ppl_note}" for t in tasks.ALL if t.dev_ppl_note) + ")"
      + ("; word PPL is exp(the same NLL sum / the texts' whitespace words)" if words else "")
      + ("; ppl@N is the perplexity per piece of the same texts cut into rows of N pieces, each "
         "piece scored once (eval.context_lengths: past data.max_length, extrapolation; the "
         "per-word figures are in each run's eval_dev_*_ctx*.json)" if contexts else "")
      + "; accuracy in percent of the same pieces. No BLEU: these runs translate nothing."]
  out += _convergence_lines(rows)
  contexts = by_context.table(results)
  if contexts:
    out += [""] + by_context.markdown(contexts)
  failed = [r for r in results if not r.ok]
  if failed:
    out += ["", "Failed runs:"] + [f"- {r.name}: {r.error}" for r in failed]
  return "\n".join(out) + "\n"


def table_markdown(results: Sequence[RunResult], command: str | None = None,
                   gpu_calls: Sequence[dict] = ()) -> str:
  """The table (ours beside the paper's for table rows), its legend and the comparison.
  gpu_calls: the GPU node calls that trained the runs (experiments/gpu/table3.py's summaries),
  whose device time the table states."""
  rows = compare.groups(results)
  common = _common(rows)
  rows = [dataclasses.replace(g, changes={k: v for k, v in g.changes.items() if k not in common})
          for g in rows]
  if not any(tasks.get(g.task).translates for g in rows):  # language models: no BLEU to show
    return _language_model_table(rows, results, common, command)
  has_paper = any(g.paper.get("ppl") is not None for g in rows)  # a row of the paper's Table 3
  head = ["row", "changes", "seeds", "dev PPL", "last fifth", "BLEU", "tok. BLEU", "chrF", "TER",
          "params (M)"]
  if has_paper:
    head = ["row", "changes", "seeds", "dev PPL", "last fifth", "paper PPL", "ours vs base",
            "half way", "paper vs base", "paper's way", "beyond seeds", "crossed at", "BLEU",
            "tok. BLEU",
            "paper BLEU", "params (M)", "paper params (M)", "chrF", "TER"]
    c = compare.comparison(rows)
  has_ema = any(not math.isnan(g.ema_dev_ppl) for g in rows)  # runs with train.ema_decay
  if has_ema:  # the EMA of the parameters beside the checkpoints averaged (tfm eval's default)
    head += ["EMA dev PPL", "EMA BLEU"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for g in rows:
    seeds = f"{g.finished}/{g.runs}"
    params = "" if g.params is None else f"{g.params / 1e6:.2f}"
    ppl, bleu = _fmt(g.dev_ppl, g.dev_ppl_std, 2), _fmt(g.bleu, g.bleu_std, 1)
    tok = _fmt(g.tokenized_bleu, g.tokenized_bleu_std, 1)
    late = "" if math.isnan(g.late_change) else _percent(g.late_change)
    chrf, ter = _fmt(g.chrf, g.chrf_std, 1), _fmt(g.ter, g.ter_std, 1)
    if has_paper:
      p, v = g.paper, c.verdicts.get(g.group, compare.Verdict())
      name = g.row or g.group
      crossed = "" if not (v.key and v.curved) else (
          "never" if v.crossed is None else f"{v.crossed:,}")
      cells = [f"{name} *" if v.key else name, _changes(g.changes), seeds, ppl, late,
               _paper(p.get("ppl"), 2), _percent(v.ours), _percent(v.half), _percent(v.paper),
               _DIRECTION[v.direction], _RESOLVED[v.resolved], crossed, bleu, tok,
               _paper(p.get("bleu"), 1), params, _paper(p.get("params_m"), 0), chrf, ter]
    else:
      cells = [g.group, _changes(g.changes), seeds, ppl, late, bleu, tok, chrf, ter, params]
    if has_ema:
      cells += [_fmt(g.ema_dev_ppl, g.ema_dev_ppl_std, 2), _fmt(g.ema_bleu, g.ema_bleu_std, 1)]
    lines.append("| " + " | ".join(cells) + " |")
  out = []
  if command:
    out += [f"Command: `{command}`", ""]
  if common:
    out += ["Every run: " + ", ".join(f"{k}={v}" for k, v in common.items()), ""]
  out += lines
  done = [r for r in results if r.ok]
  wall = sum(r.wall_s for r in results)
  out += ["", f"{len(done)} of {len(results)} runs finished; their wall time adds up to "
          f"{wall / 3600:.2f} h. dev PPL is per word-piece without label smoothing; BLEU is "
          "sacreBLEU, tok. BLEU the paper's tokenized BLEU (tensor2tensor's recipe), chrF and TER "
          "sacreBLEU's (TER lower is better; – where a run's evaluation predates them)"
          + _bleu_sentences(done) + "."
          + (" EMA dev PPL and EMA BLEU score the exponential moving average of the parameters "
             "(train.ema_decay; `tfm eval --checkpoint ema`), the other figures the last "
             "train.average_checkpoints checkpoints averaged." if has_ema else "")]
  out += _convergence_lines(rows)
  if gpu_calls:
    devices = sorted({c.get("device", "?") for c in gpu_calls})
    minutes = sum(c.get("seconds", 0.0) for c in gpu_calls) / 60
    out += ["", f"GPU time: {len(gpu_calls)} call(s) on {', '.join(devices)}, "
            f"{minutes:.1f} minutes in all (each call's time box, start to files written)."]
  if has_paper:
    out += [""] + _comparison_lines(c)
    glance = _glance(rows, c)
    out += ["", "## At a glance (docs/table3.md's copy)", "", glance.rstrip("\n")] if glance else []
  lengths = by_length.table(results)
  if lengths:
    out += [""] + by_length.markdown(lengths)
  failed = [r for r in results if not r.ok]
  if failed:
    out += ["", "Failed runs:"] + [f"- {r.name}: {r.error}" for r in failed]
  return "\n".join(out) + "\n"


def _short_percent(x) -> str:
  """A change in percent, one decimal below 10% and whole percents from there: +5.6%, -0.2%,
  +24%, +173%; exactly no change is 0%."""
  if x is None:
    return "–"
  if x == 0:
    return "0%"
  return f"{100 * x:+.0f}%" if abs(round(100 * x, 1)) >= 10 else f"{100 * x:+.1f}%"


def glance_markdown(results: Sequence[RunResult], per_table: int = 10) -> str:
  """The rows as columns, `per_table` to a table (docs/table3.md's copy): mean dev PPL, ours and the
  paper's change from base. Key rows bold; a change against the paper's direction bold; `~` a
  change within the seeds' spread; failed runs and diverged rows say so. Then both
  Spearman figures."""
  rows = compare.groups(results)
  return _glance(rows, compare.comparison(rows), per_table)


def _glance(rows: Sequence[compare.Group], c: compare.Comparison, per_table: int = 10) -> str:
  """glance_markdown of compare.groups' rows and their compare.comparison, computed once by the
  caller (table_markdown has both)."""
  rows = [g for g in rows if g.paper.get("ppl") is not None]
  verdicts = c.verdicts
  if not any(v.paper is not None for v in verdicts.values()):
    return ""  # no paper rows, or no base with a finite PPL: no change to show
  tables = []
  for i in range(0, len(rows), per_table):
    part = rows[i:i + per_table]
    names, ppl, ours, paper = [], [], [], []
    for g in part:
      v = verdicts[g.group]
      name = g.row or g.group
      names.append(f"**{name}**" if v.key else name)
      ppl.append((f"{g.dev_ppl:.1f}" if math.isfinite(g.dev_ppl) else "–")
                 + (f" ({g.runs - g.finished} of {g.runs} failed)" if g.failed
                    else " (diverged)" if v.diverged else ""))
      if v.paper is None:  # base itself
        ours.append("")
        paper.append("")
        continue
      change = _short_percent(v.ours) + ("~" if v.resolved is False else "")
      ours.append(f"**{change}**" if v.direction == "other" else change)
      paper.append(_short_percent(v.paper))
    tables.append("\n".join(["| | " + " | ".join(names) + " |", "|---" * (len(part) + 1) + "|",
                             "| dev PPL | " + " | ".join(ppl) + " |",
                             "| ours vs base | " + " | ".join(ours) + " |",
                             "| paper vs base | " + " | ".join(paper) + " |"]))
  legend = (f"Bold names: key rows (the paper's PPL differs from base's by more than "
            f"{compare.KEY_DELTA}). Bold changes: the paper's opposite sign; ~: within the seeds' "
            "spread (one seed: not scored). Spearman with the paper: "
            f"{c.spearman:.2f} over {c.spearman_rows} rows (dev PPL), "
            f"{c.bleu_spearman:.2f} over {c.bleu_spearman_rows} (tok. BLEU).")
  return "\n\n".join(tables) + "\n\n" + textwrap.fill(legend, 100) + "\n"


def _convergence_lines(rows: Sequence[compare.Group]) -> list[str]:
  """What the "last fifth" column means, and how many groups were still improving there."""
  scored = [g for g in rows if not math.isnan(g.late_change)]
  if not scored:
    return []
  starts = sorted({s for g in scored for s in g.late_from})
  improving = [g.group for g in scored if g.late_change <= -compare.CONVERGED]
  return ["", "\"last fifth\": the change of each seed's dev PPL over the last fifth of "
          "training, from the last dev evaluation during training at or before 80% of the steps "
          f"(step {' / '.join(map(str, starts))}) to the last one, averaged over the seeds. "
          "Still falling by "
          f"{100 * compare.CONVERGED:g}% or more there, so not converged: {len(improving)} of "
          f"{len(scored)}" + (f" ({', '.join(improving)})" if 0 < len(improving) < len(scored)
                              else "") + "."]


def _listed(names: Sequence[str]) -> str:
  return ", ".join(names) if names else "none"


def _comparison_lines(c: compare.Comparison) -> list[str]:
  moved = len(c.same_direction) + len(c.other_direction)
  key_scored = len(c.key_same) + len(c.key_other)
  return [
      "\"ours vs base\" and \"paper vs base\": the row's PPL change from base's, in percent of "
      "base's. \"paper's way\": our change has the sign of the paper's. \"beyond seeds\": our "
      "change exceeds the range of the row's seeds and of base's. \"half way\": ours vs base at "
      "the last dev evaluation during training at or before half the steps (the seeds' mean "
      "curves). \"crossed at\": the step from which a key row's mean dev curve stays on the "
      "paper's side of base's (never: not there at the end). Rows marked * are the key rows, "
      f"whose paper PPL differs from base's by more than {compare.KEY_DELTA}.",
      "",
      f"- Spearman rank correlation of our mean dev PPL with the paper's PPL over "
      f"{c.spearman_rows} rows: {c.spearman:.3f}; over the key rows and base "
      f"({c.key_spearman_rows}): {c.key_spearman:.3f}.",
      f"- Spearman rank correlation of our mean tokenized BLEU with the paper's BLEU over "
      f"{c.bleu_spearman_rows} rows: {c.bleu_spearman:.3f}; over the key rows and base "
      f"({c.key_bleu_spearman_rows}): {c.key_bleu_spearman:.3f}.",
      f"- Key rows in the paper's direction: {len(c.key_same)} of {key_scored} scored "
      f"({len(c.key_rows)} key rows); against it: {_listed(c.key_other)}; every seed on the "
      f"paper's side of every seed of base: {_listed(c.key_separated)}.",
      f"- All rows in the paper's direction: {len(c.same_direction)} of {moved}"
      + (f"; the paper's PPL equals base's for {', '.join(c.paper_unchanged)}"
         if c.paper_unchanged else "") + ".",
      f"- Changes within the seeds' spread: {_listed(c.unresolved)}.",
      *_along_lines(c),
      f"- Diverged (failed, non-finite, or over {compare.DIVERGED_RATIO:g}x base's PPL): "
      f"{_listed(c.diverged)}."]


def _along_lines(c: compare.Comparison) -> list[str]:
  """Spearman at each shared dev evaluation, and the rows whose side of base changed after half
  way: whether training longer would move the ranking."""
  if not c.along:
    return []
  by_step = ", ".join(f"{step} {rho:.2f}" for step, rho in c.along)
  return [f"- Spearman of our mean dev PPL with the paper's PPL at each dev evaluation during "
          f"training ({len(c.along_groups)} rows with dev curves), by step: {by_step}.",
          f"- Rows on the other side of base at the end than half way: {_listed(c.flipped)}."]


def write_report(results: Sequence[RunResult], root: str, command: str | None = None) -> list[str]:
  """Writes ROOT/results.jsonl, ROOT/table.md and the figure; returns their paths."""
  # pylint: disable=import-outside-toplevel
  from tfm.figures import by_context as context_figure
  from tfm.figures import by_length as length_figure
  from tfm.figures import sweep as sweep_figure
  paths = [os.path.join(root, "results.jsonl"), os.path.join(root, "table.md")]
  storage.write_atomically(paths[0], "".join(json.dumps(r.to_json(), sort_keys=True) + "\n"
                                             for r in results))
  calls_path = os.path.join(root, "gpu_calls.jsonl")
  calls = []
  if os.path.exists(calls_path):
    with open(calls_path, encoding="utf-8") as f:
      calls = [json.loads(line) for line in f if line.strip()]
  storage.write_atomically(paths[1], table_markdown(results, command, calls))
  # A table's rows beside the paper's: table3.png; any grid (over a table's rows too): sweep.png.
  table = (any(r.paper.get("ppl") is not None for r in results)
           and all(r.group == r.row for r in results))
  figure = os.path.join(root, "table3.png" if table else "sweep.png")
  if sweep_figure.plot(compare.groups(results), figure) is not None:
    paths.append(figure)
  lengths = by_length.table(results)
  if lengths and length_figure.plot(lengths, os.path.join(root, "by_length.png")):
    paths.append(os.path.join(root, "by_length.png"))
  contexts = by_context.table(results)
  if contexts:
    paths.append(context_figure.plot(contexts, os.path.join(root, "by_context.png")))
  return paths
