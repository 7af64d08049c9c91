"""`tfm params`: parameter count of every row of a config (or of one config) beside the paper's."""

from __future__ import annotations

import dataclasses
import json

from absl import flags

from tfm import config as config_lib
from tfm.model.params import count_params


def define_flags(fv: flags.FlagValues):
  flags.DEFINE_integer("vocab_size", None, "override model.vocab_size for the count", flag_values=fv)
  flags.DEFINE_boolean("json", False, "print a JSON list of {row, params, paper_params}", flag_values=fv)


def run(fv: flags.FlagValues, config: config_lib.Config):
  del config  # every row of it
  results = []
  for row, row_config in config_lib.table_rows(fv):
    model = row_config.model
    if fv.vocab_size is not None:
      model = dataclasses.replace(model, vocab_size=fv.vocab_size)
    paper = (row_config.paper or {}).get("params_m")
    results.append(dict(row=row, params=count_params(model),
                        paper_params=None if paper is None else int(paper * 1_000_000)))
  if fv.json:
    print(json.dumps(results, indent=1))
    return
  width = max([6] + [len(str(r["row"])) for r in results])  # the rows' names line up
  print(f"{'row':<{width}} {'params':>14} {'(M)':>8} {'paper (M)':>10}")
  for r in results:
    paper = "" if r["paper_params"] is None else f"{r['paper_params'] / 1e6:.0f}"
    print(f"{str(r['row']):<{width}} {r['params']:>14,} {r['params'] / 1e6:>8.1f} {paper:>10}")
