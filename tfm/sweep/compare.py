"""A sweep's groups against the paper: means over seeds, Spearman, and each row's change from base.

Runs of one group (a row, or a grid point) differ only in their seed. A group's figure is the mean
over its finished seeds, with the sample standard deviation and the range (max - min) beside it.

Against the paper (rows of configs/table3*.py carry the paper's PPL and BLEU):
  * Spearman's rank correlation of our mean dev PPL with the paper's PPL, and of our mean
    tokenized BLEU with the paper's BLEU, over every row that has both (average ranks for ties);
  * per row, its change from base: the sign of (row - base) in our mean PPL against the paper's
    (the direction), and whether our change is larger than the seeds' spread (the range of the
    row's seeds and of base's seeds): a change within the spread is not evidence either way;
  * the key rows: those whose paper PPL differs from base's by more than KEY_DELTA (0.1), the
    changes the paper's table resolves (A1, B1, C1, C2, C4-C7, D1, D3, D4, big). Rows closer to
    base than that are within the paper's own noise, so their direction is not counted.
  * diverged rows: a failed or non-finite run, or a mean dev PPL over DIVERGED_RATIO x base's.

How far from converged (any sweep whose runs evaluated dev during training): a run's late change is
its dev PPL's relative change over the last LATE_FRACTION (a fifth) of training, from the last
training evaluation at or before step (1 - LATE_FRACTION) x steps to the last one; a group's is the
mean over its finished seeds. A run that has stopped improving changes by under 1% there.

Where a key row crossed base: the first evaluation step, shared by the row's and base's mean dev
curves, from which the row's curve stays on the paper's side of base's to the end (None: not on
the paper's side at the end). Whether every seed is on the paper's side: every seed's dev PPL of the
row beyond every seed's of base, in the paper's direction (the goal of configs/table3_v3.py).

Whether more training would move the ranking: a group's mean dev curve is the mean over its finished
seeds at each step that all of them evaluated. From these curves, each row's change from base half
way through training (at the last evaluation at or before half the steps), and the Spearman
correlation with the paper's PPL at every evaluation step that every row with a curve shares. A
gap to base that holds from half way to the end, or a correlation that is flat over the last
half, says that the ranking is settled at this protocol's length and that training longer alone
would not change it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from tfm import tasks
from tfm.sweep.result import RunResult

KEY_DELTA = 0.1  # paper PPL points: a row further from base than this is a key row
DIVERGED_RATIO = 2.0  # a row whose mean dev PPL exceeds this multiple of base's has diverged
LATE_FRACTION = 0.2  # the last fifth of training: where a converged run's dev PPL is flat
CONVERGED = 0.01  # a late change smaller than 1% in size: the run has stopped improving


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


def stats(values: Sequence[float]) -> tuple[float, float, float]:
  """(mean, sample std, range); std and range are NaN for fewer than two values."""
  if not values:
    return float("nan"), float("nan"), float("nan")
  if len(values) == 1:
    return float(values[0]), float("nan"), float("nan")
  return float(np.mean(values)), float(np.std(values, ddof=1)), float(max(values) - min(values))


def late_change(curve, steps: int) -> tuple[float, int] | None:
  """(relative dev PPL change, the step it is counted from) over the last LATE_FRACTION of
  `steps`: from the last evaluation at or before (1 - LATE_FRACTION) x steps to the last
  evaluation. None without an evaluation in the window's start and one after it."""
  if not curve:
    return None
  points = sorted((int(s), float(p)) for s, p in curve)
  start = [(s, p) for s, p in points if s <= (1 - LATE_FRACTION) * steps]
  if not start or points[-1][0] <= start[-1][0]:
    return None
  (s0, p0), (_, p1) = start[-1], points[-1]
  return p1 / p0 - 1, s0


