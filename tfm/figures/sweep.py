"""A sweep's figure: each Table 3 row's perplexity change from base, ours beside the paper's.

For rows with the paper's figures (configs/table3*.py) one axis shows, per row, the change of dev
perplexity from base in percent of base's: ours (the mean over seeds, bars +- one sample standard
deviation of the row's seeds) and the paper's. Agreement reads as the two marks on the same side of
zero, in the same order. Key rows (tfm/sweep/compare.py) have bold labels; a row far outside the
paper's range (a diverged run) is drawn at the axis edge with its value written beside it, so it
does not squash every other row. Groups A-E are drawn apart, as in the paper's table.
Other sweeps get each group's mean dev perplexity, +- one std, labelled by the group's own name:
a --grid (over any config, a Table 3 config or one of its rows included: the paper's figures are
for the rows, not for the grid's points), and base alone.
"""

from __future__ import annotations

import math
import re
from typing import Sequence

import numpy as np

from tfm.sweep import compare


def _letter(row: str | None) -> str:
  return row if row in ("base", "big", None) else re.sub(r"\d+$", "", row)


def _positions(rows: Sequence[compare.Group]) -> tuple[list[float], list[float]]:
  """x of each row, a gap between the paper's groups; x of the separators."""
  xs, x, previous, bounds = [], 0.0, None, []
  for g in rows:
    letter = _letter(g.row)
    if previous is not None and letter != previous:
      x += 0.8
      bounds.append(x - 0.9)
    xs.append(x)
    previous, x = letter, x + 1.0
  return xs, bounds


def grid_keys(rows: Sequence[compare.Group]) -> list[str]:
  """The config keys a --grid varies, in order, read from the groups' names (ROW+KEY=VALUE,... or
  KEY=VALUE,...: tfm/sweep/runs.py); [] for a sweep of table rows alone."""
  keys = []
  for g in rows:
    point = g.group[len(g.row) + 1:] if g.row else g.group
    for item in point.split(",") if g.group != g.row else ():
      key, sep, _ = item.partition("=")
      if sep and key not in keys:
        keys.append(key)
  return keys


def draw(rows: Sequence[compare.Group]):
  """(the figure of `rows` (compare.groups), its title); None when no group has a dev PPL. Only
  a figure with the paper's figures drawn is titled as beside them."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

  rows = [g for g in rows if not math.isnan(g.dev_ppl)]
  if not rows:
    return None
  verdicts = compare.row_verdicts(rows)
  keys = grid_keys(rows)
  base = next((g for g in rows if g.row == "base" and g.group in verdicts), None)
  if base is not None and not any(g is not base and g.group in verdicts for g in rows):
    base = None  # base alone: no change to draw yet, so its perplexity as a group's
  fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(rows) + 2), 4.2), dpi=120)
  if base is None or keys:  # a grid's points have no paper figures: each group's perplexity
    xs, bounds = _positions(rows)
    stds = np.nan_to_num([g.dev_ppl_std for g in rows])
    ax.errorbar(xs, [g.dev_ppl for g in rows], yerr=stds, fmt="o", color="tab:blue", capsize=3)
    ax.set_ylabel("dev perplexity (mean over seeds, +- std)")
    labels = [g.group for g in rows]
    slanted = len(rows) > 8 or max(len(label) for label in labels) > 12
    ax.set_xticks(xs, labels, rotation=45 if slanted else 0, ha="right" if slanted else "center",
                  fontsize=7)
    title = "Dev perplexity per run group"
    if keys:
      table_rows = list(dict.fromkeys(g.row for g in rows if g.row))
      title += f" over {', '.join(keys)}" + (f" (rows {', '.join(table_rows)})" if table_rows else "")
  else:
    rows = [g for g in rows if g is not base and g.group in verdicts]
    xs, bounds = _positions(rows)
    ours = np.array([100 * verdicts[g.group].ours for g in rows])
    paper = np.array([100 * verdicts[g.group].paper for g in rows])
    stds = 100 * np.nan_to_num([g.dev_ppl_std for g in rows]) / base.dev_ppl
    limit = 2.5 * max(np.max(np.abs(paper)), 5.0)  # rows beyond this are drawn at the edge
    inside = np.abs(ours) <= limit
    ax.axhline(0, color="0.5", linewidth=1)
    left = np.array(xs) - 0.12  # ours left of the row's tick, the paper's right of it
    ax.errorbar(left[inside], ours[inside], yerr=stds[inside], fmt="o", color="tab:blue",
                capsize=3, label="ours (mean over seeds, +- std)")
    ax.plot(np.array(xs) + 0.12, paper, "x", color="tab:red", markersize=8, mew=2, label="paper")
    for x, value in zip(left[~inside], ours[~inside]):
      edge = math.copysign(limit, value)
      ax.plot([x], [edge], "^" if value > 0 else "v", color="tab:blue")
      ax.annotate(f"{value:+.0f}%", (x, edge), textcoords="offset points",
                  xytext=(4, -10 if value > 0 else 4), fontsize=7, color="tab:blue")
    ax.set_ylim(-limit * 1.08, limit * 1.08)
    ax.set_ylabel("dev PPL change from base (%)")
    ax.set_xticks(xs, [g.row for g in rows])
    for label, g in zip(ax.get_xticklabels(), rows):
      if verdicts[g.group].key:
        label.set_fontweight("bold")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_xlabel(f"bold: key rows (the paper's PPL differs from base's by more than "
                  f"{compare.KEY_DELTA})", fontsize=8)
    title = "Table 3: dev perplexity change from base, ours beside the paper's"
  for b in bounds:
    ax.axvline(b, color="0.85", linewidth=1)
  ax.set_xlim(min(xs) - 0.7, max(xs) + 0.7)  # room beside the outer rows' marks
  ax.set_title(title, fontsize=10)
  fig.tight_layout()
  return fig, title


def plot(rows: Sequence[compare.Group], path: str) -> str | None:
  """Draws `rows` (compare.groups) to `path`; returns the figure's title (None, and no figure, when
  no group has a dev PPL)."""
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  drawn = draw(rows)
  if drawn is None:
    return None
  fig, title = drawn
  fig.savefig(path)
  plt.close(fig)
  return title
