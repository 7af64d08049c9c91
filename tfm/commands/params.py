"""`tfm params`: parameter count of every row of a config (or of one config) beside the paper's."""

from __future__ import annotations

import importlib.util
import json

from absl import flags

from tfm import config as config_lib
from tfm.model.params import count_params


def define_flags(fv: flags.FlagValues):
  flags.DEFINE_integer("vocab_size", None, "override model.vocab_size for the count", flag_values=fv)
  flags.DEFINE_boolean("json", False, "print a JSON list of {row, params, paper_params}", flag_values=fv)


def _rows(config, fv):
  """(row name, config) pairs: every row of a sweep config, else the one config."""
  if "sweep" not in config:
    yield config.get("row", "config"), config
    return
  spec = importlib.util.spec_from_file_location("_sweep_config", config.sweep_file)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  for row in config.sweep:
    yield row, module.get_config(row)


def run(fv: flags.FlagValues):
  results = []
  for row, config in _rows(fv.config, fv):
    if fv.vocab_size is not None:
      config.model.vocab_size = fv.vocab_size
    model = config_lib.model_config(config)
    paper = config.get("paper", {}).get("params_m")
    results.append(dict(row=row, params=count_params(model),
                        paper_params=None if paper is None else int(paper * 1_000_000)))
  if fv.json:
    print(json.dumps(results, indent=1))
    return
  print(f"{'row':<6} {'params':>14} {'(M)':>8} {'paper (M)':>10}")
  for r in results:
    paper = "" if r["paper_params"] is None else f"{r['paper_params'] / 1e6:.0f}"
    print(f"{r['row']:<6} {r['params']:>14,} {r['params'] / 1e6:>8.1f} {paper:>10}")