def mean_curve(runs: Sequence[RunResult]) -> dict[int, float]:
  """{step: mean dev PPL} over `runs` at the steps every one of them evaluated ({} where one has
  no curve)."""
  curves = [{int(step): float(ppl) for step, ppl in r.dev_curve} for r in runs if r.dev_curve]
  if not curves or len(curves) < len(runs):
    return {}
  steps = sorted(set.intersection(*(set(c) for c in curves)))
  return {s: float(np.mean([c[s] for c in curves])) for s in steps}


@dataclasses.dataclass(frozen=True)
class Group:
  """A group's runs (the seeds of a row or grid point): what they are and their figures, each the
  mean over the finished seeds with its sample std and range (NaN: no value, or one seed)."""
  group: str
  row: str | None
  changes: dict
  paper: dict  # ppl, bleu, params_m (table rows), else {}
  runs: int
  finished: int
  params: int | None
  steps: int
  tokens_seen: float
  wall_s: float
  failed: bool  # a seed did not finish
  dev_ppl: float
  dev_ppl_std: float
  dev_ppl_range: float
  dev_ppl_values: tuple[float, ...]  # each finished seed's
  bleu: float
  bleu_std: float
  bleu_range: float
  tokenized_bleu: float
  tokenized_bleu_std: float
  tokenized_bleu_range: float
  chrf: float
  chrf_std: float
  chrf_range: float
  ter: float
  ter_std: float
  ter_range: float
  late_change: float  # the seeds' mean (late_change); NaN without curves
  late_from: list[int]  # the steps it is counted from
  dev_curve: dict[int, float]  # mean_curve of the finished seeds
  # the EMA of the parameters (train.ema_decay), NaN without one
  ema_dev_ppl: float = math.nan
  ema_dev_ppl_std: float = math.nan
  ema_dev_ppl_range: float = math.nan
  ema_bleu: float = math.nan
  ema_bleu_std: float = math.nan
  ema_bleu_range: float = math.nan
  # language models (task 'lm' / 'mlm'): no BLEU; lm's per-word perplexity, the dev accuracy
  task: str = tasks.DEFAULT.name
  word_ppl: float = math.nan
  word_ppl_std: float = math.nan
  word_ppl_range: float = math.nan
  dev_accuracy: float = math.nan
  dev_accuracy_std: float = math.nan
  dev_accuracy_range: float = math.nan
  # lm runs scored at eval.context_lengths: {length: (mean, sample std, range)} of the seeds'
  # perplexity per piece, and of their perplexity per word, in rows of that many pieces
  context_ppl: dict = dataclasses.field(default_factory=dict)
  context_word_ppl: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Verdict:
  """A group with a paper PPL against base (None where it cannot be said: base itself, a row
  without a finite PPL, fewer than two seeds on a side)."""
  ours: float | None = None  # our relative PPL change from base
  paper: float | None = None  # the paper's
  half: float | None = None  # ours half way through training (half_way_change)
  key: bool = False  # a key row
  direction: str | None = None  # 'same' or 'other' as the paper's; None: base, paper unchanged
  resolved: bool | None = None  # our change exceeds the seeds' spread
  separated: bool | None = None  # every seed on the paper's side of every seed of base
  crossed: int | None = None  # the step from which the mean curve stays on the paper's side
  curved: bool = False  # the row's and base's mean curves share an evaluation (crossed is known)
  diverged: bool = False


@dataclasses.dataclass(frozen=True)
class Comparison:
  """A table's groups against the paper: Spearman figures (all rows; the key rows and base), the
  rows by verdict, and the ranking along training."""
  spearman: float
  spearman_rows: int
  bleu_spearman: float
  bleu_spearman_rows: int
  key_spearman: float  # over the key rows and base
  key_spearman_rows: int
  key_bleu_spearman: float
  key_bleu_spearman_rows: int
  same_direction: list[str]
  other_direction: list[str]
  paper_unchanged: list[str]
  key_rows: list[str]
  key_same: list[str]
  key_other: list[str]
  key_separated: list[str]  # key rows whose every seed is on the paper's side of base's
  unresolved: list[str]
  diverged: list[str]
  flipped: list[str]
  verdicts: dict[str, Verdict]
  along: list[tuple[int, float]]  # (step, Spearman of the mean curves with the paper's PPL)
  along_groups: list[str]  # the groups counted there


