"""`tfm train --config=FILE[:ARG] --workdir=DIR`: train, or resume what DIR holds."""

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


def run(fv: flags.FlagValues, config):
  one_row(config, fv)
  if not fv.workdir:
    raise UsageError("--workdir is required (checkpoints, vocabulary and metrics go there)")
  from tfm.loop import train  # pylint: disable=import-outside-toplevel
  train(config, fv.workdir)
