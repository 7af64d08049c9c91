"""The datasets tfm knows: TFDS name, language keys, and what each is (no TFDS import here).

`data.dataset` names a TFDS 'builder/config'; `data.source_lang` / `data.target_lang` pick two of
its feature keys, in either direction.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """A known dataset: TFDS name ('builder/config') and its two language (feature) keys."""
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
  """Checks data.dataset / data.source_lang / data.target_lang; returns the DatasetSpec."""
  spec = DATASETS.get(cfg.dataset)
  if spec is None:
    raise ValueError(f"data.dataset={cfg.dataset!r} is not a known dataset; expected one of "
                     f"{sorted(DATASETS)}")
  for key in ("source_lang", "target_lang"):
    if getattr(cfg, key) not in spec.languages:
      raise ValueError(f"data.{key}={getattr(cfg, key)!r} is not a language of data.dataset="
                       f"{cfg.dataset!r}; expected one of {spec.languages}")
  if cfg.source_lang == cfg.target_lang:
    raise ValueError(f"data.source_lang and data.target_lang must differ, both are "
                     f"{cfg.source_lang!r}")
  return spec
