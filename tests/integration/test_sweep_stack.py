"""`tfm sweep --stack`: a group's seeds trained as one stack (tfm train --seeds), each run's result,
log and publication as a sweep of runs alone gives them, to float rounding."""

import json

import pytest

from tests.integration.conftest import sweep_overrides
from tfm import cli


def _sweep(corpus, root, published, *flags):
  argv = (["tfm", "sweep", "--config=configs/quickstart.py", f"--root={root}", "--eval_limit=4",
           "--seeds=2", f"--publish={published}", *flags]
          + [f"--config.{o}" for o in sweep_overrides(corpus, 4, "model.dropout_rate=0.2")])
  return cli.main(argv)


def _results(root):
  return {r["name"]: r for r in map(json.loads, (root / "results.jsonl").read_text().splitlines())}


@pytest.mark.slow
def test_a_stacked_sweep_gives_the_runs_alone_results(corpus, tmp_path, capsys):
  assert _sweep(corpus, tmp_path / "alone", tmp_path / "published_alone") == 0
  assert _sweep(corpus, tmp_path / "stacked", tmp_path / "published", "--stack") == 0
  out = capsys.readouterr().out
  assert "2 to run in 1 stacks" in out and "[sweep] start run-s0, run-s1 on" in out
  alone, stacked = _results(tmp_path / "alone"), _results(tmp_path / "stacked")
  assert sorted(stacked) == ["run-s0", "run-s1"]
  for name, r in stacked.items():
    assert r["status"] == "ok" and r["trained_steps"] == 4
    assert r["fingerprint"] == alone[name]["fingerprint"]  # the same runs: taken for each other
    assert r["dev_ppl"] == pytest.approx(alone[name]["dev_ppl"], rel=1e-4)
    assert [s for s, _ in r["dev_curve"]] == [s for s, _ in alone[name]["dev_curve"]]
    log = (tmp_path / "stacked" / name / "sweep.log").read_text()
    assert f"[train {name}] step 4/4" in log and "tfm eval --workdir=" in log
    assert (tmp_path / "published" / name / "sweep_result.json").exists()
  assert stacked["run-s0"]["dev_ppl"] != stacked["run-s1"]["dev_ppl"]
  # A sweep of runs alone on a fresh root takes the stack's published runs: nothing trains.
  assert _sweep(corpus, tmp_path / "fresh", tmp_path / "published") == 0
  assert "2 finished before, 0 to run" in capsys.readouterr().out
