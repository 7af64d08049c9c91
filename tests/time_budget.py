"""The fast tier's time budget: the README's test command fails when its tests' summed durations
grow past BUDGET_S.

The fast tier (`pytest -n 2 -m "not long"`) must finish within 10 minutes on a 2-core AVX2-only
machine, 1.92x slower than the 2-core AVX-512 Xeon CI runs on. Its wall time follows the summed
durations of its tests (setup + call + teardown, as `--durations` reports them) over the 2
workers, plus collection, so tests/conftest.py sums them and fails the session past the budget:
one line with the sum, the budget and the 10 slowest tests. It checks the whole fast tier only
(tests/ collected with -m "not long", no -k, no deselection, no last-failed), in CI (.ci/run sets
TFM_CI=1; CI=true also counts) or wherever TFM_TEST_BUDGET_S is set (a number of seconds, or
"off").
"""

from __future__ import annotations

import collections
import re
from pathlib import Path
from typing import Iterable, Mapping

# Seconds of the fast tier's summed test durations (2 workers): the most that keeps its wall time
# within 10 minutes on a 2-core AVX2-only machine (1.92x the CI machine's: 620 / 2 * 1.92 = 595 s).
# The last record (now.txt, a fresh clone on the CI machine: 1377 tests, 472 s summed, 249 s of
# wall time) is 24% under it: the machine's speed varies (one commit summed 594 s in a quiet run
# and 716 s in CI).
BUDGET_S = 620.0

FAST_TIER = "not long"

# The fast tier's per-test durations in its last quiet run on the CI machine (`--durations=0`),
# kept with the record of its time; tests/conftest.py orders the files by them.
RECORD = Path(__file__).resolve().parent.parent / "experiments/results/test_time/now.txt"


def budget_s(environ: Mapping[str, str]) -> float | None:
  """The budget to hold the fast tier to, or None for no check: TFM_TEST_BUDGET_S (seconds, or
  "off"), else BUDGET_S in CI (TFM_CI=1 or CI=true), else None."""
  given = environ.get("TFM_TEST_BUDGET_S", "").strip()
  if given.lower() == "off":
    return None
  if given:
    try:
      seconds = float(given)
    except ValueError:
      seconds = -1.0
    if not seconds > 0:
      raise ValueError(f"TFM_TEST_BUDGET_S: expected a positive number of seconds or 'off', "
                       f"got {given!r}")
    return seconds
  if environ.get("TFM_CI") == "1" or environ.get("CI", "").lower() == "true":
    return BUDGET_S
  return None


def whole_fast_tier(markexpr: str, keyword: str, args: Iterable[str], invocation_dir: Path,
                    tests_dir: Path, narrowed: bool) -> bool:
  """Whether a session runs the whole fast tier: -m "not long" (spaces aside), no -k, every path
  given is the tests directory itself (no file, no test id), and nothing else narrowed it
  (deselection, last-failed)."""
  paths = list(args)
  return (" ".join(markexpr.split()) == FAST_TIER and not keyword.strip() and not narrowed
          and bool(paths) and all((invocation_dir / p).resolve() == tests_dir.resolve()
                                  for p in paths))


def verdict(durations: Iterable[tuple[str, float]], budget: float, slowest: int = 10) -> str | None:
  """None when the summed seconds of `durations` ((test id, seconds) of each phase of each test:
  setup, call, teardown) are within `budget`; otherwise one line naming the sum, the budget and
  the `slowest` tests, each with its phases summed."""
  per_test: dict[str, float] = collections.defaultdict(float)
  for test, seconds in durations:
    per_test[test] += seconds
  total = sum(per_test.values())
  if total <= budget:
    return None
  worst = sorted(per_test.items(), key=lambda item: (-item[1], item[0]))[:slowest]
  return (f"tfm: the fast tier's tests took {total:.1f} s summed (setup + call + teardown of "
          f"{len(per_test)} tests), over its budget of {budget:g} s (tests/time_budget.py); "
          f"make the slowest cheaper or move them to the long tier: "
          + ", ".join(f"{test} {seconds:.1f} s" for test, seconds in worst))


def file_seconds(report: Path) -> dict[str, float]:
  """{test file, as the report names it: its tests' setup, call and teardown seconds summed} from
  a pytest --durations report; {} without one."""
  seconds: dict[str, float] = collections.defaultdict(float)
  try:
    lines = report.read_text(encoding="utf-8").splitlines()
  except OSError:
    return {}
  for line in lines:
    match = re.match(r"([0-9.]+)s (?:setup|call|teardown)\s+([^:\s]+)::", line)
    if match:
      seconds[match.group(2)] += float(match.group(1))
  return dict(seconds)
