"""configs/positions.py's protocol, quick: `tfm sweep` trains rows of it (each row's two seeds as a
stack) on the fake corpus, evaluates every run by source length, and the report gives the table by
bucket, the hypothesis answered from the seeds, and the figure."""

import json
import math

import pytest

from tests.integration.conftest import sweep_overrides
from tfm import cli
from tfm.config import load_config
from tfm.sweep import by_length
from tfm.sweep.result import RunResult
from configs import positions


def test_the_protocol_as_configured():
  """The docstring's protocol is the config's: v3 base, train short (both sides <= L, filtered),
  the learned table covers the longest bucket's sources and their outputs, one row per encoding
  of the model, and the paper's hypothesis on the learned row."""
  base = load_config("configs/table3_v3.py:base")
  for row in positions.ROWS:
    c = load_config(f"configs/positions.py:{row}")
    assert c.model.positions == row and c.row == row and c.paper["claim"]
    assert c.data.max_length == positions.L == c.eval.length_buckets[0]
    assert c.data.overlong == "filter" and c.eval.length_buckets == (32, 48, 64, 128)
    assert c.model.max_length == 128 + c.eval.max_extra_length
    assert c.train.steps == positions.STEPS
    for key in ("d_model", "d_ff", "num_heads", "d_k", "dropout_rate", "num_encoder_layers"):
      assert getattr(c.model, key) == getattr(base.model, key), key
    assert (c.train.learning_rate, c.train.warmup_steps, c.train.label_smoothing) == (
        base.train.learning_rate, base.train.warmup_steps, base.train.label_smoothing)
    assert ("hypothesis" in c.paper) == (row == "learned")
  from tfm.model.config import POSITIONS
  assert sorted(positions.ROWS) == sorted(POSITIONS)
  assert load_config("configs/positions.py").rows == tuple(positions.ROWS)


@pytest.mark.long  # a sweep of 6 runs: CI runs it after the README's command
def test_a_quick_positions_sweep_reports_by_length(corpus, tmp_path, capsys):
  root = tmp_path / "positions"
  # The fake corpus's sentences are short: train on at most 12 pieces, test up to 64.
  overrides = sweep_overrides(corpus, 3, "data.max_length=12", "data.overlong=filter",
                              "eval.length_buckets=(12,24,64)", "model.max_length=69")
  argv = (["tfm", "sweep", "--config=configs/positions.py", f"--root={root}", "--eval_limit=4",
           "--rows=sinusoidal,learned,alibi", "--seeds=2", "--stack"]
          + [f"--config.{o}" for o in overrides])
  assert cli.main(argv) == 0
  results = [json.loads(line) for line in (root / "results.jsonl").read_text().splitlines()]
  assert sorted(r["name"] for r in results) == [f"{row}-s{s}" for row in ("alibi", "learned",
                                                                           "sinusoidal")
                                                for s in (0, 1)]
  for r in results:
    assert r["status"] == "ok"
    assert [b["bucket"] for b in r["by_length"]] == ["1-12", "13-24", "25-64"]
    assert sum(b["sentences"] for b in r["by_length"]) > 0
    evaluated = json.loads((root / r["name"] / "eval_dev_3_avg1_first4_len12-24-64.json").read_text())
    assert evaluated["by_length"] == r["by_length"]
  table = (root / "table.md").read_text()
  assert "## By source length" in table and (root / "by_length.png").stat().st_size > 10_000
  # The table's cells are the seeds' means, recomputed here from each run's evaluation.
  runs = {r["name"]: r for r in results}
  t = by_length.table([RunResult.from_json(r) for r in results])
  for row in ("sinusoidal", "learned", "alibi"):
    for k in range(3):
      values = [runs[f"{row}-s{s}"]["by_length"][k].get("bleu") for s in (0, 1)]
      values = [v for v in values if v is not None]
      if values:
        assert math.isclose(t.cells[row][k].bleu, sum(values) / len(values), rel_tol=1e-9)
    section = table[table.index("## By source length"):]
    line = next(x for x in section.splitlines() if x.startswith(f"| {row} |"))
    assert line.count("|") == 2 + 6  # BLEU and PPL in each of the 3 buckets
  assert "Against sinusoidal in the longest bucket (25-64)" in table  # the config's reference
  # The hypothesis is answered from the two seeds of each row in the longest bucket.
  answer = {"lower": "yes", "higher": "no", "within the seeds' spread": "within the seeds' spread",
            "": "not scored (fewer than two seeds)"}[
      by_length.verdict(t.cells["learned"][2], t.cells["sinusoidal"][2])]
  assert f"**{positions.PAPER_HYPOTHESIS}: {answer}**" in table
  assert "Press et al. 2022" in table  # each row's claim beside its longest bucket
