"""Which datasets a config may name, and what tfm knows of some (no TFDS import here).

`data.dataset` is one of:
  - a TFDS translation builder, 'builder' or 'builder/config' (e.g. 'ted_hrlr_translate/pt_to_en'),
    whose features hold one text per language: `data.source_lang` / `data.target_lang` pick two of
    those feature keys, in either direction. Any installed builder works; the keys are checked
    against its features when it is opened or prepared (`check_features`), since they are not
    known before.
  - TEXT ('text'): plain parallel text files given by data.train_files / dev_files / test_files
    (tfm/data/text_files.py); source_lang / target_lang are then the language codes the file
    names are built from (and that BLEU's tokenizer is chosen by).

DATASETS documents the datasets tfm was written for (the paper's WMT'14, the offline Bible built
from SWORD modules) with their language keys, so a mistyped language of one of those fails when the
config is built, not when the data is opened.
"""

from __future__ import annotations

import dataclasses
import re

TEXT = "text"
# A TFDS name: snake_case builder, then optionally a config name and a version.
_TFDS_NAME = re.compile(r"[a-z][a-z0-9_]*(/[A-Za-z0-9][A-Za-z0-9_.+-]*)?(:[0-9]+\.[0-9]+\.[0-9]+)?")


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """A dataset: TFDS name ('builder/config') or TEXT, its two language (feature) keys, and what it
  is ('' for a TFDS builder tfm does not know)."""
  name: str
  languages: tuple[str, str]
  description: str


DATASETS = {spec.name: spec for spec in (
    DatasetSpec("wmt14_translate/de-en", ("de", "en"), "WMT'14 English-German (paper, 4.5M pairs)"),
    DatasetSpec("wmt14_translate/fr-en", ("fr", "en"), "WMT'14 English-French (paper, 36M pairs)"),
    DatasetSpec("wmt_t2t_translate/de-en", ("de", "en"), "WMT'14 en-de as in tensor2tensor"),
    DatasetSpec("bible_translate/web-sparv", ("en", "es"), "offline: WEB English x RV1909 Spanish"),
    DatasetSpec("bible_translate/kjv-sparv", ("en", "es"), "offline: KJV English x RV1909 Spanish"),
    DatasetSpec("bible_translate/kjv-web", ("kjv", "web"), "offline: KJV x WEB (English-English)"),
)}


def resolve_dataset(cfg) -> DatasetSpec:
  """Checks data.dataset / data.source_lang / data.target_lang; returns the DatasetSpec.

  A known dataset's languages are checked here; another TFDS builder's feature keys when it is
  opened (check_features)."""
  text_key = getattr(cfg, "text_key", None)
  if text_key is not None:  # monolingual text: source_lang / target_lang are not read
    return _resolve_monolingual(cfg, text_key)
  if cfg.source_lang == cfg.target_lang:
    raise ValueError(f"data.source_lang and data.target_lang must differ, both are "
                     f"{cfg.source_lang!r}")
  languages = (cfg.source_lang, cfg.target_lang)
  if cfg.dataset == TEXT:
    return DatasetSpec(TEXT, languages, "plain parallel text files")
  spec = DATASETS.get(cfg.dataset)
  if spec is None:
    if not _TFDS_NAME.fullmatch(cfg.dataset):
      raise ValueError(f"config key data.dataset: expected a TFDS translation builder "
                       f"('builder' or 'builder/config', e.g. {sorted(DATASETS)[0]!r}) or "
                       f"{TEXT!r} (plain text files), got {cfg.dataset!r}")
    return DatasetSpec(cfg.dataset, languages, "")
  for key in ("source_lang", "target_lang"):
    if getattr(cfg, key) not in spec.languages:
      raise ValueError(f"data.{key}={getattr(cfg, key)!r} is not a language of data.dataset="
                       f"{cfg.dataset!r}; expected one of {spec.languages}")
  return spec


def _resolve_monolingual(cfg, text_key: str) -> DatasetSpec:
  """A dataset read for one text a example (data.text_key): a known dataset's key is checked."""
  if cfg.dataset == TEXT:
    return DatasetSpec(TEXT, (text_key,), "plain text files, one text a line")
  spec = DATASETS.get(cfg.dataset)
  if spec is None:
    if not _TFDS_NAME.fullmatch(cfg.dataset):
      raise ValueError(f"config key data.dataset: expected a TFDS builder ('builder' or "
                       f"'builder/config') or {TEXT!r} (plain text files), got {cfg.dataset!r}")
    return DatasetSpec(cfg.dataset, (text_key,), "")
  if text_key not in spec.languages:
    raise ValueError(f"config key data.text_key: expected a text feature of data.dataset="
                     f"{cfg.dataset!r}, one of {spec.languages}, got {text_key!r}")
  return DatasetSpec(spec.name, (text_key,), spec.description)


def check_text_key(dataset: str, features, text_key: str) -> None:
  """Raises ValueError, in one line, where data.text_key is not one of a dataset's feature keys
  (`features`: its FeaturesDict, or any collection of the key names)."""
  keys = sorted(features.keys() if hasattr(features, "keys") else features)
  if text_key not in keys:
    raise ValueError(f"config key data.text_key: expected a feature key of data.dataset="
                     f"{dataset!r}, one of {keys}, got {text_key!r}")


def check_features(dataset: str, features, source_lang: str, target_lang: str) -> None:
  """Raises ValueError, in one line, where data.source_lang or data.target_lang is not one of a
  dataset's feature keys (`features`: its FeaturesDict, or any collection of the key names)."""
  keys = sorted(features.keys() if hasattr(features, "keys") else features)
  for key, value in (("source_lang", source_lang), ("target_lang", target_lang)):
    if value not in keys:
      raise ValueError(f"config key data.{key}: expected a feature key of data.dataset="
                       f"{dataset!r}, one of {keys}, got {value!r}")