def groups(results: Sequence[RunResult]) -> list[Group]:
  """One per group in sweep order: the seeds' mean / std / range of each figure, the paper's."""
  by_group: dict[str, list[RunResult]] = {}
  for r in results:
    by_group.setdefault(r.group, []).append(r)
  out = []
  for name, runs in by_group.items():
    ok = [r for r in runs if r.ok]
    first = runs[0]
    figures = {}
    for key in ("dev_ppl", "bleu", "tokenized_bleu", "chrf", "ter", "ema_dev_ppl", "ema_bleu",
                "word_ppl", "dev_accuracy"):
      figures[key], figures[key + "_std"], figures[key + "_range"] = stats(
          [getattr(r, key) for r in ok if getattr(r, key) is not None])
    late = [x for x in (late_change(r.dev_curve, r.steps) for r in ok) if x is not None]
    at = {}  # context length -> the finished seeds' entries at it
    for r in ok:
      for entry in r.context_lengths or ():
        at.setdefault(int(entry["context_length"]), []).append(entry)
    out.append(Group(
        group=name, row=first.row, changes=dict(first.changes), paper=first.paper, task=first.task,
        runs=len(runs), finished=len(ok), params=first.params, steps=first.steps,
        tokens_seen=stats([r.tokens_seen for r in ok if r.tokens_seen])[0],
        wall_s=sum(r.wall_s for r in runs), failed=len(ok) < len(runs),
        dev_ppl_values=tuple(float(r.dev_ppl) for r in ok if r.dev_ppl is not None),
        late_change=stats([change for change, _ in late])[0],
        late_from=sorted({start for _, start in late}), dev_curve=mean_curve(ok),
        context_ppl={n: stats([e["perplexity"] for e in at[n]]) for n in sorted(at)},
        context_word_ppl={n: stats([e["word_perplexity"] for e in at[n]
                                    if e.get("word_perplexity") is not None]) for n in sorted(at)},
        **figures))
  return out


def _finite(x) -> bool:
  return x is not None and not math.isnan(x) and not math.isinf(x)


def half_way_change(g: Group, base: Group) -> float | None:
  """The group's relative PPL change from base at the last evaluation, shared by both mean
  curves, at or before half of the group's steps (None without one)."""
  shared = sorted(s for s in set(g.dev_curve) & set(base.dev_curve) if s <= g.steps / 2)
  if not shared:
    return None
  return g.dev_curve[shared[-1]] / base.dev_curve[shared[-1]] - 1


def crossing_step(g: Group, base: Group, paper_sign: float) -> int | None:
  """The first step, of those both mean curves share, from which g's curve stays on the paper's
  side of base's (sign(g - base) == paper_sign) to the last shared step; None if it is not on
  that side there (or no step is shared)."""
  shared = sorted(set(g.dev_curve) & set(base.dev_curve))
  crossed = None
  for step in reversed(shared):
    if np.sign(g.dev_curve[step] - base.dev_curve[step]) != paper_sign:
      break
    crossed = step
  return crossed


def spearman_along(rows: Sequence[Group]) -> tuple[list[tuple[int, float]], list[str]]:
  """([(step, Spearman of the mean dev PPL with the paper's PPL)], the groups counted): at every
  evaluation step shared by the mean curves of all groups with a paper PPL and a curve."""
  counted = [g for g in rows if g.paper.get("ppl") is not None and g.dev_curve]
  if len(counted) < 3:
    return [], []
  steps = sorted(set.intersection(*(set(g.dev_curve) for g in counted)))
  paper = [g.paper["ppl"] for g in counted]
  return ([(s, spearman([g.dev_curve[s] for g in counted], paper)) for s in steps],
          [g.group for g in counted])


