"""The sweep's arithmetic and outputs on hand-made results: ranks, Spearman, means over seeds, the
direction count, the table and the figure."""

import math

import numpy as np
import pytest

from tfm.sweep import report
from tfm.sweep.runs import Run, expand, parse_grid


@pytest.fixture(scope="module")
def spearmanr():
  """scipy's Spearman rank correlation, the independent reference. Imported here, not at the top:
  scipy.stats takes ~1.5 s to import, which every pytest worker would pay while collecting."""
  from scipy import stats  # pylint: disable=import-outside-toplevel
  return lambda x, y: stats.spearmanr(x, y).statistic


def test_ranks_share_ties():
  np.testing.assert_array_equal(report.ranks([10, 20, 20, 5]), [2, 3.5, 3.5, 1])


@pytest.mark.parametrize("seed", range(4))
def test_spearman_matches_scipy(seed, spearmanr):
  rng = np.random.default_rng(seed)
  x = rng.integers(0, 6, 15).astype(float)  # many ties
  y = x + rng.normal(0, 2, 15)
  assert report.spearman(x, y) == pytest.approx(spearmanr(x, y), abs=1e-12)


def test_spearman_by_hand():
  # ranks x: 1 2 3 4, y: 2 1 4 3 -> d = -1 1 -1 1, rho = 1 - 6 * 4 / (4 * 15) = 0.6
  assert report.spearman([1, 2, 3, 4], [20, 10, 40, 30]) == pytest.approx(0.6)
  assert report.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
  assert math.isnan(report.spearman([1, 2], [1, 2]))


def _result(row, seed, ppl, bleu, paper_ppl, status="ok"):
  return dict(name=f"{row}-s{seed}", group=row, row=row, seed=seed, index=0, status=status,
              error=None if status == "ok" else "tfm train exited with 1: boom",
              dev_ppl=ppl if status == "ok" else None, bleu=bleu, tokenized_bleu=bleu + 1,
              params=1_000_000, steps=10, tokens_seen=1000, wall_s=60.0, changes={},
              paper=dict(ppl=paper_ppl, bleu=25.0, params_m=65))


RESULTS = [
    _result("base", 0, 10.0, 5.0, 4.92), _result("base", 1, 12.0, 7.0, 4.92),
    _result("A1", 0, 13.0, 4.0, 5.29), _result("A1", 1, 13.0, 4.0, 5.29),  # up, as the paper
    _result("C5", 0, 9.0, 8.0, 4.66), _result("C5", 1, 0.0, 0.0, 4.66, status="failed"),  # down
    _result("C1", 0, 10.5, 6.0, 6.11),  # 10.5 < 11: down, the paper goes up
    _result("E", 0, 11.5, 6.0, 4.92),  # the paper: same as base
]


def test_groups_average_the_finished_seeds():
  g = {x["group"]: x for x in report.groups(RESULTS)}
  assert g["base"]["dev_ppl"] == 11.0 and g["base"]["dev_ppl_std"] == pytest.approx(math.sqrt(2))
  assert g["C5"]["finished"] == 1 and g["C5"]["runs"] == 2 and g["C5"]["dev_ppl"] == 9.0
  assert math.isnan(g["C5"]["dev_ppl_std"])  # one seed: no spread


def test_comparison_with_the_paper(spearmanr):
  c = report.comparison(report.groups(RESULTS))
  # ours: base 11, A1 13, C5 9, C1 10.5, E 11.5; paper: 4.92, 5.29, 4.66, 6.11, 4.92
  assert c["spearman"] == pytest.approx(spearmanr([11, 13, 9, 10.5, 11.5],
                                                  [4.92, 5.29, 4.66, 6.11, 4.92]))
  assert c["same_direction"] == ["A1", "C5"] and c["other_direction"] == ["C1"]
  assert c["paper_unchanged"] == ["E"]


def test_table_and_figure(tmp_path):
  paths = report.write_report(RESULTS, str(tmp_path), "tfm sweep --config=x --root=y")
  table = (tmp_path / "table.md").read_text()
  assert "| base | · | 2/2 | 11.00 ± 1.41 | 4.92 | 6.0 ± 1.4 | 7.0 ± 1.4 | 25.0 | 1.00 | 65 |" in table
  assert "Rows moving in the paper's direction relative to base (PPL): 2 of 3; against it: C1" in table
  assert "- C5-s1: tfm train exited with 1: boom" in table
  assert len((tmp_path / "results.jsonl").read_text().splitlines()) == len(RESULTS)
  png = tmp_path / "table3.png"
  assert str(png) in paths and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_figure_title_names_the_paper_only_when_it_is_drawn(tmp_path, monkeypatch):
  """A --grid sweep has no paper figures: its figure is not titled as a comparison with them."""
  assert "paper" in report.figure_title(True) and "paper" not in report.figure_title(False)
  titles = []
  monkeypatch.setattr(report, "figure_title", lambda with_paper: titles.append(with_paper) or "t")
  report.plot(RESULTS, str(tmp_path / "table.png"))
  grid = [dict(r, row=None, group=f"model.num_heads={i}", paper={}) for i, r in enumerate(RESULTS)]
  report.plot(grid, str(tmp_path / "grid.png"))
  assert titles == [True, False]


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
    (tmp_path / name / execute.RESULT).write_text(json.dumps(dict(name=name, row=row, index=index)))
  assert [r["name"] for r in execute.collect(str(tmp_path))] == [
      "base-s0", "base-s1", "A1-s0", "C7-s0", "C10-s0", "E-s0", "big-s0"]
