"""A sweep's results at a glance: results.jsonl, table.md (ours beside the paper's) and a figure.

Runs of one group (a row, or a grid point) differ only in their seed; the table shows the mean and
the sample standard deviation over the finished seeds. When the runs carry the paper's figures
(rows of configs/table3*.py), the table adds

  * Spearman's rank correlation of our mean dev perplexity with the paper's, over every row
    that has both (average ranks for ties);
  * the rows that move in the paper's direction relative to `base`: the sign of (row - base) is
    the same for our mean PPL as for the paper's (rows the paper gives the same PPL as base are
    left out of the count and named).
and the figure (table3.png) shows per row our dev PPL (mean, +- std) and the paper's on two axes
scaled alike: each axis spans the same range relative to its own base, so a point at base height
is no change and equal heights are equal relative changes. Groups A-E are drawn apart, as in the
paper's table.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Sequence

import numpy as np

GROUP_ORDER = ("base", "A", "B", "C", "D", "E", "big")


def ranks(values: Sequence[float]) -> np.ndarray:
  """1-based ranks, ties sharing the mean of their positions."""
  values = np.asarray(values, np.float64)
  order = np.argsort(values, kind="stable")
  out = np.empty(len(values))
  i = 0
  while i < len(values):
    j = i
    while j + 1 < len(values) and values[order[j + 1]] == values[order[i]]:
      j += 1
    out[order[i:j + 1]] = (i + j) / 2 + 1
    i = j + 1
  return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
  """Spearman's rho: the Pearson correlation of the ranks (NaN for fewer than 3 pairs)."""
  if len(x) != len(y):
    raise ValueError(f"spearman: {len(x)} values against {len(y)}")
  if len(x) < 3:
    return float("nan")
  rx, ry = ranks(x) - (len(x) + 1) / 2, ranks(y) - (len(y) + 1) / 2
  denominator = math.sqrt(float(np.sum(rx * rx) * np.sum(ry * ry)))
  return float(np.sum(rx * ry) / denominator) if denominator else float("nan")


def _mean_std(values: list[float]) -> tuple[float, float]:
  if not values:
    return float("nan"), float("nan")
  return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")


def groups(results: Sequence[dict]) -> list[dict]:
  """One entry per group in sweep order: the seeds' mean / std of each figure and the paper's."""
  by_group: dict[str, list[dict]] = {}
  for r in results:
    by_group.setdefault(r["group"], []).append(r)
  out = []
  for name, runs in by_group.items():
    ok = [r for r in runs if r["status"] == "ok"]
    entry = dict(group=name, row=runs[0].get("row"), changes=runs[0].get("changes", {}),
                 paper=runs[0].get("paper") or {}, runs=len(runs), finished=len(ok),
                 params=runs[0].get("params"), steps=runs[0].get("steps"),
                 tokens_seen=_mean_std([r["tokens_seen"] for r in ok if r.get("tokens_seen")])[0],
                 wall_s=sum(r.get("wall_s", 0.0) for r in runs))
    for key in ("dev_ppl", "bleu", "tokenized_bleu"):
      entry[key], entry[key + "_std"] = _mean_std([r[key] for r in ok if r.get(key) is not None])
    out.append(entry)
  return out


def comparison(rows: Sequence[dict]) -> dict:
  """Spearman of our mean PPL with the paper's, and the direction count relative to base."""
  paired = [g for g in rows if g["paper"].get("ppl") is not None and not math.isnan(g["dev_ppl"])]
  out = dict(spearman=spearman([g["dev_ppl"] for g in paired], [g["paper"]["ppl"] for g in paired]),
             spearman_rows=len(paired), same_direction=[], other_direction=[], paper_unchanged=[])
  base = next((g for g in paired if g["row"] == "base"), None)
  if base is None:
    return out
  for g in paired:
    if g is base:
      continue
    paper_delta = g["paper"]["ppl"] - base["paper"]["ppl"]
    ours_delta = g["dev_ppl"] - base["dev_ppl"]
    if paper_delta == 0:
      out["paper_unchanged"].append(g["group"])
    elif np.sign(paper_delta) == np.sign(ours_delta):
      out["same_direction"].append(g["group"])
    else:
      out["other_direction"].append(g["group"])
  return out


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


