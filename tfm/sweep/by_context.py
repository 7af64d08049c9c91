"""A language-model sweep's figures by context length (lm runs scored at eval.context_lengths): per
group and length the seeds' perplexity per piece, whether each group holds past the shortest length
scored (L, the training context in configs/positions.py:lm, which scores L, 2 L and 4 L), and each
group against the reference (the row whose config marks it, paper['reference'], else the first)
at the longest.

`tfm eval` cuts the dev texts into rows of N pieces and scores each piece once, so a piece's mean
context grows with N (about N / 2). A model that extrapolates scores lower at 2 L than at L, for it
reads more of the text; one that does not scores higher. A group "holds" at N where every seed's
perplexity at N is at most its own at L, "breaks" where every seed's is above it, and is "mixed"
where the seeds disagree. Against the reference, "beyond the seeds' spread" is tfm/sweep/compare.py's
rule (every seed of one group on the same side of every seed of the other; by_length.beyond_seeds).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from tfm.sweep import compare
from tfm.sweep.by_length import beyond_seeds, reference_first
from tfm.sweep.result import RunResult


@dataclasses.dataclass(frozen=True)
class Table:
  """contexts: the lengths scored, shortest (L) first; seeds[group]: one {length: perplexity per
  piece} per finished seed scored at every length; claims / hypotheses: as by_length.Table's."""
  contexts: list[int]
  groups: list[str]
  seeds: dict[str, list[dict[int, float]]]
  claims: dict[str, str]
  hypotheses: dict[str, str] = dataclasses.field(default_factory=dict)
  # the reference row (paper['reference'], else the sweep's first): absent from groups while none
  # of its seeds is scored at every length (a sweep part-way, its report rewritten after each run)
  reference: str = ""

  def values(self, group: str, n: int) -> tuple[float, ...]:
    return tuple(s[n] for s in self.seeds[group])


def table(results: Sequence[RunResult]) -> Table | None:
  """The by-context table of the finished runs (None where none was scored at two or more
  lengths)."""
  done = [r for r in results if r.ok and r.context_lengths]
  contexts = sorted({int(e["context_length"]) for r in done for e in r.context_lengths})
  if len(contexts) < 2:
    return None
  names = reference_first(results)
  seeds, claims, hypotheses = {}, {}, {}
  for name in names:
    scored = [{int(e["context_length"]): float(e["perplexity"]) for e in r.context_lengths}
              for r in done if r.group == name]
    seeds[name] = [s for s in scored if set(contexts) <= set(s)]
    paper = next((r.paper for r in results if r.group == name and r.paper), {})
    if paper.get("claim"):
      claims[name] = paper["claim"]
    if paper.get("hypothesis"):
      hypotheses[name] = paper["hypothesis"]
  reference = names[0]
  names = [n for n in names if seeds[n]]
  if not names:  # no run scored at every length of the union (runs of other context_lengths)
    return None
  return Table(contexts=contexts, groups=names, seeds={n: seeds[n] for n in names},
               claims={n: c for n, c in claims.items() if n in names},
               hypotheses={n: h for n, h in hypotheses.items() if n in names},
               reference=reference)


def past_training(t: Table, group: str, n: int) -> str:
  """'holds', 'breaks' or 'mixed' at length n against the group's own seeds at L (module doc)."""
  short = t.contexts[0]
  higher = [not s[n] <= s[short] for s in t.seeds[group]]  # a NaN (a diverged seed) never holds
  return "breaks" if all(higher) else "holds" if not any(higher) else "mixed"


def reach(t: Table, group: str) -> str:
  """Where the group stops holding: 'holds to N' (the longest length), or 'breaks at N' /
  'mixed at N' at the first length past L where it does not hold."""
  for n in t.contexts[1:]:
    state = past_training(t, group, n)
    if state != "holds":
      return f"{state} at {n}"
  return f"holds to {t.contexts[-1]}"


