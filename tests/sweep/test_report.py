"""The sweep's arithmetic and outputs on hand-made results: ranks, Spearman, means over seeds, the
direction count, the table and the figure."""

import dataclasses
import math

import numpy as np
import pytest

from tfm.sweep import compare, report
from tfm.sweep.result import RunResult
from tfm.sweep.runs import Run, expand, parse_grid


@pytest.fixture(scope="module")
def spearmanr():
  """scipy's Spearman rank correlation, the independent reference. Imported here, not at the top:
  scipy.stats takes ~1.5 s to import, which every pytest worker would pay while collecting."""
  from scipy import stats  # pylint: disable=import-outside-toplevel
  return lambda x, y: stats.spearmanr(x, y).statistic


def test_ranks_share_ties():
  np.testing.assert_array_equal(compare.ranks([10, 20, 20, 5]), [2, 3.5, 3.5, 1])


@pytest.mark.parametrize("seed", range(4))
def test_spearman_matches_scipy(seed, spearmanr):
  rng = np.random.default_rng(seed)
  x = rng.integers(0, 6, 15).astype(float)  # many ties
  y = x + rng.normal(0, 2, 15)
  assert compare.spearman(x, y) == pytest.approx(spearmanr(x, y), abs=1e-12)


def test_spearman_by_hand():
  # ranks x: 1 2 3 4, y: 2 1 4 3 -> d = -1 1 -1 1, rho = 1 - 6 * 4 / (4 * 15) = 0.6
  assert compare.spearman([1, 2, 3, 4], [20, 10, 40, 30]) == pytest.approx(0.6)
  assert compare.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
  assert math.isnan(compare.spearman([1, 2], [1, 2]))


def _result(row, seed, ppl, bleu, paper_ppl, paper_bleu, status="ok", curve=None):
  return RunResult(name=f"{row}-s{seed}", group=row, row=row, seed=seed, index=0, status=status,
              error=None if status == "ok" else "tfm train exited with 1: boom",
              dev_ppl=ppl if status == "ok" else None, bleu=bleu, tokenized_bleu=bleu + 1,
              params=1_000_000, steps=10, tokens_seen=1000, wall_s=60.0, changes={},
              paper=dict(ppl=paper_ppl, bleu=paper_bleu, params_m=65), dev_curve=curve)


RESULTS = [
    # 10 steps, dev evaluated every 3: the last fifth counts from step 6 (the last at or before 8)
    _result("base", 0, 10.0, 5.0, 4.92, 25.8, curve=[[3, 20.0], [6, 12.5], [9, 10.0]]),
    _result("base", 1, 12.0, 7.0, 4.92, 25.8, curve=[[3, 20.0], [6, 12.0], [9, 12.0]]),
    _result("A1", 0, 13.0, 4.0, 5.29, 24.9), _result("A1", 1, 13.0, 4.0, 5.29, 24.9),  # up, as the
    # paper, by 2 = base's seed range: not beyond the seeds
    _result("A2", 0, 14.0, 3.0, 5.00, 25.5), _result("A2", 1, 14.5, 3.0, 5.00, 25.5),  # up by 3.25
    # > 2: beyond the seeds; the paper's +0.08 is no key row
    _result("C5", 0, 9.0, 8.0, 4.66, 26.0),
    _result("C5", 1, 0.0, 0.0, 4.66, 26.0, status="failed"),  # down, as the paper; a seed failed
    _result("C1", 0, 10.5, 6.0, 6.11, 23.7),  # 10.5 < 11: down, the paper goes up
    _result("C3", 0, 30.0, 0.5, 4.88, 25.5, curve=[[6, 29.8], [9, 30.0]]),  # over twice base's
    # 11: diverged
    _result("E", 0, 11.5, 6.0, 4.92, 25.7),  # the paper: same as base
]


def test_groups_average_the_finished_seeds():
  g = {x.group: x for x in compare.groups(RESULTS)}
  assert g["base"].dev_ppl == 11.0 and g["base"].dev_ppl_std == pytest.approx(math.sqrt(2))
  assert g["base"].dev_ppl_range == 2.0 and g["A2"].dev_ppl_range == 0.5
  assert g["C5"].finished == 1 and g["C5"].runs == 2 and g["C5"].dev_ppl == 9.0
  assert math.isnan(g["C5"].dev_ppl_std) and math.isnan(g["C5"].dev_ppl_range)  # one seed


