"""data.mixture and data.mixture_weights: each source's name, weight (normalized) and own data
section, and their checks, which DataConfig runs when it is built (tfm/data/config.py). The
training-time mixing of the sources' examples is tfm/data/mixture.py's. Each function takes that
DataConfig as `cfg` (not type-hinted: the hint would import the module that imports this one)."""

from __future__ import annotations

import dataclasses
import math

from tfm import sections
from tfm.data.names import EVAL_SET_NAME, FILES_KEYS, MIXTURE_KEYS


def _fail(key: str, expected: str, got) -> None:
  sections.fail(f"data.{key}", expected, got)


# A source's own DataConfig evaluates nothing (the run's evaluation sets are the section's); its
# one evaluation set, the train split, is one every source has.
_SOURCE_EVAL_SETS = (("source", "train"),)
_WEIGHTS_FORM = "'w1:w2:...' (e.g. '7:3') or a sequence of positive numbers, one a source, or None"


def mixture_weights(cfg) -> tuple[float, ...]:
  """The sources' weights (data.mixture_weights where set, else each source's 'weight'),
  normalized to sum to 1."""
  given = cfg.mixture_weights
  if given is None:
    raw = [source.get("weight") for source in cfg.mixture]
  elif isinstance(given, str):
    raw = [_number(part) for part in given.split(":")]
  else:
    raw = list(given)
  raw = [float(w) for w in raw]
  if not math.isfinite(sum(raw)):  # weights near the float maximum (each finite, validated):
    raw = [w / max(raw) for w in raw]  # their sum is inf and would normalize them to zeros
  total = sum(raw)
  return tuple(w / total for w in raw)


def _number(text: str):
  try:
    return float(text)
  except ValueError:
    return None


def mixture_names(cfg) -> tuple[str, ...]:
  """Each source's name: its 'name', else its dataset's config ('web-sparv'), builder, or
  'text'."""
  names = []
  for source in cfg.mixture:
    dataset = source.get("dataset", cfg.dataset)
    names.append(source.get("name", dataset.split(":")[0].rsplit("/", 1)[-1]
                            if isinstance(dataset, str) else dataset))
  return tuple(names)


def validate(cfg) -> None:
  """Checks data.mixture and data.mixture_weights (each source's keys, weight and name, and its own
  section as a DataConfig); raises ValueError naming `data.mixture[i].<key>`."""
  if cfg.mixture is None:
    if cfg.mixture_weights is not None:
      _fail("mixture_weights", "None without data.mixture (the weights of its sources)",
            cfg.mixture_weights)
    return
  if not isinstance(cfg.mixture, tuple) or len(cfg.mixture) < 1:
    _fail("mixture", "a sequence of sources, each a mapping with a 'weight', or None",
          cfg.mixture)
  for i, source in enumerate(cfg.mixture):
    unknown = sorted(set(source) - set(MIXTURE_KEYS))
    if unknown:
      _fail(f"mixture[{i}]", f"a mapping of the keys {', '.join(MIXTURE_KEYS)}", dict(source))
    if cfg.mixture_weights is None and not (sections.is_number(source.get("weight"))
                                            and source["weight"] > 0):
      _fail(f"mixture[{i}].weight", "a positive number (or data.mixture_weights)",
            source.get("weight"))
  given = cfg.mixture_weights
  if given is not None:
    raw = ([_number(p) for p in given.split(":")] if isinstance(given, str) else
           list(given) if isinstance(given, tuple) else None)
    if raw is None or len(raw) != len(cfg.mixture) or not all(
        sections.is_number(w) and w > 0 for w in raw):
      _fail("mixture_weights", f"{len(cfg.mixture)} weights, {_WEIGHTS_FORM}", given)
  for i, source in enumerate(cfg.mixture):  # a source's own keys, named as data.mixture[i]'s
    if (source.get("text_key", cfg.text_key) is None) != (cfg.text_key is None):
      _fail(f"mixture[{i}].text_key", "a text key where data.text_key is set (monolingual text) "
            "and None where it is not (pairs)", source.get("text_key"))
    try:
      source_config(cfg, source)
    except ValueError as e:
      message = str(e)
      raise ValueError(message.replace("config key data.", f"config key data.mixture[{i}].", 1)
                       if message.startswith("config key data.")
                       else f"data.mixture[{i}]: {message}") from None
  names = mixture_names(cfg)
  for i, name in enumerate(names):
    if not isinstance(name, str) or not EVAL_SET_NAME.fullmatch(name):
      _fail(f"mixture[{i}].name", "a name of letters, digits, '_', '-' or '.'", name)
    if names.count(name) > 1:
      _fail(f"mixture[{i}].name", f"a name no other source has (two are {name!r}: give each "
            "source a 'name')", name)


def source_config(cfg, source):
  """A mixture source's own DataConfig: the section with the source's keys replaced, no mixture,
  and evaluation sets it never reads. A source that names another dataset or any text files starts
  without the section's files: one that gives its train_files alone has no dev split, rather than
  the section's dev files read as its own ({'source': NAME} evaluation sets)."""
  changes = {k: v for k, v in source.items() if k not in ("name", "weight")}
  if "dataset" in changes or any(key in changes for key in FILES_KEYS.values()):
    changes = {**{key: None for key in FILES_KEYS.values()}, **changes}
  return dataclasses.replace(cfg, mixture=None, mixture_weights=None,
                             eval_sets=_SOURCE_EVAL_SETS, **changes)