def verdict(t: Table, group: str, reference: str) -> str:
  """The group's perplexity at the longest length against the reference's: 'lower', 'higher'
  (beyond the seeds' spread), 'within the seeds' spread', or '' (fewer than two seeds a side)."""
  n = t.contexts[-1]
  if reference not in t.seeds or group == reference:
    return ""
  mine, theirs = t.values(group, n), t.values(reference, n)
  if not all(math.isfinite(v) for v in mine + theirs):
    return "not comparable (a non-finite perplexity)"
  resolved = beyond_seeds(mine, theirs)
  if resolved is None:
    return ""
  if not resolved:
    return "within the seeds' spread"
  return "lower" if max(mine) < min(theirs) else "higher"


# A hypothesis that the reference extrapolates better than a group: answered by the group's
# perplexity at the longest length against the reference's (higher: the reference is better).
ANSWERS = {"higher": "yes", "lower": "no", "within the seeds' spread": "within the seeds' spread",
           "": "not scored (fewer than two seeds)",
           "not comparable (a non-finite perplexity)": "not scored (a non-finite perplexity)"}


def _fmt(values: Sequence[float]) -> str:
  mean, std, _ = compare.stats(values)
  return f"{mean:.2f}" + ("" if math.isnan(std) else f" ± {std:.2f}")


def _change(t: Table, group: str, n: int) -> str:
  """The seeds' mean relative change of the perplexity at n from their own at L."""
  short = t.contexts[0]
  return f"{100 * compare.stats([s[n] / s[short] - 1 for s in t.seeds[group]])[0]:+.1f}%"


def markdown(t: Table) -> list[str]:
  """The report's section: the perplexity at each length, the change from L and where each group
  stops holding; then each group against the reference at the longest length, beside its claim."""
  short, longest, reference = t.contexts[0], t.contexts[-1], t.reference or t.groups[0]
  missing = reference not in t.seeds
  head = (["row", "seeds"] + [f"ppl@{n}" for n in t.contexts]
          + [f"{n} vs {short}" for n in t.contexts[1:]] + [f"past {short}"])
  lines = ["## By context length", "",
           f"Perplexity per piece of the dev texts cut into rows of N pieces, each piece scored "
           f"once (a piece's mean context about N / 2), mean ± sample std over the seeds; the "
           f"change from {short} pieces (the shortest scored, the training context of "
           f"configs/positions.py:lm) is the seeds' mean of each seed's own. A row holds at N "
           f"where every seed scores no worse than at {short}, breaks where every seed scores "
           f"worse, and is mixed where they disagree.", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for name in t.groups:
    lines.append("| " + " | ".join(
        [name, str(len(t.seeds[name]))] + [_fmt(t.values(name, n)) for n in t.contexts]
        + [_change(t, name, n) for n in t.contexts[1:]] + [reach(t, name)]) + " |")
  lines += ["", f"Against {reference} at the longest context ({longest} pieces): whether its "
            f"perplexity is lower or higher than {reference}'s beyond the seeds' spread (every seed "
            f"on one side of every seed of {reference})."
            + (f" {reference} has no run scored at every length yet." if missing else ""), "",
            f"| row | ppl@{longest} | vs {reference} | claim |", "|---|---|---|---|"]
  for name in t.groups:
    lines.append(f"| {name} | {_fmt(t.values(name, longest))} | "
                 + ("(reference)" if name == reference else verdict(t, name, reference))
                 + f" | {t.claims.get(name, '')} |")
  for name, hypothesis in t.hypotheses.items():
    if name == reference:
      continue
    if missing:
      lines += ["", f"**{hypothesis}: not scored ({reference} has no run scored at every length "
                "yet)**"]
      continue
    lines += ["", f"**{hypothesis}: {ANSWERS[verdict(t, name, reference)]}** (perplexity per "
              f"piece at {longest}: {reference} {_fmt(t.values(reference, longest))}, {name} "
              f"{_fmt(t.values(name, longest))})."]
  return lines