def test_comparison_with_the_paper(spearmanr):
  c = compare.comparison(compare.groups(RESULTS))
  names = ["base", "A1", "A2", "C5", "C1", "C3", "E"]
  ours = [11, 13, 14.25, 9, 10.5, 30, 11.5]
  paper = [4.92, 5.29, 5.00, 4.66, 6.11, 4.88, 4.92]
  assert c.spearman == pytest.approx(spearmanr(ours, paper)) and c.spearman_rows == 7
  tokenized = [7, 5, 4, 9, 7, 1.5, 7]  # BLEU + 1, the seeds' mean
  paper_bleu = [25.8, 24.9, 25.5, 26.0, 23.7, 25.5, 25.7]
  assert c.bleu_spearman == pytest.approx(spearmanr(tokenized, paper_bleu))
  assert c.same_direction == ["A1", "A2", "C5"] and c.other_direction == ["C1", "C3"]
  assert c.paper_unchanged == ["E"]
  # Key rows: the paper's PPL differs from base's 4.92 by more than 0.1 (A2's 0.08 and C3's 0.04
  # do not).
  assert c.key_rows == ["A1", "C5", "C1"] and c.key_same == ["A1", "C5"]
  assert c.key_other == ["C1"]
  assert c.unresolved == ["A1"]  # A2 is beyond the seeds; one-seed rows are not judged
  assert c.diverged == ["C5", "C3"]  # a failed seed; over 2 x 11
  v = c.verdicts
  assert v["A1"].ours == pytest.approx(13 / 11 - 1) and v["A1"].paper == pytest.approx(5.29 / 4.92 - 1)
  assert v["A2"].resolved is True and v["C5"].resolved is None


def test_late_change_counts_from_the_last_evaluation_at_or_before_four_fifths():
  assert compare.late_change([[9, 10.0], [3, 20.0], [6, 12.5]], 10) == (pytest.approx(-0.2), 6)
  assert compare.late_change([[250 * i, 100.0 / i] for i in range(1, 13)], 3000) == (
      pytest.approx(9 / 12 - 1), 2250)
  assert compare.late_change([[9, 10.0]], 10) is None  # nothing at or before step 8
  assert compare.late_change([[2, 10.0], [8, 9.0]], 10) is None  # nothing after step 8
  assert compare.late_change(None, 10) is None
  g = {x.group: x for x in compare.groups(RESULTS)}
  assert g["base"].late_change == pytest.approx((-0.2 + 0.0) / 2) and g["base"].late_from == [6]
  assert math.isnan(g["A1"].late_change) and g["A1"].late_from == []


def _curved(row, seed, paper_ppl, curve):
  return _result(row, seed, curve[-1][1], 5.0, paper_ppl, 25.0, curve=curve)


# 10 steps, dev every 2. Half way is step 4 (the last evaluation at or before 10 / 2 = 5).
CURVED = [
    _curved("base", 0, 4.92, [[2, 30.0], [4, 20.0], [6, 14.0], [8, 12.0], [10, 11.0]]),
    _curved("base", 1, 4.92, [[2, 34.0], [4, 22.0], [6, 16.0], [8, 12.0], [10, 11.0]]),
    # below base half way (18 vs 21), above it at the end (12 vs 11): the other side
    _curved("A1", 0, 5.29, [[2, 28.0], [4, 18.0], [6, 14.0], [8, 12.5], [10, 12.0]]),
    # a seed that evaluated step 3 too: only the steps both seeds share count
    _curved("A1", 1, 5.29, [[2, 28.0], [3, 24.0], [4, 18.0], [6, 14.0], [8, 12.5], [10, 12.0]]),
    _curved("C1", 0, 6.11, [[2, 40.0], [4, 25.0], [6, 17.0], [8, 14.0], [10, 13.0]]),
    _curved("C5", 0, 4.66, [[2, 25.0], [4, 21.5], [6, 15.0], [8, 11.0], [10, 10.0]]),
    _result("E", 0, 11.5, 6.0, 4.92, 25.7),  # no curve: left out of the Spearman along training
]


