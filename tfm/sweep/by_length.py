"""A sweep's figures by source length (runs evaluated with eval.length_buckets): per group and
bucket the seeds' mean BLEU and perplexity with their spread, and each group against the reference:
the row whose config marks it (paper['reference']; the paper's sinusoids in configs/positions.py),
else the sweep's first.

"Beyond the seeds' spread" is the rule of tfm/sweep/compare.py: every seed of one group on the same
side of every seed of the other. A group with one seed is not scored.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from tfm.sweep import compare
from tfm.sweep.result import RunResult


@dataclasses.dataclass(frozen=True)
class Cell:
  """One group in one bucket: the finished seeds' values and their mean / sample std (NaN: none,
  or one seed for the std)."""
  sentences: int
  bleu_values: tuple[float, ...]
  ppl_values: tuple[float, ...]
  note: str | None = None  # why a seed has no figure here (a learned table too short)

  @property
  def bleu(self) -> float:
    return compare.stats(self.bleu_values)[0]

  @property
  def bleu_std(self) -> float:
    return compare.stats(self.bleu_values)[1]

  @property
  def ppl(self) -> float:
    return compare.stats(self.ppl_values)[0]

  @property
  def ppl_std(self) -> float:
    return compare.stats(self.ppl_values)[1]


@dataclasses.dataclass(frozen=True)
class Table:
  """buckets: their names ('1-32', ...) and (lo, hi] source lengths; cells[group][k]: bucket k;
  claims: {group: the claim its config states (paper['claim']), where it states one};
  hypotheses: {group: a hypothesis that the reference group does better than this one in the
  longest bucket (paper['hypothesis']), answered by the report}."""
  buckets: list[str]
  edges: list[tuple[int, int]]
  groups: list[str]
  cells: dict[str, list[Cell]]
  claims: dict[str, str]
  hypotheses: dict[str, str] = dataclasses.field(default_factory=dict)


def reference_first(results: Sequence[RunResult]) -> list[str]:
  """The sweep's groups in its order, the row its config marks as the reference first
  (paper['reference']; configs/positions.py: the paper's sinusoids)."""
  names = list(dict.fromkeys(r.group for r in sorted(results, key=lambda r: r.index)))
  marked = [r.group for r in results if r.paper.get("reference")]
  if marked:
    names.remove(marked[0])
    names.insert(0, marked[0])
  return names


def table(results: Sequence[RunResult]) -> Table | None:
  """The by-length table of the finished runs (None where none was evaluated by length)."""
  done = [r for r in results if r.ok and r.by_length]
  if not done:
    return None
  first = done[0].by_length
  buckets = [b["bucket"] for b in first]
  edges = [(b["min_length"] - 1, b["max_length"]) for b in first]
  names = reference_first(results)
  cells, claims, hypotheses = {}, {}, {}
  for name in names:
    runs = [r for r in done if r.group == name and [b["bucket"] for b in r.by_length] == buckets]
    row = []
    for k in range(len(buckets)):
      entries = [r.by_length[k] for r in runs]
      notes = sorted({e["note"] for e in entries if e.get("note")})
      row.append(Cell(sentences=max((e["sentences"] for e in entries), default=0),
                      bleu_values=tuple(e["bleu"] for e in entries if e.get("bleu") is not None),
                      ppl_values=tuple(e["perplexity"] for e in entries
                                       if e.get("perplexity") is not None),
                      note="; ".join(notes) or None))
    cells[name] = row
    paper = next((r.paper for r in results if r.group == name and r.paper), {})
    if paper.get("claim"):
      claims[name] = paper["claim"]
    if paper.get("hypothesis"):
      hypotheses[name] = paper["hypothesis"]
  return Table(buckets=buckets, edges=edges, groups=names, cells=cells, claims=claims,
               hypotheses=hypotheses)


ANSWERS = {"lower": "yes", "higher": "no", "within the seeds' spread": "within the seeds' spread",
           "": "not scored (fewer than two seeds)"}


def beyond_seeds(a: Sequence[float], b: Sequence[float]) -> bool | None:
  """Every value of a above every value of b, or every one below (None: fewer than two on a
  side, so the seeds' spread is unknown)."""
  if len(a) < 2 or len(b) < 2:
    return None
  return min(a) > max(b) or max(a) < min(b)


def _fmt(mean: float, std: float, digits: int) -> str:
  if math.isnan(mean):
    return "–"
  return f"{mean:.{digits}f}" + ("" if math.isnan(std) else f" ± {std:.{digits}f}")


def verdict(cell: Cell, reference: Cell) -> str:
  """A group's BLEU in a bucket against the reference group's: 'higher', 'lower' (beyond the
  seeds' spread), 'within the seeds' spread', or '' where it cannot be said."""
  resolved = beyond_seeds(cell.bleu_values, reference.bleu_values)
  if resolved is None:
    return ""
  if not resolved:
    return "within the seeds' spread"
  return "higher" if cell.bleu > reference.bleu else "lower"


def markdown(t: Table) -> list[str]:
  """The report's section: BLEU and perplexity per bucket, then each group against the first in
  the longest bucket, beside the claim its config states."""
  reference = t.groups[0]
  head = ["row"] + [f"{b} BLEU" for b in t.buckets] + [f"{b} PPL" for b in t.buckets]
  lines = ["## By source length", "",
           "Source length in pieces (EOS included); every dev pair up to the last bucket's edge, "
           "mean ± sample std over the seeds. Sentences per bucket: "
           + ", ".join(f"{b}: {t.cells[reference][k].sentences}" for k, b in enumerate(t.buckets))
           + ".", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for name in t.groups:
    row = t.cells[name]
    lines.append("| " + " | ".join([name] + [_fmt(c.bleu, c.bleu_std, 1) for c in row]
                                   + [_fmt(c.ppl, c.ppl_std, 2) for c in row]) + " |")
  notes = [f"- {name}, {t.buckets[k]}: {c.note}" for name in t.groups
           for k, c in enumerate(t.cells[name]) if c.note]
  if notes:
    lines += ["", "Not scored:"] + notes
  last = len(t.buckets) - 1
  ref = t.cells[reference]
  lines += ["", f"Against {reference} in the longest bucket ({t.buckets[last]}): BLEU (the change "
            f"from the first bucket's, {t.buckets[0]}), and whether it is higher or lower than "
            f"{reference}'s beyond the seeds' spread (every seed on one side of every seed of "
            f"{reference}).", "",
            "| row | BLEU | change from " + t.buckets[0] + " | vs " + reference + " | claim |",
            "|---|---|---|---|---|"]
  for name in t.groups:
    row = t.cells[name]
    drop = row[last].bleu - row[0].bleu
    lines.append(f"| {name} | {_fmt(row[last].bleu, row[last].bleu_std, 1)} | "
                 + ("–" if math.isnan(drop) else f"{drop:+.1f}") + " | "
                 + ("(reference)" if name == reference else verdict(row[last], ref[last]))
                 + f" | {t.claims.get(name, '')} |")
  for name, hypothesis in t.hypotheses.items():
    lines += ["", f"**{hypothesis}: {ANSWERS[verdict(t.cells[name][last], ref[last])]}** "
              f"(BLEU in {t.buckets[last]}: {reference} "
              f"{_fmt(ref[last].bleu, ref[last].bleu_std, 1)}, {name} "
              f"{_fmt(t.cells[name][last].bleu, t.cells[name][last].bleu_std, 1)})."]
  return lines