def row_verdicts(rows: Sequence[Group]) -> dict[str, Verdict]:
  """A Verdict per group with a paper PPL, against base."""
  base = next((g for g in rows if g.row == "base" and g.paper.get("ppl") is not None), None)
  out = {}
  for g in rows:
    paper = g.paper.get("ppl")
    if paper is None:
      continue
    diverged = g.failed or not _finite(g.dev_ppl) or (
        base is not None and _finite(base.dev_ppl) and g.dev_ppl > DIVERGED_RATIO * base.dev_ppl)
    if base is None or g is base or not _finite(base.dev_ppl):
      out[g.group] = Verdict(diverged=bool(diverged))
      continue
    paper_delta = paper - base.paper["ppl"]
    v = dict(half=half_way_change(g, base), paper=paper / base.paper["ppl"] - 1,
             key=abs(paper_delta) > KEY_DELTA + 1e-9, diverged=bool(diverged))
    if _finite(g.dev_ppl):
      delta = g.dev_ppl - base.dev_ppl
      v["ours"] = g.dev_ppl / base.dev_ppl - 1
      if paper_delta != 0:
        v["direction"] = "same" if np.sign(delta) == np.sign(paper_delta) else "other"
        v["crossed"] = crossing_step(g, base, np.sign(paper_delta))
        v["curved"] = bool(set(g.dev_curve) & set(base.dev_curve))
        if len(g.dev_ppl_values) > 1 and len(base.dev_ppl_values) > 1:
          v["separated"] = (min(g.dev_ppl_values) > max(base.dev_ppl_values) if paper_delta > 0
                            else max(g.dev_ppl_values) < min(base.dev_ppl_values))
      if _finite(g.dev_ppl_range) and _finite(base.dev_ppl_range):
        v["resolved"] = bool(abs(delta) > max(g.dev_ppl_range, base.dev_ppl_range))
    out[g.group] = Verdict(**v)
  return out


def _spearman_of(rows: Sequence[Group], ours: str, paper: str) -> tuple[float, int]:
  """(Spearman of our `ours` figure with the paper's `paper` figure, the rows that have both)."""
  both = [g for g in rows if g.paper.get(paper) is not None and _finite(getattr(g, ours))]
  return spearman([getattr(g, ours) for g in both], [g.paper[paper] for g in both]), len(both)


def comparison(rows: Sequence[Group]) -> Comparison:
  """Both Spearman figures (all rows; key rows and base), the direction counts, diverged rows."""
  verdicts = row_verdicts(rows)
  named = lambda test: [name for name, v in verdicts.items() if test(v)]
  key_and_base = [g for g in rows if g.row == "base" or (g.group in verdicts and
                                                         verdicts[g.group].key)]
  along, along_groups = spearman_along(rows)
  spearman_ppl, spearman_rows = _spearman_of(rows, "dev_ppl", "ppl")
  spearman_bleu, bleu_rows = _spearman_of(rows, "tokenized_bleu", "bleu")
  key_ppl, key_rows = _spearman_of(key_and_base, "dev_ppl", "ppl")
  key_bleu, key_bleu_rows = _spearman_of(key_and_base, "tokenized_bleu", "bleu")
  return Comparison(
      spearman=spearman_ppl, spearman_rows=spearman_rows,
      bleu_spearman=spearman_bleu, bleu_spearman_rows=bleu_rows,
      key_spearman=key_ppl, key_spearman_rows=key_rows,
      key_bleu_spearman=key_bleu, key_bleu_spearman_rows=key_bleu_rows,
      same_direction=named(lambda v: v.direction == "same"),
      other_direction=named(lambda v: v.direction == "other"),
      paper_unchanged=named(lambda v: v.paper == 0),
      key_rows=named(lambda v: v.key),
      key_same=named(lambda v: v.key and v.direction == "same"),
      key_other=named(lambda v: v.key and v.direction == "other"),
      key_separated=named(lambda v: v.key and v.separated is True),
      unresolved=named(lambda v: v.resolved is False),
      diverged=named(lambda v: v.diverged),
      flipped=named(lambda v: _finite(v.half) and _finite(v.ours)
                    and np.sign(v.half) != np.sign(v.ours)),
      verdicts=verdicts, along=along, along_groups=along_groups)