def test_mean_curves_half_way_changes_and_spearman_along_training(spearmanr):
  g = {x.group: x for x in compare.groups(CURVED)}
  assert g["base"].dev_curve == {2: 32.0, 4: 21.0, 6: 15.0, 8: 12.0, 10: 11.0}
  assert sorted(g["A1"].dev_curve) == [2, 4, 6, 8, 10] and g["E"].dev_curve == {}
  assert compare.mean_curve([CURVED[0], CURVED[-1]]) == {}  # one run without a curve
  c = compare.comparison(list(g.values()))
  v = c.verdicts
  assert v["A1"].half == pytest.approx(18 / 21 - 1) and v["A1"].ours == pytest.approx(1 / 11)
  assert v["C5"].half == pytest.approx(21.5 / 21 - 1) and v["E"].half is None
  assert c.flipped == ["A1", "C5"]  # C5: above base half way, below at the end
  along, counted = c.along, c.along_groups
  assert counted == ["base", "A1", "C1", "C5"]
  paper = [4.92, 5.29, 6.11, 4.66]
  means = {2: [32, 28, 40, 25], 4: [21, 18, 25, 21.5], 6: [15, 14, 17, 15], 8: [12, 12.5, 14, 11],
           10: [11, 12, 13, 10]}
  assert [s for s, _ in along] == [2, 4, 6, 8, 10]
  for step, rho in along:
    assert rho == pytest.approx(spearmanr(means[step], paper), abs=1e-12)
  table = report.table_markdown(CURVED)
  assert "| A1 * | · | 2/2 | 12.00 ± 0.00 |" in table and "| +9.1% | -14.3% | +7.5% |" in table
  assert ("at each dev evaluation during training (4 rows with dev curves), by step: "
          f"2 {along[0][1]:.2f}, 4 {along[1][1]:.2f},") in table
  assert "- Rows on the other side of base at the end than half way: A1, C5." in table


def test_where_key_rows_cross_base_and_the_key_rows_spearman(spearmanr):
  """Mean curves against base's {2: 32, 4: 21, 6: 15, 8: 12, 10: 11}: A1 (the paper: above base)
  is below until step 6 and above from 8; C1 above from the start; C5 (the paper: below) is below
  at 2, above at 4, level at 6, below from 8 to the end."""
  c = compare.comparison(compare.groups(CURVED))
  v = c.verdicts
  assert (v["A1"].crossed, v["C1"].crossed, v["C5"].crossed) == (8, 2, 8)
  assert v["E"].crossed is None and not v["E"].curved  # no curve (and the paper: no change)
  assert compare.crossing_step(compare.groups(CURVED)[2], compare.groups(CURVED)[0], -1) is None
  assert c.key_rows == ["A1", "C1", "C5"] and c.key_spearman_rows == 4  # and base
  assert c.key_spearman == pytest.approx(spearmanr([11, 12, 13, 10], [4.92, 5.29, 6.11, 4.66]))
  assert c.key_separated == ["A1"]  # 12, 12 against base 11, 11; C1, C5: one seed, not scored
  table = report.table_markdown(CURVED, gpu_calls=[dict(device="NVIDIA H200", seconds=300.0),
                                                   dict(device="NVIDIA H200", seconds=150.0)])
  assert "| +9.1% | -14.3% | +7.5% | yes | yes | 8 |" in table
  assert "GPU time: 2 call(s) on NVIDIA H200, 7.5 minutes in all" in table


def test_every_seed_beyond_every_seed_of_base():
  """A1's seeds 13 and 13 against base's 10 and 12: every one above, as the paper's A1; one more
  A1 seed at 11.5 sits inside base's and breaks it."""
  assert compare.comparison(compare.groups(RESULTS)).key_separated == ["A1"]
  mixed = RESULTS + [dataclasses.replace(RESULTS[2], name="A1-s2", seed=2, dev_ppl=11.5)]
  assert compare.comparison(compare.groups(mixed)).key_separated == []


