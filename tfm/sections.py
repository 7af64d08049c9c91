"""What every config section shares: a frozen dataclass, built from a mapping, exported as a ConfigDict.

A section (`model`, `data`, `train`, `mesh`, `eval`) is a frozen dataclass whose field defaults are
the one home of its defaults and whose `__post_init__` validates it, so a section that exists is a
valid one. ml_collections config files start from `to_config_dict(Section())` (every key present,
typed, so `--config.train.steps=10` overrides work) and the experiment config is turned back into
sections with `from_mapping`, which names unknown keys.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Mapping, TypeVar

import ml_collections
from ml_collections.config_dict import placeholder

S = TypeVar("S")


def fail(key: str, expected: str, got: Any):
  """Raises the one-line error every section uses: `config key train.steps: expected ..., got ...`."""
  raise ValueError(f"config key {key}: expected {expected}, got {got!r}")


def is_int(x) -> bool:
  return isinstance(x, int) and not isinstance(x, bool)


def is_number(x) -> bool:
  """An int or float (not a bool) that is finite: NaN and infinities are never valid settings."""
  return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _optional_type(hint) -> type | None:
  """`int | None` -> int; `Mapping[str, str] | None` (Optional of a parametrized type) -> object,
  whose placeholder takes a Python literal on the command line (`--config.data.eval_sets="{'a':
  'dev'}"`) and any value in a config file; None for any hint that is not Optional of one type."""
  if typing.get_origin(hint) in (typing.Union, types.UnionType):
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(args) == 1 and len(typing.get_args(hint)) == 2:
      if isinstance(args[0], type):
        return args[0]
      if typing.get_origin(args[0]) is not None:
        return object
  return None


def to_config_dict(section) -> ml_collections.ConfigDict:
  """Every field of a section instance as a ConfigDict entry; Optional fields that are None become
  typed placeholders, so `--config.data.data_dir=/x` still type-checks on the command line."""
  hints = typing.get_type_hints(type(section))
  values = {}
  for field in dataclasses.fields(section):
    value = getattr(section, field.name)
    optional = _optional_type(hints[field.name])
    if value is None and optional is not None:
      value = placeholder(optional)
    values[field.name] = value
  return ml_collections.ConfigDict(values)


def field_names(cls) -> tuple[str, ...]:
  return tuple(f.name for f in dataclasses.fields(cls))


def from_mapping(cls: type[S], name: str, values: Mapping[str, Any] | None, **coerce) -> S:
  """Builds section `cls` (config prefix `name`) from a ConfigDict or dict; absent keys keep their
  defaults, unknown keys are an error naming them. coerce: field -> function applied first (JSON
  turns tuples into lists, say)."""
  values = {} if values is None else dict(values.items())
  known = field_names(cls)
  unknown = sorted(set(values) - set(known))
  if unknown:
    raise ValueError(f"unknown config key(s) {[f'{name}.{k}' for k in unknown]}; "
                     f"known keys: {', '.join(known)}")
  hints = typing.get_type_hints(cls)
  for key, value in values.items():
    # `--config.data.text_key=None` over a config file's 'en' is the string 'None' where the flags
    # were parsed by absl alone (the experiments/ scripts; tfm's commands set None in
    # tfm/config.py parse_flags, numbers too): an Optional key's None, as a placeholder reads it.
    if value == "None" and _is_optional(hints[key]):
      values[key] = None
  for key, function in coerce.items():
    if key in values:
      values[key] = function(values[key])
  return cls(**values)


def optional_fields(cls) -> set[str]:
  """The fields of a section dataclass that may be None (typed `X | None`)."""
  hints = typing.get_type_hints(cls)
  return {f.name for f in dataclasses.fields(cls) if _is_optional(hints[f.name])}


def _is_optional(hint) -> bool:
  return (typing.get_origin(hint) in (typing.Union, types.UnionType)
          and type(None) in typing.get_args(hint))


def to_dict(section) -> dict[str, Any]:
  """A section as plain JSON-friendly values (tuples stay tuples; json writes them as lists)."""
  return {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}
