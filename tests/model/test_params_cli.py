"""`tfm params`: counts of the models as built, against Table 3 (PAPER.md's vocabulary note)."""

import json

import pytest

from tfm import cli


@pytest.mark.slow
def test_table3_counts_match_the_paper_with_the_padded_vocabulary(capsys):
  assert cli.main(["tfm", "params", "--config", "configs/table3.py", "--vocab-size", "40960", "--json"]) == 0
  rows = {r["row"]: r for r in json.loads(capsys.readouterr().out)}
  assert len(rows) == 20 and set(rows["base"]) == {"row", "params", "paper_params"}
  assert rows["base"]["params"] == 65_110_016  # 40960*512 + 6 * 3,152,384 + 6 * 4,204,032
  for name, row in rows.items():  # rows the paper marks "." (same as base) carry the base's 65
    if name == "big":
      assert abs(row["params"] / row["paper_params"] - 1) < 0.03  # 218.3M vs 213M
    elif name == "E":  # base plus two learned position tables (encoder, decoder) of 1024 x 512
      assert row["params"] - 2 * 1024 * 512 == rows["base"]["params"]
    else:
      assert round(row["params"] / 1e6) == row["paper_params"] / 1e6, name
  # Rows A change heads and d_k together (h * d_k = 512): the same count as base.
  assert all(rows[a]["params"] == rows["base"]["params"] for a in ("A1", "A2", "A3", "A4"))


def test_single_row_and_table_output(capsys):
  assert cli.main(["tfm", "params", "--config=configs/table3.py:C5"]) == 0
  lines = capsys.readouterr().out.strip().splitlines()
  assert len(lines) == 2 and lines[1].split()[0] == "C5" and lines[1].split()[-1] == "168"
