"""`tfm train --config=FILE[:ARG] --workdir=DIR`: train, or resume what DIR holds.

`--init_from=SOURCE` starts from the parameters of the run in SOURCE (train.init_from).
`--seeds=0,1,2` trains a stack instead (tfm/train/stack.py): one run a seed (train.seed and
data.shuffle_seed set to it, as a sweep's seeds), each into DIR-sSEED as its run alone would be,
all of them in one step on the same devices.
"""

from __future__ import annotations

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


def run(fv: flags.FlagValues, config):
  one_row(config, fv)
  if not fv.workdir:
    raise UsageError("--workdir is required (checkpoints, vocabulary and metrics go there)")
  seeds = member_seeds(fv.seeds)
  # pylint: disable=import-outside-toplevel
  import dataclasses
  if fv.init_from is not None:
    given = config.train.init_from
    if given is not None and given != fv.init_from:
      raise UsageError(f"--init_from={fv.init_from} and --config.train.init_from={given}: give "
                       "one")
    config = config.replace(train=dataclasses.replace(config.train, init_from=fv.init_from))
  from tfm.loop import train, train_stack
  if seeds is None:
    train(config, fv.workdir)
    return
  workdir = fv.workdir.rstrip("/")
  members = [config.replace(train=dataclasses.replace(config.train, seed=s),
                            data=dataclasses.replace(config.data, shuffle_seed=s)) for s in seeds]
  train_stack(members, [f"{workdir}-s{s}" for s in seeds])