def test_table_and_figure(tmp_path):
  paths = report.write_report(RESULTS, str(tmp_path), "tfm sweep --config=x --root=y")
  table = (tmp_path / "table.md").read_text()
  assert ("| base | · | 2/2 | 11.00 ± 1.41 | -10.0% | 4.92 |  |  |  |  |  |  | 6.0 ± 1.4 | "
          "7.0 ± 1.4 | 25.8 | 1.00 | 65 |") in table
  assert ("| A1 * | · | 2/2 | 13.00 ± 0.00 |  | 5.29 | +18.2% |  | +7.5% | yes | no |  | "
          "4.0 ± 0.0 | 5.0 ± 0.0 | 24.9 |") in table  # no curves: no crossing
  assert "| A2 | · | 2/2 | 14.25 ± 0.35 |  | 5.00 | +29.5% |  | +1.6% | yes | yes |  |" in table
  assert "| C1 * | · | 1/1 | 10.50 |  | 6.11 | -4.5% |  | +24.2% | **no** |  |  |" in table
  assert "| C3 | · | 1/1 | 30.00 | +0.7% | 4.88 |" in table
  assert ("(step 6) to the last one, averaged over the seeds. Still falling by 1% or more there, "
          "so not converged: 1 of 2 "
          "(base).") in table
  assert ("Key rows in the paper's direction: 2 of 3 scored (3 key rows); against it: C1; every "
          "seed on the paper's side of every seed of base: A1.") in table
  assert "All rows in the paper's direction: 3 of 5; the paper's PPL equals base's for E." in table
  assert "Changes within the seeds' spread: A1." in table
  assert "Diverged (failed, non-finite, or over 2x base's PPL): C5, C3." in table
  assert "- C5-s1: tfm train exited with 1: boom" in table
  assert "## At a glance (docs/table3.md's copy)\n\n" + report.glance_markdown(RESULTS) in table
  assert "each dev evaluation during training" not in table  # two rows with curves: no Spearman
  assert len((tmp_path / "results.jsonl").read_text().splitlines()) == len(RESULTS)
  png = tmp_path / "table3.png"
  assert str(png) in paths and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_figure_title_names_the_paper_only_when_it_is_drawn(tmp_path):
  """A --grid sweep has no paper figures: its figure is not titled as a comparison with them."""
  from tfm.figures import sweep as sweep_figure  # pylint: disable=import-outside-toplevel
  table = sweep_figure.plot(compare.groups(RESULTS), str(tmp_path / "table.png"))
  grid = [dataclasses.replace(r, row=None, group=f"model.num_heads={i}", paper={})
          for i, r in enumerate(RESULTS)]
  title = sweep_figure.plot(compare.groups(grid), str(tmp_path / "grid.png"))
  assert "paper" in table and "paper" not in title
  assert (tmp_path / "table.png").exists() and (tmp_path / "grid.png").exists()
  assert sweep_figure.plot([], str(tmp_path / "none.png")) is None
  # The first run of a table sweep to finish, base alone: its perplexity, no change from base yet.
  base_only = sweep_figure.plot(compare.groups(RESULTS[:2]), str(tmp_path / "base.png"))
  assert base_only == "Dev perplexity per run group" and (tmp_path / "base.png").exists()
  assert not (tmp_path / "none.png").exists()


def test_runs_and_grid():
  grid = parse_grid(["model.num_heads=1,4", "train.label_smoothing=0,0.1"])
  runs = expand("configs/table3.py", ["A1", "B2"], grid, seeds=2, overrides=["train.steps=5"])
  assert len(runs) == 2 * 4 * 2 and len({r.name for r in runs}) == len(runs)
  r = runs[3]
  assert r.name == "A1+model.num_heads=1,train.label_smoothing=0.1-s1" and r.spec == "configs/table3.py:A1"
  assert r.config_overrides() == ["train.steps=5", "model.num_heads=1", "train.label_smoothing=0.1",
                                  "train.seed=1", "data.shuffle_seed=1"]
  config = r.load()
  assert (config.model.num_heads, config.train.label_smoothing, config.train.seed) == (1, 0.1, 1)
  assert Run("c.py", None, (), 0).name == "run-s0"
  for bad in (["model.num_heads"], ["num_heads=1"], ["model.num_heads=1,,2"]):
    with pytest.raises(ValueError, match="--grid"):
      parse_grid(bad)
  with pytest.raises(ValueError, match="given twice"):
    parse_grid(["model.d_k=1", "model.d_k=2"])
  with pytest.raises(ValueError, match="--seeds"):
    expand("c.py", [None], [], seeds=0)
  with pytest.raises(ValueError, match=r"run A1\+model.num_kv_heads=3-s0: config key model\.num_kv_heads"):
    expand("configs/table3.py", ["A1"], parse_grid(["model.num_kv_heads=3"]), 1)[0].load()