def _common(rows: Sequence[dict]) -> dict:
  """The changes every group shares (the command line's overrides): stated once, not per row."""
  if not rows:
    return {}
  common = dict(rows[0]["changes"])
  for g in rows[1:]:
    common = {k: v for k, v in common.items() if g["changes"].get(k) == v}
  return common if len(rows) > 1 else {}


def _bleu_sentences(results: Sequence[dict]) -> str:
  """How many dev sentences the runs' BLEU was scored on (`tfm eval --limit`), or '' where their
  results do not say."""
  counts = sorted({r["bleu_sentences"] for r in results if r.get("bleu_sentences")})
  if not counts:
    return ""
  return (f"; both BLEUs over the first {' / '.join(map(str, counts))} dev sentences (dev PPL over "
          "the whole split, or its first data.eval_max_examples where set)")


def table_markdown(results: Sequence[dict], command: str | None = None) -> str:
  rows = groups(results)
  common = _common(rows)
  for g in rows:
    g["changes"] = {k: v for k, v in g["changes"].items() if k not in common}
  has_paper = any(g["paper"] for g in rows)
  head = ["row", "changes", "seeds", "dev PPL", "BLEU", "tok. BLEU", "params (M)"]
  if has_paper:
    head = ["row", "changes", "seeds", "dev PPL", "paper PPL", "BLEU", "tok. BLEU", "paper BLEU",
            "params (M)", "paper params (M)"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for g in rows:
    seeds = f"{g['finished']}/{g['runs']}"
    params = "" if g["params"] is None else f"{g['params'] / 1e6:.2f}"
    ppl, bleu = _fmt(g["dev_ppl"], g["dev_ppl_std"], 2), _fmt(g["bleu"], g["bleu_std"], 1)
    tok = _fmt(g["tokenized_bleu"], g["tokenized_bleu_std"], 1)
    if has_paper:
      p = g["paper"]
      cells = [g["row"] or g["group"], _changes(g["changes"]), seeds, ppl, _paper(p.get("ppl"), 2),
               bleu, tok, _paper(p.get("bleu"), 1), params, _paper(p.get("params_m"), 0)]
    else:
      cells = [g["group"], _changes(g["changes"]), seeds, ppl, bleu, tok, params]
    lines.append("| " + " | ".join(cells) + " |")
  out = []
  if command:
    out += [f"Command: `{command}`", ""]
  if common:
    out += ["Every run: " + ", ".join(f"{k}={v}" for k, v in common.items()), ""]
  out += lines
  done = [r for r in results if r["status"] == "ok"]
  wall = sum(r.get("wall_s", 0.0) for r in results)
  out += ["", f"{len(done)} of {len(results)} runs finished; their wall time adds up to "
          f"{wall / 3600:.2f} h. dev PPL is per word-piece without label smoothing; BLEU is "
          "sacreBLEU, tok. BLEU the paper's tokenized BLEU (tensor2tensor's recipe)"
          + _bleu_sentences(done) + "."]
  if has_paper:
    c = comparison(rows)
    moved = len(c["same_direction"]) + len(c["other_direction"])
    out += ["", f"Spearman rank correlation of our mean dev PPL with the paper's PPL over "
            f"{c['spearman_rows']} rows: {c['spearman']:.3f}.",
            f"Rows moving in the paper's direction relative to base (PPL): "
            f"{len(c['same_direction'])} of {moved}"
            + (f"; against it: {', '.join(c['other_direction'])}" if c["other_direction"] else "")
            + (f"; the paper's PPL equals base for {', '.join(c['paper_unchanged'])}"
               if c["paper_unchanged"] else "") + "."]
  failed = [r for r in results if r["status"] != "ok"]
  if failed:
    out += ["", "Failed runs:"] + [f"- {r['name']}: {r.get('error')}" for r in failed]
  return "\n".join(out) + "\n"


def _group_letter(row: str | None) -> str:
  if row in ("base", "big") or row is None:
    return row or ""
  return re.sub(r"\d+$", "", row)


def figure_title(with_paper: bool) -> str:
  """The figure's title: a comparison with the paper only where the paper's figures are drawn."""
  return ("Table 3: our dev perplexity beside the paper's" if with_paper
          else "our dev perplexity (mean +- std over seeds)")


def plot(results: Sequence[dict], path: str) -> None:
  """Our dev PPL per group (mean +- std over seeds) and, when known, the paper's on a twin axis."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

  rows = [g for g in groups(results) if not math.isnan(g["dev_ppl"])]
  if not rows:
    return
  xs, x, previous, bounds = [], 0.0, None, []
  for g in rows:
    letter = _group_letter(g["row"])
    if previous is not None and letter != previous:
      x += 0.8  # a gap between the paper's groups
      bounds.append(x - 0.9)
    xs.append(x)
    previous, x = letter, x + 1.0
  fig, ours_ax = plt.subplots(figsize=(max(6.0, 0.55 * len(rows) + 2), 4.2), dpi=120)
  ours = np.array([g["dev_ppl"] for g in rows])
  stds = np.nan_to_num(np.array([g["dev_ppl_std"] for g in rows]))
  ours_ax.errorbar(xs, ours, yerr=stds, fmt="o", color="tab:blue", capsize=3, label="ours (dev PPL)")
  ours_ax.set_ylabel("our dev perplexity", color="tab:blue")
  ours_ax.set_xticks(xs, [g["row"] or g["group"] for g in rows], rotation=45 if len(rows) > 12 else 0)
  for b in bounds:
    ours_ax.axvline(b, color="0.85", linewidth=1)
  paper = [g["paper"].get("ppl") for g in rows]
  handles = [ours_ax.get_legend_handles_labels()]
  if any(p is not None for p in paper):
    paper_ax = ours_ax.twinx()
    px = [xi for xi, p in zip(xs, paper) if p is not None]
    pv = [p for p in paper if p is not None]
    paper_ax.plot(px, pv, "x", color="tab:red", markersize=8, mew=2, label="paper (PPL)")
    paper_ax.set_ylabel("paper's perplexity (newstest2013)", color="tab:red")
    base = next((g for g in rows if g["row"] == "base" and g["paper"].get("ppl")), None)
    lo, hi = min(ours - stds), max(ours + stds)
    if base is not None:  # both axes relative to their own base: equal heights, equal changes
      scale = base["paper"]["ppl"] / base["dev_ppl"]
      lo, hi = min(lo, min(pv) / scale), max(hi, max(pv) / scale)
      pad = 0.05 * (hi - lo)
      ours_ax.set_ylim(lo - pad, hi + pad)
      paper_ax.set_ylim((lo - pad) * scale, (hi + pad) * scale)
      ours_ax.axhline(base["dev_ppl"], color="0.6", linestyle=":", linewidth=1)
    handles.append(paper_ax.get_legend_handles_labels())
  ours_ax.legend(sum((h for h, _ in handles), []), sum((l for _, l in handles), []),
                 loc="upper left", fontsize=8)
  ours_ax.set_title(figure_title(any(p is not None for p in paper)))
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)


def write_report(results: Sequence[dict], root: str, command: str | None = None) -> list[str]:
  """Writes ROOT/results.jsonl, ROOT/table.md and the figure; returns their paths."""
  paths = [os.path.join(root, "results.jsonl"), os.path.join(root, "table.md")]
  with open(paths[0] + ".tmp", "w", encoding="utf-8") as f:
    for r in results:
      f.write(json.dumps(r, sort_keys=True) + "\n")
  os.replace(paths[0] + ".tmp", paths[0])
  with open(paths[1] + ".tmp", "w", encoding="utf-8") as f:
    f.write(table_markdown(results, command))
  os.replace(paths[1] + ".tmp", paths[1])
  figure = os.path.join(root, "table3.png" if any(r.get("paper") for r in results) else "sweep.png")
  plot(results, figure)
  if os.path.exists(figure):
    paths.append(figure)
  return paths
