"""`bible_translate`: an offline, verse-aligned parallel corpus built from installed SWORD modules.

Configs (name: source module x target module, feature keys):
  * `web-sparv`: World English Bible x Reina-Valera 1909, keys 'en', 'es' (quickstart default)
  * `kjv-sparv`: King James Version x Reina-Valera 1909, keys 'en', 'es'
  * `kjv-web`:   King James Version x World English Bible, keys 'kjv', 'web' (English-English)

A verse pair is the text of the same OSIS reference ("Gen.1.1") in both modules; references
present in only one module (e.g. the WEB deuterocanon) are dropped. Splits are a stable hash of
the reference (`verse_split`), so a verse lands in the same split in every config and never in
two splits: ~3.2% validation (dev, ~1000 verses), ~3.2% test, the rest train. Pairs with an empty
side, undecodable text, or wildly different lengths (a misaligned verse, e.g. a psalm heading
counted as verse 1 on one side only) are skipped; the counts go to the dataset's metadata.

The SWORD data directory is the TFDS manual dir when one is given (data.manual_dir), otherwise
the standard locations (/usr/share/sword, ~/.sword). Prepare with file_format='array_record' so
`tfds.data_source` can read it randomly (done by `tfm.data.sources.prepare`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os

from absl import logging
from etils import epath
import tensorflow_datasets as tfds

from tfm.data import sword

DEV_FRACTION = 0.032
TEST_FRACTION = 0.032
_HASH_BUCKETS = 100_000


@dataclasses.dataclass(eq=False)
class BibleConfig(tfds.core.BuilderConfig):
  """A pair of SWORD modules and the feature key (language) used for each side."""
  modules: tuple[str, str] = ("", "")
  languages: tuple[str, str] = ("", "")


def verse_split(ref: str) -> str:
  """Deterministic split of a verse reference: 'validation', 'test' or 'train'.

  Uses the first 8 bytes of SHA-256 of the reference, so it does not depend on Python's hash
  seed, the module, or the order verses are read in.
  """
  bucket = int.from_bytes(hashlib.sha256(ref.encode("utf-8")).digest()[:8], "big") % _HASH_BUCKETS
  if bucket < DEV_FRACTION * _HASH_BUCKETS:
    return "validation"
  if bucket < (DEV_FRACTION + TEST_FRACTION) * _HASH_BUCKETS:
    return "test"
  return "train"


def plausible_pair(a: str, b: str) -> bool:
  """False for pairs whose lengths differ too much to be translations of one verse."""
  short, long_ = sorted((len(a), len(b)))
  return long_ - short <= 80 or long_ <= 3 * short


def aligned_pairs(first: dict[str, str], second: dict[str, str]):
  """Joins two {ref: text} dicts on the reference, in `first`'s order.

  Returns (pairs, counts): pairs is a list of (ref, text_a, text_b); counts has the number of
  references skipped as 'empty' (one side blank; verses blank on both sides are ignored), 'non_utf8' (U+FFFD from a failed decode)
  and 'misaligned' (see `plausible_pair`).
  """
  pairs, counts = [], {"empty": 0, "non_utf8": 0, "misaligned": 0}
  for ref, a in first.items():
    if ref not in second:
      continue
    b = second[ref]
    if not a.strip() and not b.strip():
      continue  # a verse neither module has (e.g. a fragmentary module): not a pair at all
    if not a.strip() or not b.strip():
      counts["empty"] += 1
    elif "\ufffd" in a or "\ufffd" in b:
      counts["non_utf8"] += 1
    elif not plausible_pair(a, b):
      counts["misaligned"] += 1
    else:
      pairs.append((ref, a, b))
  return pairs, counts


class BibleTranslate(tfds.core.GeneratorBasedBuilder):
  """Verse-aligned Bible translations read from SWORD modules (see module docstring)."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Initial release."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      "Optional. Point the manual dir (data.manual_dir) at a SWORD data directory (with mods.d/ "
      f"and modules/). Without one, /usr/share/sword is used: `{sword.APT_HINT}`.")
  BUILDER_CONFIGS = [
      BibleConfig(name="web-sparv", description="World English Bible -> Reina-Valera 1909",
                  modules=("engWEB2015eb", "spaRV1909eb"), languages=("en", "es")),
      BibleConfig(name="kjv-sparv", description="King James Version -> Reina-Valera 1909",
                  modules=("engKJV2006eb", "spaRV1909eb"), languages=("en", "es")),
      BibleConfig(name="kjv-web", description="King James Version -> World English Bible",
                  modules=("engKJV2006eb", "engWEB2015eb"), languages=("kjv", "web")),
  ]

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls) -> epath.Path:
    # TFDS 4.9.10 resolves a builder's code path through `importlib_resources`, a package it only
    # declares for Python < 3.9; pointing at this file directly avoids that import.
    return epath.Path(__file__)

  def _info(self) -> tfds.core.DatasetInfo:
    lang_a, lang_b = self.builder_config.languages
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            lang_a: tfds.features.Text(),
            lang_b: tfds.features.Text(),
            "ref": tfds.features.Text(),
        }),
        supervised_keys=(lang_a, lang_b),
        metadata=tfds.core.MetadataDict(),
        homepage="https://crosswire.org/sword/",
    )

  def _sword_dir(self, dl_manager) -> str:
    modules = self.builder_config.modules
    try:
      path = os.fspath(dl_manager.manual_dir)
    except AssertionError:  # no (or an empty) manual dir: use the standard locations
      return sword.find_sword_dir(modules)
    if not set(modules) <= sword.installed_modules(path):
      raise FileNotFoundError(
          f"data.manual_dir={path!r} has no SWORD modules {list(modules)}. "
          + sword.missing_message(modules, [path]))
    return path

  def _split_generators(self, dl_manager):
    sword_dir = self._sword_dir(dl_manager)
    first, second = (sword.read_verses(sword_dir, m) for m in self.builder_config.modules)
    pairs, counts = aligned_pairs(first, second)
    logging.info("bible_translate/%s: %d verse pairs, skipped %s", self.builder_config.name,
                 len(pairs), counts)
    self.info.metadata.update({f"skipped_{k}": v for k, v in counts.items()})
    self.info.metadata["sword_modules"] = list(self.builder_config.modules)
    by_split = {"train": [], "validation": [], "test": []}
    for pair in pairs:
      by_split[verse_split(pair[0])].append(pair)
    return {name: self._generate_examples(split_pairs) for name, split_pairs in by_split.items()}

  def _generate_examples(self, pairs):
    lang_a, lang_b = self.builder_config.languages
    for ref, a, b in pairs:
      yield ref, {lang_a: a, lang_b: b, "ref": ref}
