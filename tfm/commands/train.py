"""`tfm train --config=FILE[:ARG] --workdir=DIR`: train, or resume what DIR holds.

`--init_from=SOURCE` starts from the parameters of the run in SOURCE (train.init_from).
`--seeds=0,1,2` trains a stack instead (tfm/train/stack.py): one run a seed (train.seed and
data.shuffle_seed set to it, as a sweep's seeds), each into DIR-sSEED as its run alone would be,
all of them in one step on the same devices. `--members=FILE` (no --config, no --workdir) trains
the runs FILE names as one stack, runs of different configs that may stack (Table 3's base and D
rows; `tfm sweep --stack` writes such files):

  {"members": [{"config": "configs/table3_v3.py:base", "overrides": ["train.seed=0"],
                "workdir": "runs/base-s0"},
               {"config": "configs/table3_v3.py:D1", "overrides": ["train.seed=0"],
                "workdir": "runs/D1-s0"}]}
"""

from __future__ import annotations

import json

from absl import flags

from tfm.commands import UsageError, one_row


# Printed by `tfm train --help` below the one-line summary.
NOTES = ("Compiled steps are kept in a persistent compilation cache, on by default: "
         "$JAX_COMPILATION_CACHE_DIR if set, else ~/.cache/tfm/xla; "
         "--config.train.compilation_cache_dir=DIR moves it (gs:// too), =\"\" turns it off.")


def define_flags(fv: flags.FlagValues):
  flags.DEFINE_string("workdir", None, "directory for checkpoints, vocabulary, config and TensorBoard",
                      flag_values=fv)
  flags.DEFINE_string("init_from", None, "start from the parameters of the run in this workdir "
                      "(train.init_from; its best checkpoint with --config.train.init_checkpoint="
                      "best), with a fresh optimizer and schedule", flag_values=fv)
  flags.DEFINE_list("seeds", None, "train a stack of runs, one a seed (train.seed and "
                    "data.shuffle_seed), in one step: each into WORKDIR-sSEED", flag_values=fv)
  flags.DEFINE_string("members", None, "train the runs this JSON file names (each its config, "
                      "overrides and workdir) as one stack; instead of --config and --workdir",
                      flag_values=fv)


def member_seeds(values: list[str] | None) -> list[int] | None:
  """--seeds as distinct non-negative integers (None without it); UsageError otherwise."""
  if values is None:
    return None
  try:
    seeds = [int(v) for v in values]
  except ValueError:
    seeds = []
  if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
    raise UsageError(f"--seeds={','.join(values)}: expected distinct non-negative integers, "
                     "e.g. --seeds=0,1,2")
  return seeds


def read_members(path: str) -> tuple[list, list[str]]:
  """--members=FILE: (each member's validated config, its workdir); one ValueError naming the file
  and the member where FILE is not as the module docstring shows."""
  from tfm import config as config_lib  # pylint: disable=import-outside-toplevel
  try:
    with open(path, encoding="utf-8") as f:
      members = json.load(f)["members"]
    assert isinstance(members, list) and members
  except (OSError, ValueError, KeyError, TypeError, AssertionError) as e:
    raise ValueError(f"--members={path}: expected a JSON file {{\"members\": [{{\"config\": "
                     f"FILE[:ROW], \"overrides\": [KEY=VALUE, ...], \"workdir\": DIR}}, ...]}} "
                     f"({type(e).__name__}: {e})") from None
  configs, workdirs = [], []
  for i, member in enumerate(members):
    if not (isinstance(member, dict) and isinstance(member.get("config"), str)
            and isinstance(member.get("workdir"), str)
            and all(isinstance(o, str) for o in member.get("overrides", []))):
      raise ValueError(f"--members={path}: member {i} needs \"config\" and \"workdir\" strings "
                       f"and \"overrides\" a list of KEY=VALUE strings, got {member!r}")
    try:
      configs.append(config_lib.load_config(member["config"], member.get("overrides", [])))
    except ValueError as e:
      raise ValueError(f"--members={path}: member {i} ({member['workdir']}): {e}") from None
    workdirs.append(member["workdir"])
  return configs, workdirs


def prepare_config(fv: flags.FlagValues, loaded: dict) -> dict:
  """The config's sections before they are built and validated, with --init_from as
  train.init_from: the train section's checks (train.init_optimizer needs a source) see it."""
  if fv.init_from is None:
    return loaded
  train = dict(loaded["train"].items())
  given = train.get("init_from")
  if given is not None and given != fv.init_from:
    raise UsageError(f"--init_from={fv.init_from} and --config.train.init_from={given}: give one")
  return {**loaded, "train": {**train, "init_from": fv.init_from}}


def run(fv: flags.FlagValues, config):
  if fv.members is not None:
    if config is not None or fv.workdir or fv.seeds:
      raise UsageError("--members=FILE names every run's config and workdir: give it alone, "
                       "without --config, --workdir or --seeds")
    from tfm.loop import train_stack  # pylint: disable=import-outside-toplevel
    train_stack(*read_members(fv.members))
    return
  if config is None:
    raise UsageError("--config=FILE[:ARG] is required")
  one_row(config, fv)
  if not fv.workdir:
    raise UsageError("--workdir is required (checkpoints, vocabulary and metrics go there)")
  seeds = member_seeds(fv.seeds)
  # pylint: disable=import-outside-toplevel
  import dataclasses
  from tfm.loop import train, train_stack
  if seeds is None:
    train(config, fv.workdir)
    return
  workdir = fv.workdir.rstrip("/")
  members = [config.replace(train=dataclasses.replace(config.train, seed=s),
                            data=dataclasses.replace(config.data, shuffle_seed=s)) for s in seeds]
  train_stack(members, [f"{workdir}-s{s}" for s in seeds])
