"""The experiment config: five typed sections, loaded from an ml_collections file and validated once.

  config = load_config("configs/table3.py:C5", ["model.num_heads=4"])   # -> Config
  config.model.d_model, config.train.warmup_steps, config.data.dataset, ...

A config file is a Python file with `get_config(arg=None)` returning a ConfigDict, named as
`path.py` or `path.py:arg`, with overrides the ml_collections way (`--config.model.num_heads=2`).
Files start from `default_config()`, which holds every key of every section with its default (the
dataclass field defaults in model/, data/, train/ and eval/ are the one home of each default), and
state only what differs. `build` turns the ConfigDict into a `Config`: each section is a frozen
dataclass validated when it is built, so a bad value fails before anything is compiled, with a
message naming the key.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from typing import Any, Mapping, Sequence

import ml_collections
from absl import flags
from ml_collections import config_flags

from tfm import sections
from tfm import tasks
from tfm.data import config as data_config
from tfm.data.config import DataConfig
from tfm.eval import config as eval_config
from tfm.eval.config import EvalConfig
from tfm.model.config import ARCHITECTURES, ModelConfig, from_config as model_from_mapping
from tfm.train.config import (MeshConfig, TrainConfig, decay_rate, mesh_from_mapping,
                              train_from_mapping)

SECTIONS = ("model", "data", "train", "mesh", "eval")
# Keys added after runs were written and published, with the value every earlier run had: a saved
# config.json without one reads as that value (a resume), and a sweep's fingerprint leaves the key
# out at that value, so runs published before it keep matching (tfm/sweep/publish.py).
ADDED_LATER = {"model.matmul_precision": "default", "model.norm_kind": "layer",
               "model.share_embeddings": False, "model.token_types": 0,
               "model.embedding_norm": False, "model.mlm_head": False, "model.gelu": "tanh",
               "eval.length_buckets": (),
               "eval.context_lengths": (),
               "data.train_files": None, "data.dev_files": None, "data.test_files": None,
               "data.eval_sets": None, "data.mixture": None, "data.mixture_weights": None,
               "data.text_key": None, "data.mask_rate": 0.15, "data.mask_token_rate": 0.8,
               "data.mask_random_rate": 0.1, "data.eval_mask_rate": None,
               "data.noise_density": 0.15,
               "data.mean_noise_span_length": 3.0, "data.sentinels": 0,
               "train.best_metric": "none", "train.patience": 0,
               "train.init_from": None, "train.init_checkpoint": "last",
               "train.init_optimizer": False, "train.optimizer": "adam", "train.ema_decay": 0.0,
               "train.ema_warmup": True, "train.adafactor_decay_rate": 0.8,
               "train.adafactor_clipping_threshold": 1.0, "train.adafactor_factored": True,
               "train.adafactor_min_dim_size_to_factor": 128,
               "train.adafactor_multiply_by_parameter_scale": True,
               "train.adafactor_epsilon": 1e-30, "train.adafactor_momentum": 0.0,
               "task": "translate"}
# Keys a config may hold beside the sections: a table config's rows, one row's name and figures.
EXTRAS = ("rows", "row", "paper")
@dataclasses.dataclass(frozen=True)
class Config:
  """A whole experiment. task: what it learns, a name of tfm/tasks (tasks.NAMES: 'translate'
  pairs, 'lm' or 'mlm' on the monolingual texts of data.text_key); rows: the row names of a
  table config (configs/table3.py without a row); row / paper: the name of one row and the
  paper's figures for it ({ppl, bleu, params_m})."""

  model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
  data: DataConfig = dataclasses.field(default_factory=DataConfig)
  train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
  mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)
  eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
  rows: tuple[str, ...] | None = None
  row: str | None = None
  paper: Mapping[str, Any] | None = None
  task: str = "translate"

  def __post_init__(self):
    check_task(self)
    if self.data.vocab_size != self.model.vocab_size:
      raise ValueError(f"config keys data.vocab_size ({self.data.vocab_size}) and model.vocab_size "
                       f"({self.model.vocab_size}) must be equal: the model embeds the data's "
                       "vocabulary")
    m, e = self.model, self.eval
    source, name = max((self.data.max_length, "data.max_length"),
                       (max(e.length_buckets, default=0), "eval.length_buckets' last edge"))
    if not self.translates and m.positions == "learned" and m.max_length < self.data.max_length:
      # lm / mlm rows are data.max_length tokens and nothing is decoded past them (tfm generate
      # and tfm eval --context_lengths check their own lengths against the table)
      raise ValueError(f"config key model.max_length ({m.max_length}) must be at least "
                       f"data.max_length ({self.data.max_length}) with learned positions: the "
                       f"table needs a row for every position of a training row "
                       f"(task {self.task!r})")
    if self.translates and m.positions == "learned" and m.max_length < source + e.max_extra_length:
      raise ValueError(f"config key model.max_length ({m.max_length}) must be at least "
                       f"{name} + eval.max_extra_length = {source + e.max_extra_length} with "
                       "learned positions: the table needs a row for every source position and "
                       "every decoded one")
    if self.train.best_metric == "dev_bleu" and not self.eval.bleu_every:
      raise ValueError("config key train.best_metric ('dev_bleu') needs eval.bleu_every > 0: the "
                       "best checkpoint is chosen at the dev BLEU evaluations")

  @property
  def translates(self) -> bool:
    """Whether the run translates (its task's `translates`): only then is there dev BLEU
    (eval.bleu_every is ignored by lm and mlm runs, which have no translations to score)."""
    return tasks.get(self.task).translates

  def replace(self, **sections_changes) -> "Config":
    """A copy with whole sections (or extras) replaced, validated again."""
    return dataclasses.replace(self, **sections_changes)

  def to_dict(self) -> dict[str, Any]:
    """Plain values, JSON-ready (the workdir's config.json). train.weight_decay is the decay in
    force (None, the optimizer's default, resolved: 0 for adam, as every earlier run wrote it)."""
    out = {name: sections.to_dict(getattr(self, name)) for name in SECTIONS}
    out["train"]["weight_decay"] = decay_rate(self.train)
    out["task"] = self.task
    out.update({k: getattr(self, k) for k in EXTRAS if getattr(self, k) is not None})
    return out


