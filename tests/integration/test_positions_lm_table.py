"""configs/positions.py's lm form: its protocol as configured, and, quick, `tfm sweep` training two
of its rows (each row's two seeds as a stack) on the fake corpus and scoring every run at L, 2L
and 4L (eval.context_lengths; again by `tfm eval --context_lengths`), each piece once."""

import json

import pytest

from tests.integration.conftest import sweep_overrides
from tfm import cli
from tfm.config import load_config
from tfm.model.config import POSITIONS
from configs import positions

L = positions.LM_L


def _without_row(config) -> dict:
  """A row's config.json values without what names the row (its encoding, row and claims)."""
  values = config.to_dict()
  for key in ("row", "paper"):
    values.pop(key, None)
  values["model"].pop("positions")
  return values


def test_the_lm_protocol_as_configured():
  """The docstring's lm protocol is the config's: v3 base's layers and optimisation as a
  decoder-only lm of the Bible's English side, trained in rows of L, a learned table as long as
  the longest scored context, one row per encoding and nothing else different between rows."""
  base = load_config("configs/table3_v3.py:base")
  assert positions.LM_CONTEXTS == (L, 2 * L, 4 * L)
  assert load_config("configs/positions.py:lm").rows == positions.LM_ROWS
  assert sorted(r[len("lm_"):] for r in positions.LM_ROWS) == sorted(POSITIONS)
  reference = load_config("configs/positions.py:lm_sinusoidal")
  for row in positions.LM_ROWS:
    c = load_config(f"configs/positions.py:{row}")
    assert c.task == "lm" and c.model.architecture == "decoder_only" and c.data.text_key == "en"
    assert c.model.positions == row[len("lm_"):] and c.row == row and c.paper["claim"]
    assert c.model.num_decoder_layers == base.model.num_decoder_layers
    for key in ("d_model", "d_ff", "num_heads", "d_k", "d_v", "dropout_rate", "norm", "ffn",
                "vocab_size"):
      assert getattr(c.model, key) == getattr(base.model, key), key
    assert (c.train.learning_rate, c.train.warmup_steps, c.train.schedule) == (
        base.train.learning_rate, base.train.warmup_steps, base.train.schedule)
    assert c.train.label_smoothing == 0.0 and c.train.steps == positions.LM_STEPS
    assert c.data.max_length == L and c.data.tokens_per_batch == 64 * L
    assert c.data.dataset == base.data.dataset and c.eval.length_buckets == ()
    assert c.model.max_length == positions.LM_CONTEXTS[-1]  # learned: every scored position
    assert ("hypothesis" in c.paper) == (row == "lm_learned")
    assert c.paper.get("reference", False) == (row == "lm_sinusoidal")
    assert _without_row(c) == _without_row(reference), row
    # The form a sweep loads a row of --config=configs/positions.py:lm in is the same config.
    assert load_config(f"configs/positions.py:lm:{row}") == c
  with pytest.raises(ValueError, match="unknown row 'lm_sinusoids'"):
    load_config("configs/positions.py:lm_sinusoids")


@pytest.mark.long  # a sweep of 4 runs and their evaluations: CI runs it after the README's command
def test_a_quick_lm_positions_sweep_scored_at_each_context_length(corpus, tmp_path, capsys):
  root = tmp_path / "positions_lm"
  # Rows of 8 pieces, scored in rows of 8, 16 and 32: the learned table has 32 rows.
  overrides = sweep_overrides(corpus, 3, "model.num_encoder_layers=0", "data.max_length=8",
                              "data.tokens_per_batch=64", "model.max_length=32",
                              "eval.max_extra_length=0", "data.eval_max_examples=16",
                              "eval.context_lengths=(8,16,32)")
  argv = (["tfm", "sweep", "--config=configs/positions.py:lm", f"--root={root}",
           "--rows=lm_sinusoidal,lm_learned", "--seeds=2", "--stack"]
          + [f"--config.{o}" for o in overrides])
  assert cli.main(argv) == 0
  results = [json.loads(line) for line in (root / "results.jsonl").read_text().splitlines()]
  names = [f"{row}-s{s}" for row in ("lm_learned", "lm_sinusoidal") for s in (0, 1)]
  assert sorted(r["name"] for r in results) == names
  assert all(r["status"] == "ok" for r in results)
  # The sweep's own tfm eval scored eval.context_lengths: in its results and its report.
  assert all([x["context_length"] for x in r["context_lengths"]] == [8, 16, 32] for r in results)
  head = next(line for line in (root / "table.md").read_text().splitlines()
              if line.startswith("| row"))
  assert "| ppl@8 | ppl@16 | ppl@32 |" in head
  capsys.readouterr()
  for name in names:
    assert cli.main(["tfm", "eval", f"--workdir={root / name}", "--context_lengths=8,16,32"]) == 0
    [path] = (root / name).glob("eval_dev_*_ctx8-16-32.json")
    scored = json.loads(path.read_text())
    assert [x["context_length"] for x in scored["context_lengths"]] == [8, 16, 32]
    # Each piece of the set is scored once at every length: the same pieces, other rows.
    assert len({x["tokens"] for x in scored["context_lengths"]}) == 1
    assert scored["context_lengths"][0]["tokens"] == scored["target_tokens"]
    assert scored["context_lengths"][0]["perplexity"] == pytest.approx(scored["perplexity"],
                                                                       rel=1e-5)
  # --context_lengths=0: the run's eval.context_lengths overridden by none (the plain dev figures).
  assert cli.main(["tfm", "eval", f"--workdir={root / 'lm_sinusoidal-s0'}",
                   "--context_lengths=0"]) == 0
  [plain] = (root / "lm_sinusoidal-s0").glob("eval_dev_*_avg1.json")
  assert "context_lengths" not in json.loads(plain.read_text())
  # The learned table stops at model.max_length: a longer context is refused in one line.
  assert cli.main(["tfm", "eval", f"--workdir={root / 'lm_learned-s0'}",
                   "--context_lengths=64"]) != 0
  assert "past model.max_length (32)" in capsys.readouterr().err
