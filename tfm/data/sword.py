"""Reading whole Bible modules from a SWORD data directory with `pysword`, as plain text verses.

A SWORD data directory holds `mods.d/<module>.conf` and `modules/texts/...`. Debian installs the
modules used here under /usr/share/sword (packages sword-text-kjv, sword-text-web, sword-text-sparv).

`read_verses(sword_dir, module)` returns {"Gen.1.1": "In the beginning ...", ...} in canon order
(OSIS book abbreviation, chapter, verse), with the OSIS markup stripped by `clean_osis`. Empty
verses are returned as "" and left to the caller to skip.
"""

from __future__ import annotations

import functools
import os
import re

DEFAULT_SWORD_DIRS = ("/usr/share/sword", os.path.expanduser("~/.sword"))
APT_HINT = "apt-get install sword-text-kjv sword-text-web sword-text-sparv"

# Module name -> Debian package that installs it.
MODULE_PACKAGES = {
    "engKJV2006eb": "sword-text-kjv",
    "engWEB2015eb": "sword-text-web",
    "spaRV1909eb": "sword-text-sparv",
}

# Elements whose content is not verse text (footnotes, headings, cross references, ...).
_DROP_WITH_CONTENT = re.compile(
    r"<(note|title|rdg|rdgGroup|catchWord|index|figure|abbr)\b[^>]*?(/>|>.*?</\1\s*>)",
    re.IGNORECASE | re.DOTALL)
# Structural tags that separate words (line groups, paragraphs, breaks).
_SEPARATING_TAG = re.compile(r"</?(l|lg|p|div|br|milestone|list|item|chapter|verse)\b[^>]*>",
                             re.IGNORECASE)
_ANY_TAG = re.compile(r"<[^>]*>")
# A book end or the WEB glossary appended to the last verse: nothing after it belongs to the verse.
_BOOK_END = re.compile(r"<div\b[^>]*(type=\"glossary\"|eID=\"[^\"]*\"[^>]*type=\"book\"|"
                       r"type=\"book\"[^>]*eID=)", re.IGNORECASE)
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?)\]”’])")
# &amp; last, so an escaped entity ("&amp;lt;") decodes to its text ("&lt;"), not to "<".
_ENTITIES = {"&lt;": "<", "&gt;": ">", "&quot;": '"', "&apos;": "'", "&amp;": "&"}


def clean_osis(raw: str) -> str:
  """Strips OSIS markup from one verse: drops notes/titles with their content, keeps word text.

  Also removes the pilcrow (¶) paragraph marks of the KJV and normalises whitespace.
  """
  end = _BOOK_END.search(raw)
  if end:
    raw = raw[:end.start()]
  text = _DROP_WITH_CONTENT.sub(" ", raw)
  text = _SEPARATING_TAG.sub(" ", text)
  text = _ANY_TAG.sub("", text)
  for entity, char in _ENTITIES.items():
    text = text.replace(entity, char)
  text = text.replace("¶", " ")
  text = " ".join(text.split())
  return _SPACE_BEFORE_PUNCT.sub(r"\1", text)


def installed_modules(sword_dir: str) -> set[str]:
  """Names of the modules ("[name]" sections) declared in `sword_dir`/mods.d/*.conf."""
  conf_dir = os.path.join(sword_dir, "mods.d")
  if not os.path.isdir(conf_dir):
    return set()
  names = set()
  for filename in sorted(os.listdir(conf_dir)):
    if filename.endswith(".conf"):
      with open(os.path.join(conf_dir, filename), encoding="utf-8", errors="replace") as f:
        names.update(m.group(1) for m in re.finditer(r"^\[([^\]]+)\]\s*$", f.read(), re.MULTILINE))
  return names


def find_sword_dir(modules: tuple[str, ...], candidates=DEFAULT_SWORD_DIRS) -> str:
  """Returns the first candidate directory holding all `modules`, else raises FileNotFoundError."""
  for path in candidates:
    if set(modules) <= installed_modules(path):
      return path
  raise FileNotFoundError(missing_message(modules, candidates))


def missing_message(modules, searched) -> str:
  packages = sorted({MODULE_PACKAGES.get(m, m) for m in modules})
  return (f"SWORD Bible modules {list(modules)} not found (searched {list(searched)}). Install them "
          f"with `{APT_HINT}` (needed here: {', '.join(packages)}), or point data.manual_dir at a "
          "SWORD data directory that has mods.d/ and modules/.")


def _open_module(sword_dir: str, module: str):
  from pysword.modules import SwordModules  # pylint: disable=import-outside-toplevel
  library = SwordModules(sword_dir)
  found = library.parse_modules()
  if module not in found:
    raise FileNotFoundError(missing_message((module,), [sword_dir]))
  bible = library.get_bible_from_module(module)
  # pysword decompresses a whole block (a book) for every verse it returns; remembering the last
  # few blocks makes reading a module much faster (see experiments/SPEED.md). Only affects
  # compressed (zText) modules.
  if hasattr(bible, "_decompressed_text"):
    bible._decompressed_text = functools.lru_cache(maxsize=4)(bible._decompressed_text)  # pylint: disable=protected-access
  return bible


def read_verses(sword_dir: str, module: str, books=None) -> dict[str, str]:
  """Reads every verse of `module` -> {OSIS ref "Book.chapter.verse": cleaned text}.

  The versification (verse list) comes from the module's conf via pysword; verses that the
  module leaves empty map to "". `books` optionally limits reading to these OSIS book names
  (e.g. ["Ruth"]).
  """
  bible = _open_module(sword_dir, module)
  verses = {}
  wanted = None if books is None else set(books)
  for testament_books in bible.get_structure().get_books().values():
    for book in testament_books:
      if wanted is not None and book.osis_name not in wanted:
        continue
      for chapter, num_verses in enumerate(book.chapter_lengths, start=1):
        raw = list(bible.get_iter(books=[book.name], chapters=[chapter], clean=False))
        if len(raw) != num_verses:
          raise ValueError(f"{module}: {book.osis_name} {chapter} has {len(raw)} verses, "
                           f"versification says {num_verses}")
        for verse, text in enumerate(raw, start=1):
          if isinstance(text, bytes):  # pysword returns b'' for records past the end of the file
            text = text.decode("utf-8", errors="replace")
          verses[f"{book.osis_name}.{chapter}.{verse}"] = clean_osis(text)
  return verses