def test_collect_orders_table_rows_as_the_paper_whichever_sweep_ran_them(tmp_path):
  """Rows run by separate invocations (--rows=E,big after the rest) still come back base, A1..E,
  big; seeds of a row stay together."""
  import json  # pylint: disable=import-outside-toplevel
  from tfm.sweep import execute  # pylint: disable=import-outside-toplevel
  runs = [("E-s0", "E", 0), ("big-s0", "big", 1), ("base-s1", "base", 1), ("C10-s0", "C10", 0),
          ("A1-s0", "A1", 2), ("C7-s0", "C7", 0), ("base-s0", "base", 0)]
  for name, row, index in runs:
    (tmp_path / name).mkdir()
    (tmp_path / name / execute.RESULT).write_text(json.dumps(dict(
        name=name, group=row, row=row, index=index, seed=0, steps=10)))
  assert [r.name for r in execute.collect(str(tmp_path))] == [
      "base-s0", "base-s1", "A1-s0", "C7-s0", "C10-s0", "E-s0", "big-s0"]


def test_glance_tables():
  """docs/table3.md's copy: rows as columns, changes in percent of base's PPL, every mark explained by
  the fixture's numbers (base 11, A1 13 within base's range of 2, C1 10.5 against the paper's +24%,
  C3 30 over twice base's, C5 on one seed, E's paper PPL equal to base's)."""
  tables, legend = report.glance_markdown(RESULTS, per_table=4).rstrip("\n").rsplit("\n\n", 1)
  first, second = tables.split("\n\n")
  assert first.splitlines() == [
      "| | base | **A1** | A2 | **C5** |", "|---|---|---|---|---|",
      "| dev PPL | 11.0 | 13.0 | 14.2 | 9.0 (1 of 2 failed) |",
      "| ours vs base |  | +18%~ | +30% | -18% |",  # 2/11, 3.25/11, -2/11
      "| paper vs base |  | +7.5% | +1.6% | -5.3% |"]  # 5.29/4.92 - 1, 5.00/4.92 - 1, 4.66/4.92 - 1
  assert second.splitlines() == [
      "| | **C1** | C3 | E |", "|---|---|---|---|",
      "| dev PPL | 10.5 | 30.0 (diverged) | 11.5 |",
      "| ours vs base | **-4.5%** | **+173%** | +4.5% |",
      "| paper vs base | +24% | -0.8% | 0% |"]
  # ranks of ours 3 5 6 1 2 7 4, of the paper's 3.5 6 5 1 7 2 3.5: Pearson on ranks 0.054
  assert "Spearman with the paper: 0.05 over 7 rows (dev PPL)" in " ".join(legend.splitlines())
  assert "0.50 over 7 (tok. BLEU)" in " ".join(legend.splitlines())
  assert report.glance_markdown([r for r in RESULTS if r.group != "E"]).count("\n\n") == 1  # 1 table
  assert report.glance_markdown([r for r in RESULTS if r.group != "base"]) == ""  # no changes


@pytest.mark.parametrize("change, shown", [(0.097, "+9.7%"), (0.0996, "+10%"), (-0.0994, "-9.9%"),
                                           (0.0004, "+0.0%"), (0.0, "0%"), (1.734, "+173%")])
def test_glance_percent(change, shown):
  assert report._short_percent(change) == shown  # pylint: disable=protected-access


