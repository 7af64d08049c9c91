"""The tables the GPU queue runs (experiments/gpu/queue_jobs.py's TABLES), made ready for a call:
each one's bundle checked against its config's data, its runs under the call's overrides, and the
carried wheels put on the path."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from experiments.gpu import kernels, queue_jobs
from experiments.gpu.queue_call import ROOT, Options


def bundle_data(o: Options, table: queue_jobs.Table, bundle: Path) -> list[str]:
  """The bundle's data settings as config overrides; they must be the table's (its vocabulary and
  token cache are keyed by them), except with --quick, whose bundle may be the tests'."""
  from tfm import config as config_lib  # pylint: disable=import-outside-toplevel
  hint = (f"build it with python experiments/gpu/make_bundle.py --config={table.config}:"
          f"{table.first_row} --out={bundle} (or --prepare)")
  manifest = bundle / "manifest.json"
  if not manifest.exists():
    raise ValueError(f"{table.name}: no bundle at {bundle}; {hint}")
  data = json.loads(manifest.read_text())["data"]
  wanted = config_lib.load_config(f"{ROOT / table.config}:{table.first_row}").data
  data.setdefault("text_key", None)
  wrong = {k: v for k, v in data.items() if getattr(wanted, k) != v}
  if "text_key" in wrong:
    raise ValueError(f"{table.name}: the bundle {bundle} has data.text_key {data['text_key']!r}, "
                     f"{table.config}'s is {wanted.text_key!r}; {hint}")
  if wrong and not o.quick:
    raise ValueError(f"{table.name}: the bundle {bundle} has data {wrong}, not {table.config}'s; "
                     f"{hint}")
  overrides = [f"data.data_dir={bundle / 'data'}", f"data.vocab_dir={bundle / 'data' / 'vocab'}"]
  overrides += [f"data.{k}={v}" for k, v in wrong.items() if v is not None]
  return overrides + ([f"model.vocab_size={wrong['vocab_size']}"] if "vocab_size" in wrong else [])


def cheapest_rows(table: queue_jobs.Table) -> list[str]:
  from tfm import config as config_lib  # pylint: disable=import-outside-toplevel
  from tfm.train import flops  # pylint: disable=import-outside-toplevel
  rows = list(config_lib.load_config(str(ROOT / table.config)).rows)
  cost = {r: flops.train_flops(config_lib.load_config(f"{ROOT / table.config}:{r}").model, 128, 128)
          for r in rows}
  return sorted(rows, key=lambda r: cost[r])[:2]


@dataclasses.dataclass
class Prepared:
  """A table ready to queue: its overrides, runs and root."""
  table: queue_jobs.Table
  overrides: list[str]
  runs: list[queue_jobs.RunInfo]
  root: Path
  publish: Path


def prepare_table(o: Options, table: queue_jobs.Table, candidate: kernels.Candidate) -> Prepared:
  """The table's runs under this call's overrides (the bundle's data, --quick's, the kernels'
  precision, --set), each with its fingerprint and whether it is published."""
  overrides = (bundle_data(o, table, o.bundle(table.bundle))
               + (queue_jobs.QUICK if o.quick else []) + candidate.overrides() + list(o.set))
  if o.rows:  # the table's rows among them (none: the table runs nothing)
    from tfm import config as config_lib  # pylint: disable=import-outside-toplevel
    rows = [r for r in o.rows if r in config_lib.load_config(str(ROOT / table.config)).rows]
    if not rows:
      raise ValueError(f"{table.name}: none of --rows is its row")
  else:
    rows = cheapest_rows(table) if o.quick else None
  publish = o.results.resolve() / table.name
  eval_limit = queue_jobs.QUICK_EVAL_LIMIT if o.quick else None
  runs = queue_jobs.table_runs(table, overrides, eval_limit, rows, publish, {})
  return Prepared(table, overrides, runs, o.root.resolve() / table.name, publish)


def site_path(o: Options) -> Path | None:
  """The carried wheels (from the first bundle there is), unpacked once; on this path too."""
  from experiments.gpu.node import carried_site  # pylint: disable=import-outside-toplevel
  for name in ["bundle_table3", "bundle_positions", "bundle_positions_lm", "bundle"]:
    if (o.bundle(name) / "wheels").is_dir():
      site = carried_site(o.bundle(name))
      if site and str(site) not in sys.path:
        sys.path.insert(0, str(site))
      return site
  return None
