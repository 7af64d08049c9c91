"""`tfm plot --workdir DIR [DIR ...] [--out FILE.png] [--names a,b]`: training curves.

Train and dev loss, dev perplexity, dev BLEU, the learning rate and loss against tokens seen, from
the workdirs' TensorBoard events, several workdirs overlaid with their names (tfm/figures/curves.py).
Default output: curves.png in the first workdir (tfm train also writes WORKDIR/curves.png at each
evaluation); a workdir it cannot write (read-only) is said in one line, and --out saves elsewhere.
"""

from __future__ import annotations

from absl import flags
from etils import epath

from tfm.commands import UsageError, save

POSITIONAL = "more workdirs"


def define_flags(fv: flags.FlagValues):
  flags.DEFINE_multi_string("workdir", [], "workdirs written by `tfm train` (repeat the flag, or "
                            "list more after it)", flag_values=fv)
  flags.DEFINE_string("out", None, "the PNG to write (default: FIRST_WORKDIR/curves.png)",
                      flag_values=fv)
  flags.DEFINE_list("names", None, "a legend name per workdir (default: the directory names)",
                    flag_values=fv)


def run(fv: flags.FlagValues, config, args: list[str]):
  del config
  from tfm.figures import curves  # pylint: disable=import-outside-toplevel
  workdirs = list(fv.workdir) + list(args)
  if not workdirs:
    raise UsageError("--workdir is required (one or more workdirs written by tfm train)")
  if fv.names is not None and len(fv.names) != len(workdirs):
    raise UsageError(f"--names: expected {len(workdirs)} names (one per workdir), got "
                     f"{len(fv.names)}")
  for what, values in (("--workdir", workdirs), ("--names", fv.names or ())):
    twice = sorted({v for v in values if list(values).count(v) > 1})
    if twice:  # one legend entry would hold two runs' curves
      raise UsageError(f"{what}: {', '.join(twice)} given more than once")
  for workdir in workdirs:
    if not (epath.Path(workdir) / "tensorboard").exists():
      raise ValueError(f"--workdir {workdir}: no tensorboard/ events; expected a workdir written by "
                       "tfm train")
  out = fv.out or epath.Path(workdirs[0]) / "curves.png"
  if not save("figure", out, curves.png(workdirs, fv.names), given=fv.out is not None):
    return 1  # the figure is all this command makes
  print(f"written: {out}")
  return 0