@pytest.mark.parametrize("rows", [["base"], ["base", "A1"]])
def test_a_grid_over_table_rows_is_titled_and_labelled_by_its_groups(rows, tmp_path):
  """`tfm sweep --config=configs/table3_mini.py:base --grid train.learning_rate=0.5,1` (or over
  several rows): the rows carry the paper's figures, the grid's points do not, so the figure is
  each group's perplexity, named by the group, not Table 3's comparison with every tick 'base'."""
  from tfm.figures import sweep as sweep_figure  # pylint: disable=import-outside-toplevel
  runs = expand("configs/table3_mini.py", rows, parse_grid(["train.learning_rate=0.5,1"]), seeds=1)
  paper = {"base": 4.92, "A1": 5.29}
  results = [_result(r.row, r.seed, 10.0 + i, 5.0, paper[r.row], 25.8) for i, r in enumerate(runs)]
  results = [dataclasses.replace(res, name=r.name, group=r.group) for res, r in zip(results, runs)]
  fig, title = sweep_figure.draw(compare.groups(results))
  (ax,) = [a for a in fig.axes if a.get_xticklabels()]
  labels = [t.get_text() for t in ax.get_xticklabels()]
  assert labels == [r.group for r in runs] == [
      f"{row}+train.learning_rate={v}" for row in rows for v in ("0.5", "1")]
  assert title == ("Dev perplexity per run group over train.learning_rate (rows "
                   f"{', '.join(rows)})")
  assert "Table 3" not in title and "paper" not in title
  # Each group's own PPL (one seed: the marks and both error caps at it; not the rows' separators).
  heights = [list(line.get_ydata()) for line in ax.get_lines() if len(line.get_ydata()) == len(runs)]
  assert heights and all(h == [10.0 + i for i in range(len(runs))] for h in heights)
  # And its file is named as a sweep's, not as Table 3's.
  written = report.write_report(results, str(tmp_path))
  assert (tmp_path / "sweep.png").exists() and not (tmp_path / "table3.png").exists(), written


def test_the_grid_table_shows_chrf_and_ter_beside_bleu():
  """A grid's groups: chrF and TER as the seeds' mean and std, after the two BLEUs; – for a run
  whose evaluation predates them."""
  runs = [RunResult(name=f"g-s{s}", group="g", row=None, seed=s, index=s, steps=10, status="ok",
                    dev_ppl=5.0, bleu=20.0, tokenized_bleu=21.0, chrf=c, ter=t)
          for s, (c, t) in enumerate([(40.0, 60.0), (42.0, 58.0)])]
  old = RunResult(name="h-s0", group="h", row=None, seed=0, index=2, steps=10, status="ok",
                  dev_ppl=5.0, bleu=20.0, tokenized_bleu=21.0)
  table = report.table_markdown(runs + [old])
  assert "| row | changes | seeds | dev PPL | last fifth | BLEU | tok. BLEU | chrF | TER |" in table
  assert "| 20.0 ± 0.0 | 21.0 ± 0.0 | 41.0 ± 1.4 | 59.0 ± 1.4 |" in table
  assert "| 20.0 | 21.0 | – | – |" in table


def test_the_legend_counts_the_pairs_a_learned_table_left_out_of_bleu():
  """A run whose learned position table is too short for some dev sources scores BLEU over the
  others (the evaluation's sentences, sentences_dropped): the legend counts the first pairs both
  runs were given and names the run that scored fewer, not 'the first 1 / 8 dev sentences'."""
  base = dict(group="g", row=None, index=0, steps=10, status="ok", dev_ppl=5.0, tokenized_bleu=1.0)
  evaluation = dict(perplexity=5.0, bleu=2.0, checkpoints=[10])
  learned = RunResult(name="learned-s0", seed=0, **base).with_eval(
      dict(evaluation, sentences=1, sentences_dropped=7))
  whole = RunResult(name="sinusoidal-s0", seed=1, **base).with_eval(
      dict(evaluation, sentences=8, sentences_dropped=0))
  assert (learned.bleu_sentences, learned.bleu_dropped) == (1, 7)
  table = report.table_markdown([learned, whole])
  assert "both BLEUs over the first 8 dev sentences" in table
  assert "left untranslated: learned-s0 over 1 of 8" in table
  assert "sinusoidal-s0 over" not in table
  # An evaluation written before sentences_dropped: its sentences, as before.
  old = RunResult(name="old-s0", seed=0, **base).with_eval(dict(evaluation, sentences=200))
  assert "the first 200 dev sentences (dev PPL" in report.table_markdown([old])
