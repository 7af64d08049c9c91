"""Test helpers: a tiny fake SWORD library (RawText modules) and the plain text it contains.

The fake modules are read by the same code as the real ones (pysword -> tfm.data.sword ->
bible_translate builder). Each verse's clean text is known here independently of the markup
stripping, so tests can compare the prepared dataset and the batches against it.
"""

from __future__ import annotations

import os
import struct

import numpy as np

# (pysword book name, OSIS name, chapters to fill)
BOOKS = (("Genesis", "Gen", (1, 2, 3, 4, 5)), ("Ruth", "Ruth", (1, 2, 3, 4)),
         ("John", "John", (1,)))
EN_WORDS = ("light earth water day night god said good made land sea tree fruit seed man woman "
            "garden river gold stone field bread house city word life grace truth people king "
            "servant").split()
ES_WORDS = ("luz tierra agua dia noche dios dijo bueno hizo campo mar arbol fruto semilla hombre "
            "mujer huerto rio oro piedra pan casa ciudad palabra vida gracia verdad pueblo rey "
            "siervo").split()
MODULES = {"web": "engWEB2015eb", "sparv": "spaRV1909eb", "kjv": "engKJV2006eb"}
NUMBER_WORDS = "zero one two three four five six seven eight nine".split()


def _number(n: int) -> str:
  return " ".join(NUMBER_WORDS[int(d)] for d in str(n))


def corpus(seed: int = 0):
  """Returns {module_key: {(book, osis, chapter, verse): (raw_osis_text, clean_text)}}.

  Every 50th verse is empty in the Spanish module; some English verses carry OSIS markup
  (<w> word tags, footnotes) that must not reach the dataset. Verse lengths vary from 3 to
  ~45 words so that small max_length values make some examples over-long.
  """
  from pysword.canons import canons  # pylint: disable=import-outside-toplevel
  lengths = {book[0]: book[3] for book in canons["kjv"]["ot"] + canons["kjv"]["nt"]}
  rng = np.random.default_rng(seed)
  out = {key: {} for key in MODULES}
  counter = 0
  for book, osis, chapters in BOOKS:
    for chapter in chapters:
      for verse in range(1, lengths[book][chapter - 1] + 1):
        counter += 1
        n = int(rng.integers(1, 40 if counter % 9 else 45))
        en_words = [EN_WORDS[i] for i in rng.integers(0, len(EN_WORDS), n)]
        es_words = [ES_WORDS[i] for i in rng.integers(0, len(ES_WORDS), n)]
        head = f"{osis.lower()} {_number(chapter)} and {_number(verse)}"
        en = f"{head} {' '.join(en_words)}."
        es = f"{head} {' '.join(es_words)}."
        kjv = f"{head} thus {' '.join(reversed(en_words))}."
        raw_en = en
        if counter % 5 == 0:
          raw_en = " ".join(f'<w lemma="strong:H{i}">{w}</w>' for i, w in enumerate(en.split()))
        if counter % 7 == 0:
          raw_en = raw_en.replace(" ", ' <note placement="foot">hidden footnote</note>', 1)
        if counter % 50 == 0:
          es = ""
        key = (book, osis, chapter, verse)
        out["web"][key] = (raw_en, en)
        out["sparv"][key] = (es, es)
        out["kjv"][key] = (f"<q who=\"x\">¶ {kjv}</q>", kjv)
  return out


def write_library(root: str, verses_by_module=None) -> str:
  """Writes the corpus as RawText SWORD modules (KJV versification) under `root`; returns root."""
  from pysword.books import BibleStructure  # pylint: disable=import-outside-toplevel
  structure = BibleStructure("kjv")
  verses_by_module = verses_by_module or corpus()
  os.makedirs(os.path.join(root, "mods.d"), exist_ok=True)
  for key, verses in verses_by_module.items():
    name = MODULES[key]
    datapath = f"modules/texts/rawtext/{name.lower()}/"
    os.makedirs(os.path.join(root, datapath), exist_ok=True)
    with open(os.path.join(root, "mods.d", f"{name.lower()}.conf"), "w", encoding="utf-8") as f:
      f.write(f"[{name}]\nDataPath=./{datapath}\nModDrv=RawText\nSourceType=OSIS\n"
              "Encoding=UTF-8\nVersification=KJV\n")
    by_testament = {"ot": {}, "nt": {}}
    for (book, _, chapter, verse), (raw, _) in verses.items():
      (testament, (index,)), = structure.ref_to_indicies(
          books=[book], chapters=[chapter], verses=[verse]).items()
      by_testament[testament][index] = raw.encode("utf-8")
    for testament, records in by_testament.items():
      text, index_records = bytearray(), bytearray()
      for index in range(max(records) + 1):
        data = records.get(index, b"")
        index_records += struct.pack("<IH", len(text), len(data))
        text += data
      with open(os.path.join(root, datapath, testament), "wb") as f:
        f.write(bytes(text))
      with open(os.path.join(root, datapath, f"{testament}.vss"), "wb") as f:
        f.write(bytes(index_records))
  return root


def expected_split(ref: str) -> str:
  """The documented split rule, recomputed: SHA-256 of the ref, first 8 bytes, mod 100000."""
  import hashlib  # pylint: disable=import-outside-toplevel
  bucket = int(hashlib.sha256(ref.encode()).hexdigest()[:16], 16) % 100_000
  return "validation" if bucket < 3200 else "test" if bucket < 6400 else "train"


def clean_pairs(source="web", target="sparv", seed: int = 0):
  """{OSIS ref: (clean source, clean target)} for verses with both sides non-empty."""
  data = corpus(seed)
  pairs = {}
  for key, (_, src) in data[source].items():
    tgt = data[target][key][1]
    if src and tgt:
      pairs[f"{key[1]}.{key[2]}.{key[3]}"] = (src, tgt)
  return pairs


def segments(batch, side: str):
  """Yields the token lists of every packed segment of `side` in a batch (row-major order)."""
  tokens, seg = batch[side], batch[f"{side}_segmentation"]
  for row in range(tokens.shape[0]):
    for segment_id in np.unique(seg[row]):
      if segment_id:
        yield tuple(int(t) for t in tokens[row][seg[row] == segment_id])


def same_batches(a, b) -> bool:
  """True when two lists of batches have the same keys and exactly equal arrays."""
  return len(a) == len(b) and all(
      x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b))
