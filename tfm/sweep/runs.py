"""The runs of a sweep: table rows x grid points x seeds, each with a workdir and its overrides.

A run is one `tfm train` + `tfm eval` of a config file (`FILE`, or `FILE:ROW` for a table row) with
`--config.KEY=VALUE` overrides: the command line's, the grid point's, and the seed's. Seed i sets
train.seed = i (parameter init and dropout) and data.shuffle_seed = i (data order). Its workdir is
ROOT/NAME with NAME = ROW[+KEY=VALUE,...]-sI, so a rerun of the same command finds it again.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
from typing import Sequence

from tfm import config as config_lib
from tfm import storage


@dataclasses.dataclass(frozen=True)
class Run:
  config_file: str
  row: str | None  # a row of a table config, or None
  grid: tuple[tuple[str, str], ...]  # this run's grid point: (key, value) pairs
  seed: int
  overrides: tuple[str, ...] = ()  # 'KEY=VALUE' from the command line, for every run

  @property
  def group(self) -> str:
    """The name without the seed: runs of one group are averaged in the table."""
    parts = [self.row] if self.row else []
    if self.grid:
      parts.append(",".join(f"{k}={v}" for k, v in self.grid))
    return re.sub(r"[^A-Za-z0-9_.=,+-]", "_", "+".join(parts) or "run")

  @property
  def name(self) -> str:
    return f"{self.group}-s{self.seed}"

  @property
  def spec(self) -> str:
    return f"{self.config_file}:{self.row}" if self.row else self.config_file

  def config_overrides(self, vocab_dir: str | None = None) -> list[str]:
    """Every 'KEY=VALUE' this run applies to its config file, the seed's last."""
    out = list(self.overrides) + [f"{k}={v}" for k, v in self.grid]
    if vocab_dir is not None:
      out.append(f"data.vocab_dir={vocab_dir}")
    return out + [f"train.seed={self.seed}", f"data.shuffle_seed={self.seed}"]

  def load(self, vocab_dir: str | None = None) -> config_lib.Config:
    """The run's validated config (raises ValueError naming the run and the key)."""
    try:
      return config_lib.load_config(self.spec, self.config_overrides(vocab_dir))
    except ValueError as e:
      raise ValueError(f"run {self.name}: {e}") from None

  def train_argv(self, workdir: str, vocab_dir: str | None = None) -> list[str]:
    """`tfm train` arguments of this run."""
    return (["train", f"--config={self.spec}"]
            + [f"--config.{o}" for o in self.config_overrides(vocab_dir)]
            + [f"--workdir={workdir}"])


def stack_train_argv(runs: Sequence[Run], root: str, vocab_dir: str | None = None,
                     write: bool = True) -> list[str]:
  """`tfm train` arguments training `runs` as one stack (tfm/train/stack.py), each into ROOT/NAME
  as each alone would be: the seeds of one group as `tfm train --seeds`; runs of several groups
  (Table 3's base and D rows, a grid over a learning rate) as `tfm train --members=FILE`, FILE
  (ROOT/stacks/FIRST.json, written unless `write` is False) naming each run's config and
  workdir. A stack of one is that run's own `tfm train`, as a run alone (one that cannot stack,
  train.dropout_prng=rbg, trains so)."""
  first = runs[0]
  if len(runs) == 1:
    return first.train_argv(os.path.join(root, first.name), vocab_dir)
  if all(r.group == first.group for r in runs):
    seeded = ("train.seed=", "data.shuffle_seed=")
    overrides = [o for o in first.config_overrides(vocab_dir) if not o.startswith(seeded)]
    return (["train", f"--config={first.spec}"] + [f"--config.{o}" for o in overrides]
            + [f"--workdir={os.path.join(root, first.group)}",
               f"--seeds={','.join(str(r.seed) for r in runs)}"])
  path = os.path.join(root, "stacks", f"{first.name}.json")
  if write:
    members = [dict(config=r.spec, overrides=r.config_overrides(vocab_dir),
                    workdir=os.path.join(root, r.name)) for r in runs]
    storage.write_atomically(path, json.dumps({"members": members}, indent=1) + "\n")
  return ["train", f"--members={path}"]


def parse_grid(specs: Sequence[str]) -> list[tuple[str, list[str]]]:
  """['model.num_heads=1,4,8', ...] -> [('model.num_heads', ['1', '4', '8']), ...]."""
  grid = []
  for spec in specs:
    key, sep, values = spec.partition("=")
    items = [v.strip() for v in values.split(",")]
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+", key) or (
        not all(items)):
      raise ValueError(f"--grid {spec!r}: expected SECTION.KEY=VALUE1,VALUE2,... "
                       "(e.g. model.num_heads=1,4,8)")
    if key in {k for k, _ in grid}:
      raise ValueError(f"--grid: {key} is given twice; put all its values in one --grid")
    grid.append((key, items))
  return grid


def expand(config_file: str, rows: Sequence[str | None], grid: Sequence[tuple[str, list[str]]],
           seeds: int, overrides: Sequence[str] = ()) -> list[Run]:
  """Every (row, grid point, seed), rows outermost and seeds innermost."""
  if seeds < 1:
    raise ValueError(f"--seeds: expected a positive integer, got {seeds}")
  points = list(itertools.product(*[[(k, v) for v in values] for k, values in grid]))
  return [Run(config_file, row, tuple(point), seed, tuple(overrides))
          for row in rows for point in points for seed in range(seeds)]