def check_task(config: Config) -> None:
  """Raises ValueError (one line, naming the keys) unless config.task is a task of tfm/tasks and
  fits model.architecture, data.text_key, train.best_metric and eval.context_lengths (the task's
  own check, tfm/tasks/task.py)."""
  tasks.get(config.task).check(config)


def flatten(values: Mapping[str, Any]) -> dict[str, Any]:
  """A config dict (Config.to_dict(), a config.json) as {'section.key': value}; the extras (rows,
  row, paper) stay whole under their own names."""
  out = {}
  for section, value in values.items():
    if isinstance(value, dict) and section in SECTIONS:
      out.update({f"{section}.{k}": v for k, v in value.items()})
    else:
      out[section] = value
  return out


def default_config() -> ml_collections.ConfigDict:
  """Every section with every key at its default: the starting point of every config file."""
  c = ml_collections.ConfigDict()
  for name in SECTIONS:
    c[name] = sections.to_config_dict(getattr(Config(), name))
  c.task = Config.task
  return c


def build(values: Mapping[str, Any]) -> Config:
  """A validated Config from a ConfigDict or a dict (e.g. config.json); absent sections and keys
  take their defaults, unknown ones are named."""
  values = dict(values.items())
  unknown = sorted(set(values) - set(SECTIONS) - set(EXTRAS) - {"task"})
  if unknown:
    raise ValueError(f"unknown config section(s) {unknown}; expected {', '.join(SECTIONS)} (and "
                     "task)")
  section = lambda name: values.get(name)
  extras = {k: values[k] for k in EXTRAS if values.get(k) is not None}
  if "rows" in extras:
    extras["rows"] = tuple(extras["rows"])
  if "paper" in extras:
    extras["paper"] = dict(extras["paper"])
  task = values.get("task", ADDED_LATER["task"])
  model = dict((section("model") or {}).items())
  # The task and the architecture before the model section's own checks: a config whose stack is
  # not its task's (task=lm, model.architecture=encoder_decoder) is refused for that, not for the
  # layer counts the other stack would need.
  arch = model.get("architecture", ModelConfig.architecture)
  if arch in ARCHITECTURES:  # (another value is named by the model section's check)
    tasks.get(task).check_architecture(arch)
  return Config(model=model_from_mapping(section("model")),
                data=data_config.from_mapping(section("data")),
                train=train_from_mapping(section("train")),
                mesh=mesh_from_mapping(section("mesh")),
                eval=eval_config.from_mapping(section("eval")),
                task=task, **extras)


def define_config_flag(flag_values: flags.FlagValues, argv: Sequence[str], default=None):
  """Adds `--config` (file[:arg]) and its `--config.a.b=value` overrides to flag_values."""
  return config_flags.DEFINE_config_file("config", default, "experiment config file[:arg]",
                                         flag_values=flag_values, lock_config=False,
                                         sys_argv=list(argv))


def parse_flags(flag_values: flags.FlagValues, argv: Sequence[str]) -> list[str]:
  """flag_values(argv), loading --config afresh; returns the arguments that are not flags (after
  the program name); raises ValueError with one line on any error.

  ml_collections loads every config file as the module `config_config` with the deprecated
  `load_module`, which re-executes a file into the module left by the previous one: a file that
  defines no get_config() would silently run the previous file's. Dropping it first avoids that.
  """
  sys.modules.pop("config_config", None)
  argv, nones = _none_overrides(argv)
  try:
    args = flag_values(list(argv))[1:]
  except Exception as e:  # noqa: BLE001 -- whatever loading the file raised, said in one line
    raise ValueError(load_error_message(e, argv)) from None
  holder = flag_values["config"] if "config" in flag_values else None
  config = holder.value if holder is not None else None
  for section, key in nones if config is not None else ():
    if section not in config:
      config[section] = ml_collections.ConfigDict()
    config[section][key] = None
    # and among the command line's overrides (config_flags.get_override_values), which tfm sweep
    # passes on to its runs
    config_flags.get_override_values(holder)[f"{section}.{key}"] = None
  return args


