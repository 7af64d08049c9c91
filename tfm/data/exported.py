"""A dataset's splits exported as plain text pairs, readable without TensorFlow or TFDS.

A machine that has no TFDS (an air-gapped GPU node: experiments/gpu_table.py, docs/gpu.md) reads
a dataset that was prepared elsewhere from its export, a directory inside data.data_dir:

  <data.data_dir>/tfm_export/<dataset slug>/
    meta.json                {'format', 'dataset', 'languages', 'tfds_version', 'splits':
                              {TFDS split name: number of pairs}}
    <TFDS split>.jsonl.gz    one JSON object a line, {language key: text} for both keys, in the
                             split's order

`sources.DataSource.of(config.data)` finds an export where data.data_dir holds one for
data.dataset; the source then reads it, and `sources.prepare` leaves it as it is. An export keeps
the split's pairs and their order, and its `version` is the TFDS version it was exported from: the
token cache (tfm/data/cache.py) of the export has the same fingerprint as that of the TFDS split,
so a cache built from either is found from the other. A split is read whole into memory: exports are meant for corpora of a few hundred
thousand pairs (the Bible), not WMT.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil

FORMAT_VERSION = 1
DIRECTORY = "tfm_export"


def export_dir(cfg) -> str | None:
  """<data.data_dir>/tfm_export/<slug> of data.dataset (None without a data.data_dir)."""
  if cfg.data_dir is None:
    return None
  slug = re.sub(r"[^A-Za-z0-9]+", "-", cfg.dataset).strip("-")
  return os.path.join(os.path.expanduser(cfg.data_dir), DIRECTORY, slug)


def find(cfg) -> str | None:
  """The export directory of data.dataset in data.data_dir if there is one, else None."""
  directory = export_dir(cfg)
  if directory is None or not os.path.exists(os.path.join(directory, "meta.json")):
    return None
  return directory


class ExportedSplit:
  """A split of an export with TextPairSource's interface: len, [i] -> (source, target) str,
  `version`; picklable (grain workers get the pairs)."""

  def __init__(self, directory: str, split: str, source_key: str, target_key: str | None):
    with open(os.path.join(directory, "meta.json"), encoding="utf-8") as f:
      meta = json.load(f)
    if meta.get("format") != FORMAT_VERSION:
      raise ValueError(f"{directory}/meta.json: export format {meta.get('format')!r}, this tfm "
                       f"reads {FORMAT_VERSION}; export the dataset again")
    if split not in meta["splits"]:
      raise FileNotFoundError(f"{directory}: the export has no split {split!r}; it has "
                              f"{sorted(meta['splits'])}")
    named = ((("text_key", source_key),) if target_key is None else
             (("source_lang", source_key), ("target_lang", target_key)))
    for key, value in named:
      if value not in meta["languages"]:
        raise ValueError(f"config key data.{key}: expected a language of the export {directory}, "
                         f"one of {meta['languages']}, got {value!r}")
    self.source_key, self.target_key = source_key, target_key
    self.version = meta["tfds_version"]
    path = os.path.join(directory, f"{split}.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
      rows = [json.loads(line) for line in f]
    if len(rows) != meta["splits"][split]:
      raise ValueError(f"{path}: {len(rows)} pairs, meta.json says {meta['splits'][split]} (a "
                       "partial copy?); export it again")
    keys = (source_key,) if target_key is None else (source_key, target_key)
    self._pairs = [tuple(row[key] for key in keys) for row in rows]

  def __len__(self) -> int:
    return len(self._pairs)

  def __getitem__(self, index: int):
    return self._pairs[int(index)]

  def _getitems(self, indices):
    return [self._pairs[int(i)] for i in indices]

  def __repr__(self) -> str:
    return f"ExportedSplit({self.source_key}->{self.target_key}, {len(self)} pairs)"


def write(directory: str, dataset: str, splits: dict) -> None:
  """Exports `splits` ({TFDS split name: TextPairSource of data.dataset}, all of one language
  pair, or all of one text key (data.text_key); the TFDS version is the train split's) to
  `directory` (built under a temporary name, then renamed over what was there)."""
  first = next(iter(splits.values()))
  languages = tuple(key for key in (first.source_key, first.target_key) if key is not None)
  tmp = f"{directory}.tmp-{os.getpid()}"
  shutil.rmtree(tmp, ignore_errors=True)
  os.makedirs(tmp)
  try:
    counts = {}
    for name, source in splits.items():
      with gzip.open(os.path.join(tmp, f"{name}.jsonl.gz"), "wt", encoding="utf-8") as f:
        for i in range(len(source)):
          texts = [_text(value, f"{dataset} {name}[{i}]") for value in source[i]]
          f.write(json.dumps(dict(zip(languages, texts)), ensure_ascii=False) + "\n")
      counts[name] = len(source)
    with open(os.path.join(tmp, "meta.json"), "w", encoding="utf-8") as f:
      json.dump({"format": FORMAT_VERSION, "dataset": dataset, "languages": list(languages),
                 "tfds_version": splits.get("train", first).version, "splits": counts}, f,
                indent=1)
    shutil.rmtree(directory, ignore_errors=True)
    os.rename(tmp, directory)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise


def _text(value, where: str) -> str:
  """A TFDS text feature as str (array_record gives bytes); text that is not UTF-8 has no JSON
  form, so it stops the export (the Bible builder drops such pairs already)."""
  if isinstance(value, bytes):
    try:
      return value.decode("utf-8")
    except UnicodeDecodeError:
      raise ValueError(f"{where}: not UTF-8 text, which an export cannot hold") from None
  return str(value)
