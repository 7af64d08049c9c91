"""Plain parallel text files as a split: one sentence a line, read without TFDS.

A split's files (data.train_files, dev_files, test_files, or a value of data.eval_sets) are given
in one of four forms:

  'corpus/train.{lang}'     a file per side: '{lang}' is replaced by data.source_lang for the source
                            file and by data.target_lang for the target file (corpus/train.en and
                            corpus/train.es), so either direction reads the same files
  {'en': 'data/src-train.txt', 'es': 'data/tgt-train.txt'}
                            a file per side, named by language: the keys must be exactly
                            data.source_lang and data.target_lang; either direction reads them
  'corpus/train.tsv'        (a string without '{lang}') one file, a pair a line: two texts split by
                            a tab, read as (source, target): the first column is the source
  {'tsv': 'corpus/train.tsv', 'columns': 'en,es'}
                            one such file whose columns' languages are declared: the column of
                            data.source_lang is the source, so a config of the other direction
                            reads it the other way round

A mapping is held as a `FrozenDict` (hashable: a frozen config is; written to config.json as a
JSON object and read back as the same value). On the command line a mapping is a Python literal:
--config.data.train_files="{'en': 'data/src-train.txt', 'es': 'data/tgt-train.txt'}".

Line i of one side is the translation of line i of the other; a line ends at '\\n' (a '\\r' before
it is dropped); the last line may lack its '\\n'; a UTF-8 byte-order mark at the start of a file is
dropped (the version below stays the raw bytes'). Relative paths are relative to the working
directory. Lines are returned as bytes, as TFDS's array_record gives them, so the pipeline treats
them alike: an empty side or a side that is not UTF-8 is counted and skipped, not an error.

Whatever would make the pairs wrong stops the run when the split is opened, in one line naming the
config key and the file: a missing or empty file, two sides of different line counts, a TSV line
without exactly one tab. A mapping of the wrong keys is refused when the config is built
(`check_spec`, called by tfm/data/config.py).

Monolingual text (data.text_key; tasks lm and mlm) is one text a line: 'corpus/train.{lang}' with
'{lang}' replaced by data.text_key, a path without '{lang}' (that file; a tab is text), or
{text_key: path}; `TextLineSplit` reads it (split[i] -> (line bytes,)).

`TextFileSplit` has the split interface of sources.TextPairSource: `len(split)`, `split[i] ->
(source bytes, target bytes)`, batched reads, `version`; it pickles (grain worker processes get
the bytes and line offsets). Its `version` is a SHA-256 of the files' contents in the order read
(and, for a TSV read target column first, a mark of that), which keys the token cache
(tfm/data/cache.py), so an edited file never reads ids cached from its old text. `content_key`
hashes the same files' contents regardless of direction: the vocabulary's file name
(tfm/data/vocabulary.py). The files are held in memory whole (their bytes and int64 [lines]
offsets): meant for corpora of up to a few million lines.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Mapping

import numpy as np

LANG = "{lang}"
BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark: dropped at the start of a file
TSV_KEYS = ("columns", "tsv")  # the keys of a TSV whose columns' languages are declared


class FrozenDict(dict):
  """A read-only dict that hashes: a files value given as a mapping, in a frozen config."""

  __slots__ = ()

  def __hash__(self) -> int:
    return hash(tuple(sorted(self.items())))

  def _read_only(self, *args, **kwargs):
    raise TypeError("a text files mapping is read-only")

  __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _read_only
  __ior__ = _read_only

  def __reduce__(self):
    return (type(self), (dict(self),))


def as_spec(value: Any) -> Any:
  """A files value as held in a DataConfig: a mapping (dict, ConfigDict, JSON object) becomes a
  FrozenDict of its items; anything else is returned as it is (validated by `check_spec`)."""
  if isinstance(value, Mapping) or (hasattr(value, "items") and not isinstance(value, str)):
    return FrozenDict((k, v) for k, v in value.items())
  return value


def check_spec(value: Any, source_lang: str, target_lang: str) -> str | None:
  """What is wrong with a files value of a config whose languages are source_lang / target_lang,
  as 'expected ...' (None: nothing). Checks its form only; the files are read when opened."""
  forms = (f"a path string ('dir/train.{LANG}', or a .tsv), a file per language "
           f"({{{source_lang!r}: ..., {target_lang!r}: ...}}), or a .tsv with its columns' "
           f"languages ({{'tsv': ..., 'columns': '{source_lang},{target_lang}'}})")
  if isinstance(value, str):
    return None if value.strip() else forms
  if not isinstance(value, Mapping):
    return forms
  langs = {source_lang, target_lang}
  if set(value) == langs:
    bad = [k for k in sorted(value) if not isinstance(value[k], str) or not value[k].strip()]
    return (f"a path string for each language ({', '.join(map(repr, bad))} has none)"
            if bad else None)
  if set(value) == set(TSV_KEYS):
    if not isinstance(value["tsv"], str) or not value["tsv"].strip():
      return "a path string as 'tsv'"
    columns = value["columns"].split(",") if isinstance(value["columns"], str) else None
    if columns is None or len(columns) != 2 or set(c.strip() for c in columns) != langs:
      return (f"'columns' naming the TSV's two columns' languages, data.source_lang and "
              f"data.target_lang in the file's order ('{source_lang},{target_lang}' or "
              f"'{target_lang},{source_lang}')")
    return None
  return (f"the keys data.source_lang and data.target_lang ({source_lang!r}, {target_lang!r}: a "
          f"file per language) or {' and '.join(map(repr, TSV_KEYS))} (a .tsv and its columns' "
          "languages)")


def paths(spec, source_lang: str, target_lang: str) -> tuple[str, ...]:
  """The files a spec names: (source file, target file), or (tsv file,)."""
  if isinstance(spec, Mapping):
    if _per_language(spec, source_lang, target_lang):
      return os.path.expanduser(spec[source_lang]), os.path.expanduser(spec[target_lang])
    return (os.path.expanduser(spec["tsv"]),)
  spec = os.path.expanduser(spec)
  if LANG in spec:
    return spec.replace(LANG, source_lang), spec.replace(LANG, target_lang)
  return (spec,)


def _per_language(spec: Mapping, source_lang: str, target_lang: str) -> bool:
  return source_lang in spec and target_lang in spec


def target_column_first(spec, source_lang: str, target_lang: str) -> bool:
  """True for a TSV whose declared first column is not data.source_lang's: read the other way."""
  if not isinstance(spec, Mapping) or _per_language(spec, source_lang, target_lang):
    return False
  return spec["columns"].split(",")[0].strip() != source_lang


