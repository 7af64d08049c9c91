"""The `tfm` command: `tfm SUBCOMMAND --config=FILE[:ARG] [--config.key=value ...] [flags]`."""

from __future__ import annotations

import importlib
import os
import sys
import textwrap

from absl import flags

from tfm import config as config_lib
from tfm import logs
from tfm.commands import UsageError

# Commands whose stdout is a progress log, where tfm's INFO lines belong (not translate's output).
PROGRESS_COMMANDS = ("train", "sweep", "prepare-data")

# subcommand -> (module under tfm.commands, one-line help, whether --config is required)
COMMANDS = {
    "params": ("params", "parameter counts of a config or of every Table 3 row", True),
    "train": ("train", "train a model into --workdir (resumes if the workdir has checkpoints)", False),
    "eval": ("eval", "BLEU, chrF, TER and perplexity of the checkpoints in --workdir, "
             "at the run's decoding settings or a grid of them", False),
    "translate": ("translate", "translate lines from stdin or --input with the model in --workdir "
                  "(or their n best, or score given translations)", False),
    "generate": ("generate", "continue prompts from --prompt or stdin with the language model "
                 "(task lm) in --workdir, streaming the text as it is sampled", False),
    "plan": ("plan", "compile the train step for a TPU topology ahead of time: memory, FLOPs, "
             "step time", True),
    "convert": ("convert", "copy --workdir's checkpoints into a new --out with model.scan_layers "
                "set (layers stacked or unrolled)", False),
    "prepare-data": ("prepare_data", "build the dataset and vocabulary a config names", True),
    "sweep": ("sweep", "train and evaluate every row / grid point / seed; a table of the results "
              "(beside the paper's where the config has its figures)", False),
    "attention": ("attention", "draw one sentence's attention weights, a panel per head, for a "
                  "layer of the model in --workdir (the paper's figures 3-5)", False),
    "export": ("export", "write the model in --workdir as a Hugging Face transformers directory "
               "(--out: MarianMTModel; a language model as GPT2LMHeadModel, LlamaForCausalLM, "
               "BertForMaskedLM or RobertaPreLayerNormForMaskedLM) and, with --ct2, as a "
               "CTranslate2 model", False),
    "plot": ("plot", "training curves of one or more workdirs (loss, perplexity, BLEU, learning "
             "rate) as a PNG", False),
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


# Errors that describe bad input (a config value, a flag, a missing or unreadable file), whose
# message says what was expected: printed as one line. Anything else is a bug: a traceback.
INPUT_ERRORS = (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError,
                IsADirectoryError, PermissionError, UnicodeDecodeError)


def _one_line(error: Exception) -> str:
  text = " ".join(str(error).split())
  return text if isinstance(error, ValueError) else f"{type(error).__name__}: {text}"


def _pin_cpus() -> None:
  """TFM_CPUS=0,1: run on these cores only (tfm sweep --parallel gives each run its share)."""
  cpus = os.environ.get("TFM_CPUS")
  if cpus:
    os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})


def main(argv=None, run: bool = True) -> int:
  """Runs `tfm SUBCOMMAND ...`; returns the exit code. With run=False it stops once the flags are
  parsed and the config is built and validated (the README test checks every command that way)."""
  argv = list(sys.argv if argv is None else argv)
  _pin_cpus()
  if len(argv) < 2 or argv[1] in ("-h", "--help", "help"):
    print(usage())
    return 0
  name = argv[1]
  if name not in COMMANDS:
    print(f"tfm: unknown subcommand {name!r}; expected one of {', '.join(COMMANDS)} (tfm --help)",
          file=sys.stderr)
    return 2
  module_name, _, needs_config = COMMANDS[name]
  from tfm.train import backend  # pylint: disable=import-outside-toplevel (jax: not for --help)
  backend.limit_platforms()
  logs.configure_console(info=name in PROGRESS_COMMANDS)
  command = importlib.import_module(f"tfm.commands.{module_name}")
  sub_argv = [f"tfm {name}"] + [_underscore_flag(a) for a in argv[2:]]
  fv = flags.FlagValues()
  config_lib.define_config_flag(fv, sub_argv)
  command.define_flags(fv)
  if any(a in ("-h", "--help", "--helpfull") for a in sub_argv[1:]):
    notes = textwrap.fill(getattr(command, "NOTES", ""), 80)  # what the flags' help does not say
    print(f"usage: tfm {name} [flags]\n\n{COMMANDS[name][1]}\n" + (f"\n{notes}\n" if notes else "")
          + f"\n{fv.get_help()}")
    return 0
  try:
    args = config_lib.parse_flags(fv, sub_argv)
  except ValueError as e:  # a bad flag, or whatever loading the config file raised
    print(f"tfm {name}: {e}", file=sys.stderr)
    return 2
  positional = getattr(command, "POSITIONAL", None)  # what a command's non-flag arguments are
  if args and not positional:
    print(f"tfm {name}: unexpected argument(s) {' '.join(args)}; every option is a flag "
          f"(--name=value, see tfm {name} --help)", file=sys.stderr)
    return 2
  if needs_config and fv.config is None:
    print(f"tfm {name}: --config=FILE[:ARG] is required", file=sys.stderr)
    return 2
  try:
    loaded = None if fv.config is None else dict(fv.config.items())
  except OSError as e:  # ml_collections reports a config file it could not read only now
    print(f"tfm {name}: {config_lib.load_error_message(e.__cause__ or e, sub_argv)}",
          file=sys.stderr)
    return 2
  try:
    prepare = getattr(command, "prepare_config", None)  # flags that set config keys (train's)
    if prepare is not None and loaded is not None:
      loaded = prepare(fv, loaded)
    config = None if loaded is None else config_lib.build(loaded)
    if not run:
      return 0
    return (command.run(fv, config, args) if positional else command.run(fv, config)) or 0
  except UsageError as e:
    print(f"tfm {name}: {e}", file=sys.stderr)
    return 2
  except INPUT_ERRORS as e:  # config and input errors: one clear line, no traceback
    print(f"tfm {name}: error: {_one_line(e)}", file=sys.stderr)
    return 1
  except KeyboardInterrupt as e:
    print(f"tfm {name}: {e or 'interrupted'}", file=sys.stderr)
    return 130


if __name__ == "__main__":
  sys.exit(main())
