"""The `tfm` command: `tfm SUBCOMMAND --config=FILE[:ARG] [--config.key=value ...] [flags]`."""

from __future__ import annotations

import importlib
import os
import sys

from absl import flags

from tfm import config as config_lib

# subcommand -> (module under tfm.commands, one-line help, whether --config is required)
COMMANDS = {
    "params": ("params", "parameter counts of a config or of every Table 3 row", True),
    "train": ("train", "train a model into --workdir (resumes if the workdir has checkpoints)", True),
    "eval": ("eval", "BLEU and perplexity of the checkpoints in --workdir", False),
    "translate": ("translate", "translate lines from stdin or --input with the model in --workdir", False),
    "prepare-data": ("prepare_data", "build the dataset and vocabulary a config names", True),
    "sweep": ("sweep", "train and evaluate every row / grid point / seed; our table beside the "
              "paper's", False),
}


def usage() -> str:
  lines = ["usage: tfm SUBCOMMAND [--config=FILE[:ARG]] [--config.KEY=VALUE ...] [flags]", "",
           "subcommands:"]
  lines += [f"  {name:<13} {text}" for name, (_, text, _) in COMMANDS.items()]
  lines += ["", "`tfm SUBCOMMAND --helpfull` lists a subcommand's flags."]
  return "\n".join(lines)


def _underscore_flag(arg: str) -> str:
  """`--vocab-size=3` -> `--vocab_size=3` (absl spells flags with underscores); config keys untouched."""
  if not arg.startswith("--") or arg.startswith("--config"):
    return arg
  name, sep, value = arg[2:].partition("=")
  return "--" + name.replace("-", "_") + sep + value


def _pin_cpus() -> None:
  """TFM_CPUS=0,1: run on these cores only (tfm sweep --parallel gives each run its share)."""
  cpus = os.environ.get("TFM_CPUS")
  if cpus:
    os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})


def main(argv=None) -> int:
  argv = list(sys.argv if argv is None else argv)
  _pin_cpus()
  if len(argv) < 2 or argv[1] in ("-h", "--help", "help"):
    print(usage())
    return 0
  name = argv[1]
  if name not in COMMANDS:
    print(f"tfm: unknown subcommand {name!r}\n\n{usage()}", file=sys.stderr)
    return 2
  module_name, _, needs_config = COMMANDS[name]
  command = importlib.import_module(f"tfm.commands.{module_name}")
  sub_argv = [f"tfm {name}"] + [_underscore_flag(a) for a in argv[2:]]
  fv = flags.FlagValues()
  config_lib.define_config_flag(fv, sub_argv)
  command.define_flags(fv)
  if any(a in ("-h", "--help", "--helpfull") for a in sub_argv[1:]):
    print(f"usage: tfm {name} [flags]\n\n{COMMANDS[name][1]}\n\n{fv.get_help()}")
    return 0
  try:
    fv(sub_argv)
  except flags.Error as e:
    print(f"tfm {name}: {config_lib.flag_error_message(e)}", file=sys.stderr)
    return 2
  if needs_config and fv.config is None:
    print(f"tfm {name}: --config=FILE[:ARG] is required", file=sys.stderr)
    return 2
  try:
    config = None if fv.config is None else config_lib.build(fv.config)
    return command.run(fv, config) or 0
  except ValueError as e:  # config and input errors: one clear line, no traceback
    print(f"tfm {name}: error: {e}", file=sys.stderr)
    return 1
  except KeyboardInterrupt as e:
    print(f"tfm {name}: {e or 'interrupted'}", file=sys.stderr)
    return 130


if __name__ == "__main__":
  sys.exit(main())