def _read(path: str, key: str) -> bytes:
  if not os.path.isfile(path):
    raise ValueError(f"{key}: {path} does not exist or is not a file; expected a text file, one "
                     "sentence a line")
  with open(path, "rb") as f:
    data = f.read()
  if not data.removeprefix(BOM).strip():
    raise ValueError(f"{key}: {path} is empty; expected a text file, one sentence a line")
  return data


# SHA-256 of a file's bytes, by (path, device, inode, size, modification and change times): a run
# asks for the train files' digests several times (the vocabulary's name, the split) and reads
# them once. The change time moves on every write, also where the modification time is set back.
_DIGESTS: dict[tuple, str] = {}


def _stat_key(path: str) -> tuple:
  s = os.stat(path)
  return (os.path.abspath(path), s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns)


def _remember(path: str, before: tuple, digest: str) -> None:
  """Keeps a digest read between two stats that agree (a file written meanwhile is not kept)."""
  try:
    if _stat_key(path) == before:
      _DIGESTS[before] = digest
  except OSError:
    pass


def file_digest(path: str, key: str) -> str:
  """SHA-256 (hex) of a file's bytes, read once while the file is unchanged; raises the one-line
  error of a missing or empty file, naming `key`."""
  try:
    before = _stat_key(path)
  except OSError:
    before = None
  if before in _DIGESTS:
    return _DIGESTS[before]
  digest = hashlib.sha256(_read(path, key)).hexdigest()
  if before is not None:
    _remember(path, before, digest)
  return digest


def content_key(spec, source_lang: str, target_lang: str, key: str) -> str:
  """SHA-256 (hex) of the contents of the files `spec` names, the same for both directions (the
  files' digests sorted): what a vocabulary trained on them is named by."""
  digests = sorted(file_digest(path, key) for path in paths(spec, source_lang, target_lang))
  return hashlib.sha256("\n".join(digests).encode()).hexdigest()


def _lines(data: bytes) -> tuple[np.ndarray, np.ndarray]:
  """int64 [lines] starts and ends (exclusive, without '\\n' or '\\r\\n') of the lines of `data`,
  after a leading byte-order mark."""
  array = np.frombuffer(data, np.uint8)
  newlines = np.flatnonzero(array == ord("\n"))
  first = len(BOM) if data.startswith(BOM) else 0
  starts = np.concatenate([[first], newlines + 1]).astype(np.int64)
  ends = np.concatenate([newlines, [len(array)]]).astype(np.int64)
  if starts[-1] == len(array):  # the file ends with '\n': no line after it
    starts, ends = starts[:-1], ends[:-1]
  carriage = (ends > starts) & (array[np.maximum(ends - 1, 0)] == ord("\r"))
  return starts, ends - carriage


