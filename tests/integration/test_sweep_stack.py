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


@pytest.mark.long  # two sweeps: CI runs it after the README's command
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


def _rows_sweep(corpus, root, *flags):
  """Table 3 v3's base, D1 (no dropout) and D4 (label smoothing 0.2) on a tiny model."""
  tiny = [o for o in sweep_overrides(corpus, 4) if not o.startswith("model.dropout_rate")]
  argv = (["tfm", "sweep", "--config=configs/table3_v3.py", f"--root={root}", "--eval_limit=4",
           "--rows=base,D1,D4", *flags] + [f"--config.{o}" for o in tiny])
  return cli.main(argv)


@pytest.mark.long  # two sweeps: CI runs it after the README's command
def test_rows_that_differ_in_scalars_stack_and_give_their_runs_alone_results(corpus, tmp_path,
                                                                             capsys):
  """base, D1 and D4 differ in dropout and label smoothing only: --stack trains them as one stack
  (tfm train --members), and each run's result is its run's alone."""
  assert _rows_sweep(corpus, tmp_path / "alone") == 0
  assert _rows_sweep(corpus, tmp_path / "stacked", "--stack") == 0
  out = capsys.readouterr().out
  assert "3 to run in 1 stacks" in out and "[sweep] start base-s0, D1-s0, D4-s0 on" in out
  members = json.loads((tmp_path / "stacked" / "stacks" / "base-s0.json").read_text())["members"]
  assert [m["config"] for m in members] == [f"configs/table3_v3.py:{r}" for r in ("base", "D1",
                                                                                  "D4")]
  alone, stacked = _results(tmp_path / "alone"), _results(tmp_path / "stacked")
  for name, r in stacked.items():
    assert r["status"] == "ok" and r["trained_steps"] == 4
    assert r["fingerprint"] == alone[name]["fingerprint"]
    assert r["dev_ppl"] == pytest.approx(alone[name]["dev_ppl"], rel=1e-4)
    config = json.loads((tmp_path / "stacked" / name / "config.json").read_text())
    assert config["row"] == name.split("-")[0]  # each member's own config, its row's
  assert len({r["dev_ppl"] for r in stacked.values()}) == 3


def test_a_learning_rate_grid_stacks_and_shapes_do_not(corpus, tmp_path, capsys):
  """--dry_run: a grid over train.learning_rate and the seeds make one stack; a grid over
  model.d_ff (another shape) one stack a point."""
  tiny = sweep_overrides(corpus, 4)
  base = ["tfm", "sweep", "--config=configs/quickstart.py", f"--root={tmp_path}", "--seeds=2",
          "--stack", "--dry_run"] + [f"--config.{o}" for o in tiny]
  assert cli.main(base + ["--grid=train.learning_rate=0.5,2.0"]) == 0
  out = capsys.readouterr().out
  assert out.count("tfm train") == 1 and "--members=" in out
  assert not (tmp_path / "stacks").exists()  # a dry run writes nothing
  assert cli.main(base + ["--grid=model.d_ff=32,64"]) == 0
  out = capsys.readouterr().out
  assert out.count("tfm train") == 2 and out.count("--seeds=0,1") == 2
