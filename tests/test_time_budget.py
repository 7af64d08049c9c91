"""The fast tier's time budget (tests/time_budget.py): when it applies and what it says."""

from pathlib import Path

import pytest

from tests import time_budget

ROOT = Path(__file__).resolve().parent.parent


def test_within_the_budget_passes_and_past_it_is_one_line_naming_the_slowest():
  phases = [("t/a.py::x", 2.0), ("t/a.py::x", 0.5), ("t/b.py::y", 1.0), ("t/a.py::x", 0.25),
            *((f"t/c.py::z[{i}]", 0.1 * i) for i in range(12))]
  total = 2.75 + 1.0 + 0.1 * sum(range(12))  # 10.35
  assert time_budget.verdict(phases, budget=total) is None  # the budget itself is within
  line = time_budget.verdict(phases, budget=10.0)
  assert "\n" not in line
  assert line.startswith("tfm: the fast tier's tests took 10.3 s summed (setup + call + teardown "
                         "of 14 tests), over its budget of 10 s (tests/time_budget.py); ")
  named = line.split("long tier: ")[1].split(", ")
  # The 10 slowest, each with its phases summed (x: 2 + 0.5 + 0.25), slowest first.
  assert named == ["t/a.py::x 2.8 s", "t/c.py::z[11] 1.1 s", "t/b.py::y 1.0 s",
                   "t/c.py::z[10] 1.0 s", "t/c.py::z[9] 0.9 s", "t/c.py::z[8] 0.8 s",
                   "t/c.py::z[7] 0.7 s", "t/c.py::z[6] 0.6 s", "t/c.py::z[5] 0.5 s",
                   "t/c.py::z[4] 0.4 s"]


def test_the_budget_applies_in_ci_or_where_set():
  assert time_budget.budget_s({}) is None
  assert time_budget.budget_s({"TFM_CI": "1"}) == time_budget.BUDGET_S
  assert time_budget.budget_s({"CI": "true"}) == time_budget.BUDGET_S
  assert time_budget.budget_s({"TFM_TEST_BUDGET_S": "500"}) == 500.0
  assert time_budget.budget_s({"TFM_TEST_BUDGET_S": "off", "TFM_CI": "1"}) is None
  for bad in ("-3", "0", "x", "nan"):
    with pytest.raises(ValueError, match=r"^TFM_TEST_BUDGET_S: expected a positive number of "
                                         rf"seconds or 'off', got '{bad}'$"):
      time_budget.budget_s({"TFM_TEST_BUDGET_S": bad})
  # The budget leaves room above the fast tier's summed durations when it was set (the README's
  # command on the CI machine), and is within the 10 minutes of 2 workers on a 1.92x slower one.
  assert 0 < time_budget.BUDGET_S * 1.92 / 2 < 600


@pytest.mark.parametrize("markexpr, keyword, args, where, narrowed, applies", [
    ("not long", "", ["tests"], ROOT, False, True),  # the README's command (testpaths)
    ("not  long ", "", [str(ROOT / "tests")], ROOT, False, True),
    ("not long", "", ["."], ROOT / "tests", False, True),  # from inside tests/
    ("not long", "", ["tests/"], ROOT, False, True),
    ("long", "", ["tests"], ROOT, False, False),  # the long tier
    ("", "", ["tests"], ROOT, False, False),  # both tiers
    ("not long and not slow", "", ["tests"], ROOT, False, False),
    ("not long", "robustness", ["tests"], ROOT, False, False),  # -k
    ("not long", "", ["tests/model"], ROOT, False, False),  # a directory
    ("not long", "", ["tests", "tests/model/test_remat.py"], ROOT, False, False),
    ("not long", "", ["tests/test_logs.py::test_upload"], ROOT, False, False),  # a test id
    ("not long", "", ["tests"], ROOT, True, False),  # --deselect, --lf, --ignore
])
def test_only_the_whole_fast_tier_is_held_to_it(markexpr, keyword, args, where, narrowed, applies):
  assert time_budget.whole_fast_tier(markexpr, keyword, args, where, ROOT / "tests",
                                     narrowed) is applies


def test_the_record_gives_each_files_summed_seconds(tmp_path):
  report = tmp_path / "durations.txt"
  report.write_text("1185 passed, 4 warnings in 336.90s (0:05:36)\n"
                    "13.38s call     tests/model/test_remat.py::test_remat_policy[full]\n"
                    "12.76s setup    tests/integration/test_plots.py::test_progress\n"
                    "1.10s teardown tests/model/test_remat.py::test_other\n"
                    "0.50s call     tests/integration/test_plots.py::test_progress\n"
                    "(10 durations < 0.005s hidden.  Use -vv to show these durations.)\n",
                    encoding="utf-8")
  seconds = time_budget.file_seconds(report)
  assert seconds.keys() == {"tests/model/test_remat.py", "tests/integration/test_plots.py"}
  assert seconds["tests/model/test_remat.py"] == pytest.approx(14.48)
  assert seconds["tests/integration/test_plots.py"] == pytest.approx(13.26)
  assert time_budget.file_seconds(tmp_path / "absent.txt") == {}