def _none_overrides(argv: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
  """(argv less the last `--config.SECTION.KEY=None` of each Optional key, those keys): None is
  set after parsing. ml_collections parses an override by the type of the value it replaces, and
  over an int or float ('data.eval_max_examples': 200, model.num_kv_heads's int placeholder) it
  refused 'None' as an invalid literal; over a string it gave the string 'None'."""
  last = {arg.partition("=")[0]: i for i, arg in enumerate(argv)}  # the last of a key wins
  defaults = Config()
  optional = {name: sections.optional_fields(type(getattr(defaults, name))) for name in SECTIONS}
  kept, nones = [], []
  for i, arg in enumerate(argv):
    name, _, value = arg.partition("=")
    parts = name.split(".")
    if (value == "None" and len(parts) == 3 and parts[0] == "--config"
        and parts[2] in optional.get(parts[1], ())):
      if last[name] == i:
        nones.append((parts[1], parts[2]))
      continue
    kept.append(arg)
  return kept, nones


def load_config_dict(spec: str, overrides: Sequence[str] = ()) -> ml_collections.ConfigDict:
  """The ConfigDict a config file and overrides give, before validation."""
  argv = ["tfm", f"--config={spec}"] + [f"--config.{o}" for o in overrides]
  fv = flags.FlagValues()
  holder = define_config_flag(fv, argv)
  parse_flags(fv, argv)
  return holder.value


def load_error_message(error: Exception, argv: Sequence[str]) -> str:
  """One line for an error raised while parsing --config and its overrides (ml_collections raises
  whatever the config file raises, or wraps it in a traceback)."""
  spec = next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), "")
  path = spec.split(":")[0]
  text = str(error)
  if isinstance(error, SyntaxError):
    return f"--config {path}: invalid Python at line {error.lineno}: {error.msg}"
  if isinstance(error, OSError):
    reason = re.search(r"\[Errno \d+\] ([^:]+)", text)
    return f"--config {path}: cannot be read ({error.strerror or (reason and reason[1]) or text})"
  if isinstance(error, AttributeError) and "get_config" in text:
    return f"--config {path}: defines no get_config(arg=None) returning a ConfigDict"
  suggestion = re.search(r"Did you mean \W*(\w+)\W* instead of \W*(\w+)", text)
  if isinstance(error, (AttributeError, KeyError)) and suggestion:
    good, bad = suggestion.groups()
    flag = next((a.split("=", 1)[0] for a in argv if a.startswith("--config.")
                 and bad in a.split("=", 1)[0].split(".")), f"--config.{bad}")
    return f"{flag}: unknown config key {bad!r}; did you mean {good!r}?"
  if isinstance(error, (AttributeError, KeyError)):
    return f"--config {path}: unknown config key {text}"
  if isinstance(error, flags.Error):
    return flag_error_message(error)
  return f"--config {path}: {type(error).__name__}: {' '.join(text.split())}"


def load_config(spec: str, overrides: Sequence[str] = ()) -> Config:
  """load_config('configs/table3.py:C5', ['model.num_heads=4']) -> a validated Config."""
  return build(load_config_dict(spec, overrides))


def flag_error_message(error: Exception) -> str:
  """The useful last line of a config-loading error (absl wraps it with a whole traceback)."""
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  return lines[-1] if lines else str(error)


def check_rows(names: str | Sequence[str], rows: Sequence[str], table: str) -> None:
  """Raises ValueError naming what in `names` is not a row of the table config `table`: one row
  (a config file's argument) or a list of them (a command's --rows)."""
  if isinstance(names, str):
    if names not in rows:
      raise ValueError(f"{table}: unknown row {names!r}; expected one of {', '.join(rows)}")
    return
  unknown = [n for n in names if n not in rows]
  if unknown:
    raise ValueError(f"unknown row(s) {unknown} of {table}; expected some of {', '.join(rows)}")


def config_file(flag_values: flags.FlagValues) -> str:
  return config_flags.get_config_filename(flag_values["config"])


def table_rows(flag_values: flags.FlagValues, names: Sequence[str] | None = None
               ) -> list[tuple[str, Config]]:
  """(row, Config) for the rows of the table config in --config (`FILE:ROW` each, with the
  command line's --config.* overrides applied to every row); `names` picks rows, in its order.
  A config that is not a table is its own single row."""
  config = build(flag_values.config)
  if config.rows is None:
    return [(config.row or "config", config)]
  check_rows(names or (), config.rows, config_file(flag_values))
  overrides = config_flags.get_override_values(flag_values["config"])
  out = []
  for row in names or config.rows:
    values = load_config_dict(f"{config_file(flag_values)}:{row}")
    values.update_from_flattened_dict(overrides)
    out.append((row, build(values)))
  return out
