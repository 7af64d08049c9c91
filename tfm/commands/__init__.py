"""The `tfm` subcommands, one module each (see tfm/cli.py), and the flags they share.

Each module has define_flags(flag_values) and run(flag_values, config), where config is the
validated `tfm.config.Config` of --config (None when the subcommand was given none).
"""

from __future__ import annotations

from absl import flags


class UsageError(ValueError):
  """A missing or malformed command-line flag: exit code 2, like absl's own flag errors."""


def define_trained_flags(fv: flags.FlagValues):
  """--workdir, --average and --checkpoint: the flags of commands that use a trained model (eval,
  translate, generate)."""
  flags.DEFINE_string("workdir", None, "a workdir written by `tfm train`", flag_values=fv)
  flags.DEFINE_integer("average", None, "average the last N checkpoints (default "
                       "train.average_checkpoints; 1 = latest only)", lower_bound=1, flag_values=fv)
  flags.DEFINE_enum("checkpoint", "last", ["last", "best", "ema"], "last: the last checkpoints "
                    "(--average of them); best: the run's best checkpoint by its "
                    "train.best_metric, alone; ema: the exponential moving average of the "
                    "parameters (train.ema_decay) the last checkpoint holds", flag_values=fv)


def text_lines(text: str) -> list[str]:
  """One input per '\n' (or '\r\n'), as line-aligned corpora count them: str.splitlines() would
  also cut a line at U+2028, form feeds and the like, and the outputs would lose their alignment."""
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()
  return [line[:-1] if line.endswith("\r") else line for line in lines]


def require_workdir(fv: flags.FlagValues):
  if not fv.workdir:
    raise UsageError("--workdir is required")


def save(what: str, target, data: bytes | str, given: bool, flag: str = "--out") -> bool:
  """Writes `data` to `target` for a command that only reads a run (eval, plot, attention). A
  target the user gave (`given`: --out) is written or the command fails with the error. The
  default target, in the workdir, may be unwritable (a read-only workdir or bucket): then one line
  on stderr says so, naming the flag that saves elsewhere, and it returns False; the command has
  printed its results. `data` is made before the write, so only the storage's own errors (OSError,
  gcsfs's, gfile's) reach the except clause."""
  import sys  # pylint: disable=import-outside-toplevel
  from tfm import storage  # pylint: disable=import-outside-toplevel
  if given:
    storage.write_atomically(target, data)
    return True
  try:
    storage.write_atomically(target, data)
  except Exception as e:  # pylint: disable=broad-except
    reason = getattr(e, "strerror", None) or " ".join(str(e).split()) or type(e).__name__
    print(f"tfm: could not save the {what} to {target} ({reason}); {flag}=FILE saves it "
          "elsewhere", file=sys.stderr)
    return False
  return True


def one_row(config, fv) -> None:
  """For commands that run one model: a table config (configs/table3.py) must name its row."""
  if config.rows is not None and config.row is None:
    from tfm.config import config_file  # pylint: disable=import-outside-toplevel
    name = config_file(fv)
    raise UsageError(f"--config={name} is a table of rows ({', '.join(config.rows)}); name one, "
                     f"e.g. --config={name}:{config.rows[0]}")


def refuse_config(config) -> None:
  """For commands on a trained workdir: its config.json is the config, so a --config (which would
  be ignored) is refused."""
  if config is not None:
    raise UsageError("--config: this command uses the workdir's own config.json; drop --config")


def announce_backend(note: str | None = None) -> None:
  """Prints the JAX backend and devices to stderr (and the warning if an accelerator is unused),
  then `note` (e.g. a trained model's mesh, changed to fit these devices)."""
  import sys  # pylint: disable=import-outside-toplevel
  from tfm.train import backend  # pylint: disable=import-outside-toplevel
  print(f"tfm: {backend.describe()}", file=sys.stderr)
  for line in (backend.unused_accelerator(), note):
    if line:
      print(f"tfm: {line}", file=sys.stderr)
