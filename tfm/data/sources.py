"""The data source of a run: its dataset resolved once, where it lives, and its splits.

`DataSource.of(config.data)` (built once, by the Experiment: tfm/experiment.py) checks
data.dataset and the languages and finds where the dataset lives: an export of it in
data.data_dir (tfm/data/exported.py: the splits as text pairs, made where TFDS is installed), or
else TFDS's array_record files in data.data_dir (None = TFDS's default); or plain text files
(data.dataset='text': tfm/data/text_files.py). The loop, the sweep, the tokenizer, the token cache
and the pipeline read through it and never work that out again.

The paper's splits map to TFDS splits as train -> 'train', dev (newstest2013 for WMT'14) ->
'validation', test (newstest2014) -> 'test'. Either direction works: `data.source_lang` /
`data.target_lang` pick the feature keys.

`DataSource.open(split)` returns a `TextPairSource` (or an export's ExportedSplit, or a
text_files.TextFileSplit; with data.text_key, monolingual, a text_files.TextLineSplit and
`src[i] -> (text,)`): `len(src)` and `src[i] -> (source_text, target_text)` (bytes from
array_record and text files, or str under `tfds.testing.mock_data`), picklable so grain worker
processes can use it. `split` is 'train' | 'dev' | 'test' or the name of an evaluation set
(data.eval_sets), which is one of those splits or text files. Reading never downloads:
`prepare(source)` does that once. An export and text files are read without TFDS: TensorFlow and
TFDS are imported on the first use of a TFDS split, not with this module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import io
import logging
import re

from etils import epath

from tfm import storage
from tfm.data import exported
from tfm.data import text_files
from tfm.data.config import DataConfig, eval_split
from tfm.data.names import FILES_KEYS, MIXTURE_KEYS
from tfm.data.datasets import TEXT, check_features, check_text_key, resolve_dataset

log = logging.getLogger(__name__)

SPLITS = {"train": "train", "dev": "validation", "test": "test"}


@dataclasses.dataclass(frozen=True)
class DataSource:
  """data.dataset resolved: its TFDS name (or 'text') and language keys, where it lives, its splits
  and evaluation sets.

  export: the directory of an export of the dataset in data.data_dir (read instead of TFDS), or
  None; data_dir: the TFDS directory (None = TFDS's default); manual_dir: the dataset's manually
  downloaded files, for building it (data.manual_dir); splits: ('train' | 'dev' | 'test', the
  TFDS (and export) split name) pairs; files: for data.dataset='text', ('train' | 'dev' |
  'test', its data.<split>_files: a string or a mapping, text_files' forms) for the splits given;
  eval_sets: (name, split or text files) of data.eval_sets ((('dev', 'dev'),) by default);
  mixture: (name, weight, DataSource) of each source of data.mixture (() without one): the train
  batches read those sources' train splits (tfm/data/mixture.py), not this one's.
  """
  name: str
  source_lang: str
  target_lang: str
  data_dir: str | None
  manual_dir: str | None
  export: str | None
  splits: tuple[tuple[str, str], ...] = tuple(SPLITS.items())
  files: tuple[tuple[str, object], ...] = ()  # a spec: a string or a text_files.FrozenDict
  eval_sets: tuple[tuple[str, object], ...] = (("dev", "dev"),)
  mixture: tuple[tuple[str, float, "DataSource"], ...] = ()
  key: str = "data"  # how messages name its keys: 'data', or a mixture's 'data.mixture[i]'
  text_key: str | None = None  # data.text_key: monolingual, a split's examples are (text,)

  @classmethod
  def of(cls, cfg: DataConfig) -> DataSource:
    """Resolves the data section (data.dataset, data.source_lang / target_lang, data.data_dir,
    data.manual_dir, the text files, data.eval_sets): the one place that does."""
    spec = resolve_dataset(cfg)
    text = spec.name == TEXT
    files = tuple((split, getattr(cfg, key)) for split, key in FILES_KEYS.items()
                  if text and getattr(cfg, key) is not None)
    return cls(name=spec.name, source_lang=cfg.source_lang, target_lang=cfg.target_lang,
               data_dir=cfg.data_dir, manual_dir=cfg.manual_dir,
               export=None if text else exported.find(cfg), files=files,
               eval_sets=cfg.eval_set_items, text_key=cfg.text_key,
               mixture=tuple((name, weight, dataclasses.replace(cls.of(sub),
                                                                key=f"data.mixture[{i}]"))
                             for i, (name, weight, sub) in enumerate(cfg.mixture_sources)))

  @property
  def train_sources(self) -> tuple["DataSource", ...]:
    """The sources whose train splits the run trains on: the mixture's, or this one."""
    return tuple(source for _, _, source in self.mixture) or (self,)

  @property
  def is_text(self) -> bool:
    """True for plain text files (data.dataset='text'), read without TFDS."""
    return self.name == TEXT

  @property
  def eval_set_names(self) -> tuple[str, ...]:
    return tuple(name for name, _ in self.eval_sets)

  def split_name(self, split: str) -> str:
    """The TFDS (and export) name of split 'train' | 'dev' | 'test'."""
    names = dict(self.splits)
    if split not in names:
      raise ValueError(f"split must be one of {sorted(names)}, got {split!r}")
    return names[split]

  def open(self, split: str):
    """Opens split 'train' | 'dev' | 'test', or evaluation set `split` (data.eval_sets), for
    random access (no download). A mixture source's errors name its keys (_named_as)."""
    with _named_as(self):
      return self._open(split)

  def _open(self, split: str):
    sets = dict(self.eval_sets)
    if split not in SPLITS and split in sets:
      source_name, spec = eval_split(sets[split])
      if source_name is not None:  # {'source': NAME, 'split': ...}: a mixture source's split
        return {name: source for name, _, source in self.mixture}[source_name].open(spec)
      if sets[split] not in SPLITS:
        if self.text_key is not None:
          return text_files.TextLineSplit(sets[split], self.text_key, f"data.eval_sets.{split}")
        return text_files.TextFileSplit(sets[split], self.source_lang, self.target_lang,
                                        f"data.eval_sets.{split}")
      split = sets[split]
    if split not in SPLITS:
      raise ValueError(f"{split!r} is neither a split ({', '.join(SPLITS)}) nor an evaluation set "
                       f"of data.eval_sets ({', '.join(sets)})")
    if self.is_text:
      files = dict(self.files)
      if split not in files:
        raise ValueError(f"config key {self.key}.{FILES_KEYS[split]}: expected the {split} "
                         f"split's text files ('dir/{split}.{{lang}}' or a .tsv) to read that "
                         "split from, got None")
      if self.text_key is not None:
        return text_files.TextLineSplit(files[split], self.text_key,
                                        f"{self.key}.{FILES_KEYS[split]}")
      return text_files.TextFileSplit(files[split], self.source_lang, self.target_lang,
                                      f"{self.key}.{FILES_KEYS[split]}")
    name = self.split_name(split)
    if self.export is not None:
      if self.text_key is not None:
        return exported.ExportedSplit(self.export, name, self.text_key, None)
      return exported.ExportedSplit(self.export, name, self.source_lang, self.target_lang)
    tfds = tfds_module()
    try:
      data_source = tfds.data_source(self.name, split=name, data_dir=self.data_dir,
                                     download=False)
    except (AssertionError, FileNotFoundError, NotImplementedError) as e:
      raise FileNotFoundError(
          f"TFDS dataset {self.name!r} is not prepared in data.data_dir={self.data_dir!r} (None = "
          "TFDS default) in array_record format; run tfm.data.prepare(source) "
          f"(`tfm prepare-data`) first. TFDS said: {e}") from e
    except ValueError as e:  # an unknown builder, config or split
      if str(e).startswith("Unknown split"):
        raise ValueError(
            f"TFDS dataset {self.name!r} has no split {name!r} (tfm's {split!r}): {e} Evaluate "
            "other sets with data.eval_sets (e.g. text files of held-out pairs)") from None
      raise ValueError(_not_found(self.name, e)) from None
    info = getattr(data_source, "dataset_info", None)
    features = info.features if info is not None else (data_source[0] if len(data_source) else ())
    if self.text_key is not None:
      check_text_key(self.name, features, self.text_key)
      return TextPairSource(data_source, self.text_key, None)
    check_features(self.name, features, self.source_lang, self.target_lang)
    return TextPairSource(data_source, self.source_lang, self.target_lang)


def _not_found(name: str, error: Exception) -> str:
  """One line for TFDS's error on a name it cannot build (its own lists every dataset it has)."""
  said = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
  return (f"config key data.dataset: expected a TFDS translation builder ('builder' or "
          f"'builder/config') or 'text', got {name!r}; TFDS said: {said}")


def tfds_module():
  """tensorflow_datasets, with tfm's `bible_translate` builder registered (imported on first use:
  TensorFlow takes seconds to import, and machines that read exports have neither)."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  from tfm.data import bible  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  return tfds


class TextPairSource:
  """Random access to (source, target) texts of one split: `len(self)`, `self[i]`; with
  target_key None (data.text_key, monolingual) to (text,)."""

  def __init__(self, data_source, source_key: str, target_key: str | None):
    self._data_source = data_source
    self.source_key = source_key
    self.target_key = target_key
    self._keys = (source_key,) if target_key is None else (source_key, target_key)
    self._batched = hasattr(data_source, "__getitems__")

  def __len__(self) -> int:
    return len(self._data_source)

  @property
  def version(self) -> str:
    """The TFDS version of the prepared split ('' where unknown, e.g. under mock_data)."""
    info = getattr(self._data_source, "dataset_info", None)
    return str(getattr(info, "version", "") or "")

  def __getitem__(self, index: int):
    example = self._data_source[int(index)]
    return tuple(example[key] for key in self._keys)

  def _getitems(self, indices):
    """Batched read (grain uses it for chunks): array_record reads the records together."""
    keys = [int(i) for i in indices]
    if self._batched:
      try:
        examples = self._data_source.__getitems__(keys)
      except TypeError:  # tfds.testing.mock_data's source cannot read batches
        self._batched = False
      else:
        return [tuple(e[key] for key in self._keys) for e in examples]
    return [self[i] for i in keys]

  def __repr__(self) -> str:
    return f"TextPairSource({self.source_key}->{self.target_key}, {len(self)} pairs)"


# A key a mixture's source sets in a message ('data.data_dir=...', 'config key data.dataset: ...'):
# the other keys are the section's, shared by the sources, and named as they are.
_SOURCE_KEY = re.compile(r"(?<![^\s'\"(`])data\.(?=(%s)\b)" % "|".join(
    key for key in MIXTURE_KEYS if key not in ("name", "weight")))


@contextlib.contextmanager
def _named_as(source: DataSource):
  """Re-raises a ValueError or FileNotFoundError of a mixture's source (key 'data.mixture[i]')
  with each key a source may set (MIXTURE_KEYS) that it names as that source's: 'data.data_dir=...'
  of the second source is 'data.mixture[1].data_dir=...', the key to set for it (it was the
  section's where the source did not set it). The section's own errors (key 'data') and messages
  that name their source already (text files': 'data.mixture[1].train_files: ...') pass as they
  are."""
  try:
    yield
  except (ValueError, FileNotFoundError) as e:
    named = _SOURCE_KEY.sub(f"{source.key}.", str(e))
    if source.key == "data" or named == str(e):
      raise
    try:
      renamed = type(e)(named)
    except TypeError:  # an exception type of other arguments: its message as a ValueError
      renamed = ValueError(named)
    raise renamed from None


def _check_manual_dir(source: DataSource) -> None:
  if source.manual_dir is not None and not epath.Path(source.manual_dir).is_dir():
    raise FileNotFoundError(
        f"data.manual_dir={source.manual_dir!r} does not exist; expected a directory with the "
        "dataset's manually downloaded files (for bible_translate: a SWORD data directory with "
        "mods.d/ and modules/, e.g. /usr/share/sword), or data.manual_dir=None")


@contextlib.contextmanager
def _one_builder_at_a_time(builder):
  """Holds an exclusive lock on a file in the data directory's root while the dataset is checked
  and built there. Runs that start together on an unprepared data_dir (a sweep's parallel runs, a
  cluster job beside a local run; each the lead of its own job, so no barrier orders them) then
  build it once: the first builds, the others wait and find it prepared. Object stores (gs://),
  and shared filesystems mounted without locks, have none; there `prepare` accepts the build
  another process renamed into place first.
  """
  root = builder.data_dir_root
  if storage.is_remote(root):
    yield
    return
  root.mkdir(parents=True, exist_ok=True)
  name = builder.info.full_name.replace("/", "-")
  with open(root / f".tfm-prepare-{name}.lock", "a", encoding="utf-8") as lock:
    try:
      fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
    except OSError as e:  # a shared filesystem mounted without locks (Lustre without `flock`)
      log.warning("no lock on %s (%s): a run that prepares the dataset at the same time builds it "
                  "too, and the later build gives way", lock.name, e)
    yield


def check_text_files(source: DataSource) -> None:
  """Opens every text-file split a run reads (its train files where data.dataset='text', and each
  evaluation set given as files), so that a missing, empty or mismatched file stops it in one line
  before its workdir is made (tfm/loop.py): nothing half written is left behind."""
  members = {name: member for name, _, member in source.mixture}
  names = (("train",) if source.is_text and not source.mixture else ()) + tuple(
      name for name, split in source.eval_sets
      if (members[eval_split(split)[0]].is_text if eval_split(split)[0] is not None
          else split not in SPLITS or source.is_text))
  for name in names:
    source.open(name)
  for _, _, member in source.mixture:
    check_text_files(member)


def prepare(source: DataSource, create_data_dir: bool = False):
  """Downloads (WMT, any TFDS builder) or builds (Bible, from SWORD modules) the dataset as
  array_record.

  Idempotent: an already prepared dataset is left as is. Returns the tfds builder, or None where
  the source is an export or text files (which are ready as they are). A data.data_dir that does
  not exist is an error unless create_data_dir (`tfm prepare-data`): training never silently
  builds a second copy of a dataset in a mistyped directory. A mixture's sources (data.mixture)
  are prepared first, then the section's own dataset (its dev and test splits are evaluated).
  """
  for _, _, member in source.mixture:  # each source of a mixture, then the evaluated dataset
    with _named_as(member):
      prepare(member, create_data_dir)
  if source.export is not None or source.is_text:
    return None
  _check_manual_dir(source)
  name, data_dir = source.name, source.data_dir
  if data_dir is not None and not create_data_dir and not epath.Path(data_dir).is_dir():
    raise FileNotFoundError(
        f"data.data_dir={data_dir!r} does not exist; expected the TFDS directory the dataset "
        "is prepared in (None = TFDS's default, ~/tensorflow_datasets); `tfm prepare-data` builds "
        "it in a new directory")
  tfds = tfds_module()
  try:
    builder = tfds.builder(name, data_dir=data_dir, file_format="array_record")
  except ValueError as e:  # an unknown builder or config
    raise ValueError(_not_found(name, e)) from None
  # Before anything is downloaded: the languages (data.text_key) must be the builder's feature keys.
  if source.text_key is not None:
    check_text_key(name, builder.info.features, source.text_key)
  else:
    check_features(name, builder.info.features, source.source_lang, source.target_lang)
  download_config = tfds.download.DownloadConfig(manual_dir=source.manual_dir)
  try:
    with _one_builder_at_a_time(builder):
      if builder.is_prepared():
        return builder
      # A process that held the lock may have finished a build meanwhile: read the directory anew.
      builder = tfds.builder(name, data_dir=data_dir, file_format="array_record")
      if builder.is_prepared():
        return builder
      log.info("preparing dataset %s in %s (the first run only; TFDS's output goes to the log "
               "file)", name, builder.data_dir)
      tfds.disable_progress_bar()  # carriage-return progress bars would fill the console and logs
      printed = io.StringIO()
      try:
        with contextlib.redirect_stdout(printed):
          builder.download_and_prepare(download_config=download_config)
      except FileExistsError:
        # Another process renamed its finished build into place first (storage without locks):
        # TFDS removed this one's, and the dataset is there, the same deterministic build.
        if not builder.is_prepared():
          raise
        log.info("dataset %s was prepared by another process meanwhile", name)
        return builder
      for line in printed.getvalue().splitlines():  # the log file's, not the console's
        if line.strip():
          logging.getLogger("tensorflow_datasets").info("%s", line.strip())
      log.info("dataset %s ready", name)
  except ModuleNotFoundError as e:
    if e.name != "importlib_resources":
      raise
    raise ModuleNotFoundError(
        f"preparing {name} needs the `importlib_resources` package (TFDS 4.9 imports it "
        "for its own dataset builders but only declares it for Python < 3.9): "
        "pip install importlib-resources") from e
  return builder
