"""experiments/gpu/kernels.py: the probe's figures read from tfm's output, the rule that picks the
sweep's kernels, and the check that keeps flags this XLA does not know out of a candidate."""

import os
from pathlib import Path

from experiments.gpu import kernels

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "experiments" / "results" / "gpu" / "2026-11-27_h200_kernels" / "probe.txt"


def _rows(text: str) -> list[dict]:
  """One row a candidate of a probe.txt, as kernels.probe makes them."""
  rows = []
  for candidate, part in zip(kernels.CANDIDATES, text.split("\n# candidate ")[1::2]):
    row = {**candidate.record(), **kernels.figures(part)}
    row["ok"] = kernels.measured(row)
    rows.append(row)
  return rows


def test_the_h200_probe_chooses_tf32():
  """The node's probe output: step times printed as 0.0117 and as 6.270e-03 both read as seconds,
  and the rule picks c (5.0 ms, loss within 0.003 of a's) over b (6.3 ms) and a (11.7 ms)."""
  rows = _rows(PROBE.read_text())
  assert [r["candidate"] for r in rows] == ["a", "b", "c"]
  assert [r["step_s"][500] for r in rows] == [0.0117, 0.006339, 0.005006]
  assert [r["loss"][500] for r in rows] == [4.7403, 4.7385, 4.7377]
  assert [r["compile_s"] for r in rows] == [21.7, 15.5, 16.9]
  assert kernels.choose(rows)["candidate"] == "c"
  assert [r.get("verdict") for r in rows] == [None, "kept", "kept"]


def test_a_candidate_off_by_the_seeds_half_spread_is_not_kept():
  rows = _rows(PROBE.read_text())
  a = rows[0]["loss"]
  rows[2]["loss"] = {250: a[250], 500: a[500] + kernels.TOLERANCE[500] + 1e-6}  # just beyond
  rows[1]["loss"] = {250: a[250] - kernels.TOLERANCE[250] - 1e-6, 500: a[500]}
  assert kernels.choose(rows)["candidate"] == "a"
  assert "off by >= 0.011" in rows[2]["verdict"] and "off by >= 0.02" in rows[1]["verdict"]
  rows[1]["loss"] = {250: a[250] - 0.019, 500: a[500] + 0.0109}  # inside both
  assert kernels.choose(rows)["candidate"] == "b"
  rows[1].update(ok=False, error="no train figures")  # a candidate without figures never wins
  assert kernels.choose(rows)["candidate"] == "a"


def test_unknown_flags_are_found_before_a_run_starts():
  known = {}
  bogus = kernels.Candidate("x", "a flag XLA lacks", ("--xla_gpu_autotune_level=0",
                                                      "--xla_no_such_flag=1"), "highest")
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  assert kernels.unknown_flags(bogus, env, known) == ["--xla_no_such_flag=1"]
  assert kernels.unknown_flags(kernels.CANDIDATES[2], env, known) == []
  assert known == {"--xla_gpu_autotune_level=0": True, "--xla_no_such_flag=1": False,
                   **{flag: True for flag in kernels.CUBLAS}}