class TextFileSplit:
  """One split read from text files (see the module docstring); `key` is the config key that named
  them, for error messages (e.g. 'data.train_files')."""

  def __init__(self, spec, source_lang: str, target_lang: str, key: str):
    self.spec, self.key = spec, key
    self.paths = paths(spec, source_lang, target_lang)
    datas = []
    for path in self.paths:
      try:
        before = _stat_key(path)
      except OSError:
        before = None
      datas.append(_read(path, key))
      if before is not None:
        _remember(path, before, hashlib.sha256(datas[-1]).hexdigest())
    digest = hashlib.sha256()
    for data in datas:
      digest.update(hashlib.sha256(data).digest())
    swapped = len(datas) == 1 and target_column_first(spec, source_lang, target_lang)
    self.version = f"text-sha256-{digest.hexdigest()}" + ("-target-column-first" if swapped else "")
    if len(datas) == 2:
      (src_starts, src_ends), (tgt_starts, tgt_ends) = _lines(datas[0]), _lines(datas[1])
      if len(src_starts) != len(tgt_starts):
        raise ValueError(
            f"{key}: {self.paths[0]} has {len(src_starts)} lines but {self.paths[1]} has "
            f"{len(tgt_starts)}; expected the same number, line i of one the translation of line "
            "i of the other")
      self._data = tuple(datas)
    else:
      src_starts, tgt_ends = _lines(datas[0])
      src_ends, tgt_starts = self._tabs(datas[0], src_starts, tgt_ends)
      if swapped:  # the first column is the target language's
        src_starts, src_ends, tgt_starts, tgt_ends = tgt_starts, tgt_ends, src_starts, src_ends
      self._data = (datas[0], datas[0])
    self._offsets = (src_starts, src_ends, tgt_starts, tgt_ends)

  def _tabs(self, data: bytes, starts: np.ndarray, ends: np.ndarray):
    """(first column's ends, second column's starts) of a TSV's lines: at each line's one tab."""
    tabs = np.flatnonzero(np.frombuffer(data, np.uint8) == ord("\t"))
    line_of_tab = np.searchsorted(starts, tabs, side="right") - 1
    counts = np.bincount(line_of_tab, minlength=len(starts))
    bad = np.flatnonzero(counts != 1)
    if len(bad):
      raise ValueError(f"{self.key}: {self.paths[0]} line {bad[0] + 1} has {counts[bad[0]]} tabs; "
                       "expected one a line, between the source and the target text (or give a "
                       f"file per side: a path with {LANG})")
    tab_of_line = np.empty(len(starts), np.int64)
    tab_of_line[line_of_tab] = tabs
    return tab_of_line, tab_of_line + 1

  def __len__(self) -> int:
    return len(self._offsets[0])

  def __getitem__(self, index: int) -> tuple[bytes, bytes]:
    i = int(index)
    if not -len(self) <= i < len(self):
      raise IndexError(f"line {i} of {len(self)}")
    src_starts, src_ends, tgt_starts, tgt_ends = self._offsets
    return (self._data[0][src_starts[i]:src_ends[i]], self._data[1][tgt_starts[i]:tgt_ends[i]])

  def _getitems(self, indices) -> list[tuple[bytes, bytes]]:
    return [self[i] for i in indices]

  def __repr__(self) -> str:
    return f"TextFileSplit({' | '.join(self.paths)}, {len(self)} pairs)"


# Monolingual text (data.text_key): one text a line, no TSV. A spec is 'dir/train.{lang}'
# ('{lang}' replaced by data.text_key), a path without '{lang}' (that file), or {text_key: path}.

def check_text_spec(value: Any, text_key: str) -> str | None:
  """What is wrong with a files value of a monolingual config (data.text_key), as 'expected ...'
  (None: nothing)."""
  forms = (f"a path string ('dir/train.{LANG}', {LANG} replaced by data.text_key={text_key!r}, "
           f"or a file of one text a line) or {{{text_key!r}: path}}")
  if isinstance(value, str):
    return None if value.strip() else forms
  if isinstance(value, Mapping) and set(value) == {text_key}:
    return None if isinstance(value[text_key], str) and value[text_key].strip() else forms
  return forms


def text_path(spec, text_key: str) -> str:
  """The one file a monolingual spec names."""
  if isinstance(spec, Mapping):
    return os.path.expanduser(spec[text_key])
  return os.path.expanduser(spec).replace(LANG, text_key)


def text_content_key(spec, text_key: str, key: str) -> str:
  """SHA-256 (hex) of the contents of a monolingual spec's file (what its vocabulary is named by)."""
  return hashlib.sha256(file_digest(text_path(spec, text_key), key).encode()).hexdigest()


class TextLineSplit:
  """One split of monolingual text files: `len(split)`, `split[i] -> (text bytes,)` (line i),
  batched reads, `version` (a SHA-256 of the file's bytes); pickles. `key` names the config key
  for error messages."""

  def __init__(self, spec, text_key: str, key: str):
    self.spec, self.key = spec, key
    path = text_path(spec, text_key)
    self.paths = (path,)
    try:
      before = _stat_key(path)
    except OSError:
      before = None
    self._data = _read(path, key)
    if before is not None:
      _remember(path, before, hashlib.sha256(self._data).hexdigest())
    self.version = "text-sha256-" + hashlib.sha256(
        hashlib.sha256(self._data).digest()).hexdigest() + "-lines"
    self._starts, self._ends = _lines(self._data)

  def __len__(self) -> int:
    return len(self._starts)

  def __getitem__(self, index: int) -> tuple[bytes]:
    i = int(index)
    if not -len(self) <= i < len(self):
      raise IndexError(f"line {i} of {len(self)}")
    return (self._data[self._starts[i]:self._ends[i]],)

  def _getitems(self, indices) -> list[tuple[bytes]]:
    return [self[i] for i in indices]

  def __repr__(self) -> str:
    return f"TextLineSplit({self.paths[0]}, {len(self)} lines)"
