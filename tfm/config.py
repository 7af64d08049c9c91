"""Loading and checking experiment configs (ml_collections).

A config is a Python file with `get_config(arg=None)`, named as `path.py` or `path.py:arg`, with
overrides the ml_collections way: `--config=configs/table3.py:A1 --config.model.num_heads=2`.
`validate` checks every section up front so a bad value fails before any compilation, with a message
naming the key.
"""

from __future__ import annotations

from typing import Sequence

import ml_collections
from absl import flags
from ml_collections import config_flags

from tfm.model.config import ModelConfig, from_config


def define_config_flag(flag_values: flags.FlagValues, argv: Sequence[str], default=None):
  """Adds `--config` (file[:arg]) and its `--config.a.b=value` overrides to flag_values."""
  return config_flags.DEFINE_config_file("config", default, "experiment config file[:arg]",
                                         flag_values=flag_values, lock_config=False,
                                         sys_argv=list(argv))


def load_config(spec: str, overrides: Sequence[str] = ()) -> ml_collections.ConfigDict:
  """load_config('configs/table3.py:C5', ['model.num_heads=4']) -> ConfigDict (not yet validated)."""
  argv = ["tfm", f"--config={spec}"] + [f"--config.{o}" for o in overrides]
  fv = flags.FlagValues()
  holder = define_config_flag(fv, argv)
  try:
    fv(argv)
  except flags.Error as e:
    raise ValueError(flag_error_message(e)) from None
  return holder.value


def flag_error_message(error: Exception) -> str:
  """The useful last line of a config-loading error (absl wraps it with a whole traceback)."""
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  return lines[-1] if lines else str(error)


def config_file(flag_values: flags.FlagValues) -> str:
  return config_flags.get_config_filename(flag_values["config"])


def model_config(config: ml_collections.ConfigDict) -> ModelConfig:
  """The validated ModelConfig of an experiment config (errors name the `model.*` key)."""
  if "model" not in config:
    raise ValueError("config has no `model` section")
  return from_config(config.model.to_dict())


def validate(config: ml_collections.ConfigDict) -> ModelConfig:
  """Checks every section that is present; returns the ModelConfig."""
  model = model_config(config)
  if "data" in config:
    from tfm.data.config import validate_data_config
    validate_data_config(config.data)
    if config.data.vocab_size != model.vocab_size:
      raise ValueError(f"config keys data.vocab_size ({config.data.vocab_size}) and model.vocab_size "
                       f"({model.vocab_size}) must be equal: the model embeds the data's vocabulary")
  if "train" in config:
    from tfm.train.config import validate_train_config
    validate_train_config(config.train)
  if "mesh" in config:
    from tfm.train.config import validate_mesh_config
    validate_mesh_config(config.mesh)
  if "eval" in config:
    e = config.eval
    if e.beam_size < 1:
      raise ValueError(f"config key eval.beam_size: expected >= 1, got {e.beam_size}")
    if e.length_penalty < 0:
      raise ValueError(f"config key eval.length_penalty: expected >= 0, got {e.length_penalty}")
    if e.max_extra_length < 0:
      raise ValueError(f"config key eval.max_extra_length: expected >= 0, got {e.max_extra_length}")
  return model
