"""The `data` section of the experiment config: one frozen dataclass, validated when it is built.

Defaults are the paper's setting (section 5.1-5.2): WMT'14 English->German with a shared
vocabulary of 37000 BPE pieces and ~25000 source + ~25000 target tokens per step (96 rows of 256
tokens). The offline Bible corpus is e.g.::

  dataset='bible_translate/web-sparv', source_lang='en', target_lang='es', vocab_size=8000

any other TFDS translation builder names its two feature keys::

  dataset='ted_hrlr_translate/pt_to_en', source_lang='pt', target_lang='en'

and plain parallel text files, one sentence a line (tfm/data/text_files.py)::

  dataset='text', source_lang='en', target_lang='es',
  train_files='corpus/train.{lang}', dev_files='corpus/dev.{lang}', test_files='corpus/test.tsv'
  train_files={'en': 'data/src-train.txt', 'es': 'data/tgt-train.txt'}   # a file per language
  test_files={'tsv': 'corpus/test.tsv', 'columns': 'es,en'}               # a TSV's column languages

A weighted mixture of sources (tfm/data/mixture.py) trains on several at once, each source the
keys it changes from the section's (its dataset, languages' feature keys, files) and a weight::

  dataset='bible_translate/web-sparv', source_lang='en', target_lang='es',
  mixture=({'name': 'web', 'weight': 7}, {'name': 'kjv', 'dataset': 'bible_translate/kjv-sparv',
           'weight': 3})
  mixture_weights='7:3'    # overrides the weights in order: a sweep grid's key (1:1,7:3,9:1)

Every check raises `ValueError` naming the offending key as `data.<key>`, so a bad command-line
override is easy to trace.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from tfm import sections
from tfm.data import mixture_config, text_files
from tfm.data.names import EVAL_SET_NAME, FILES_KEYS, SPLITS
from tfm.data.datasets import TEXT, resolve_dataset

OVERLONG_POLICIES = ("filter", "truncate")
DEFAULT_EVAL_SETS = (("dev", "dev"),)  # data.eval_sets=None: the dataset's dev split, as 'dev'
# 'train' and 'data' are the train metrics' and the pipeline figures' prefixes, no set's name.
_RESERVED_NAMES = ("train", "data")
EVAL_SOURCE_KEYS = ("source", "split")  # an evaluation set {'source': NAME, 'split': 'dev'}


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Where examples come from and how they are batched; defaults are the paper's en-de setting.

  Reading the train split (tfm/data/pipeline.py):
    cache: False reads records and runs SentencePiece on every epoch (fine for small corpora and
      for eval). True tokenizes this host's share of the train split once into a token cache
      (tfm/data/cache.py) and reads token ids from it, memory-mapped: the batches are identical,
      and the main process no longer tokenizes. The first run builds it (with num_workers
      processes); a cache is keyed by vocabulary, max_length, overlong, dataset (text files: their
      contents) and host count, so changing any of them builds a new one and never reads a stale
      one.
    cache_dir: where caches live; None = <data_dir or TFDS's default data dir>/tfm_cache (text
      files without a data_dir: ~/.cache/tfm). Local only (memory-mapped).
    num_workers: processes that produce chunks of encoded examples (tfm/data/workers.py): they
      read records and tokenize (cache=False) or gather cached ids (cache=True); packing or
      bucketing stays in the main process. 0 = grain read-ahead threads in the main process.
      The batches, and the checkpointed data position, are the same for every value, so a
      resumed run may change it.

  Plain text files (data.dataset='text'; tfm/data/text_files.py): train_files, dev_files and
    test_files name a split's files, as 'dir/train.{lang}' (a file per side, '{lang}' replaced by
    source_lang and by target_lang), {source_lang: path, target_lang: path} (a file per side,
    named by language), 'dir/train.tsv' (no '{lang}': one file, source<TAB>target a line) or
    {'tsv': path, 'columns': 'en,es'} (a TSV whose columns' languages are declared: either
    direction reads it). A mapping is held as a text_files.FrozenDict (hashable; config.json holds
    it as a JSON object). train_files is required; dev_files where a dev evaluation reads the dev
    split (the default eval_sets), test_files for `tfm eval --split test`. They go through the
    vocabulary (named by the train files' contents), the token cache (keyed by the files'
    contents), packing, resume and host sharding as a TFDS split does.

  Weighted mixtures (tfm/data/mixture.py): mixture is a sequence of sources, each a mapping of
    'weight' (a positive number; the weights are normalized to sum to 1), an optional 'name'
    (default: the dataset's config, 'web-sparv', or its builder; 'text' for text files) and any
    of dataset, source_lang, target_lang, data_dir, manual_dir, train_files, dev_files,
    test_files, text_key (monolingual sources only, e.g. 'text' for lm1b beside the Bible's 'en'):
    the source is this section with those keys replaced (one that names a dataset or any files
    starts without the section's files). Each example of the train batches comes from
    source i with probability w_i, drawn from data.shuffle_seed and the example's index on its
    host; every source is shuffled and repeated on its own (an epoch of a small source ends
    sooner). mixture_weights ('7:3', or a sequence of numbers) replaces the sources' weights in
    order, so an ablation of the weights is one key of a sweep grid (`--grid
    data.mixture_weights=1:1,7:3`). The section's own dataset stays the run's for
    evaluation (its dev split, 'dev', by default); an evaluation set {'source': NAME} (with
    'split': 'test' or 'train', default 'dev') reads a source's own split. The vocabulary is
    trained on a sample of the sources in proportion to the weights (tfm/data/vocabulary.py).

  Monolingual text (config.task='lm', 'mlm' or 'span'; tfm/data/stream.py, masking.py, spans.py):
    text_key names the one text of an example: a TFDS feature key ('text' for lm1b-like builders;
    'en' for bible_translate/web-sparv, the World English Bible side), or for dataset='text' the
    name put for '{lang}' in the files' pattern (train_files='corpus/train.{lang}' with
    text_key='en' reads corpus/train.en; a path without '{lang}' is one text a line; a mapping
    {text_key: path} names the file). source_lang / target_lang are then not read. The vocabulary
    is trained on that text alone; train batches are a stream of the shuffled examples cut into
    rows of max_length (data.overlong does not apply; data.packing must stay True). mask_rate,
    mask_token_rate and mask_random_rate are BERT's masking (task mlm): each token but EOS is
    selected with probability mask_rate; of the selected, mask_token_rate become <mask>,
    mask_random_rate a uniformly random ordinary piece, the rest stay. noise_density and
    mean_noise_span_length are T5's span corruption (task span, tfm/data/spans.py): a raw row's
    tokens in noise spans, and their mean length; max_length is then the inputs' length, the raw
    rows and the targets are as long as T5's arithmetic gives (512 -> raw rows of 568, targets
    of 114).

  Evaluation sets (the training loop's loss/perplexity and BLEU, and `tfm eval`): eval_sets maps
    a name to a split of the dataset ('dev', 'test', 'train') or to text files (a spec as above),
    e.g. {'dev': 'dev', 'news': 'corpus/newstest.{lang}'}; each is evaluated and reported on its
    own, under its name (TensorBoard `<name>/perplexity`, `tfm eval`'s eval_<name>_*.json). None
    means {'dev': 'dev'}: the dataset's own dev split, named 'dev'. A name that is a split's
    ('dev', 'test') can only name that split.
  """

  dataset: str = "wmt14_translate/de-en"  # TFDS name/config, see tfm.data.datasets.DATASETS
  source_lang: str = "en"
  target_lang: str = "de"
  data_dir: str | None = None  # TFDS data dir; None = TFDS default
  manual_dir: str | None = None  # Bible: SWORD data dir (None = /usr/share/sword)
  vocab_size: int = 37000  # shared source+target SentencePiece BPE (section 5.1)
  vocab_dir: str | None = None  # None -> the run's workdir
  max_length: int = 256  # ours: row length of a batch (inputs and targets)
  tokens_per_batch: int = 24576  # global tokens per step per side: 96 rows x 256 (~25000, section 5.1)
  packing: bool = True  # ours: packed rows; False: length-bucketed padded batches (the paper's way)
  overlong: str = "filter"  # 'filter' | 'truncate' examples longer than max_length
  shuffle_seed: int = 0
  num_workers: int = 0  # worker processes producing encoded chunks; 0 = in-process threads
  cache: bool = False  # True: tokenize the train split once into a token cache, read ids back
  cache_dir: str | None = None  # token caches; None = <data_dir or TFDS default>/tfm_cache
  eval_max_examples: int | None = None  # dev/test subset size: the first N examples that hold
  # text (blank and non-UTF-8 ones skipped, not counted); None = the whole split
  # dataset='text': a string ('dir/train.{lang}' or 'dir/train.tsv') or a mapping ({'en': path,
  # 'es': path}, or {'tsv': path, 'columns': 'en,es'}); typed `object` so that the command line
  # takes a Python literal (a mapping) as well as a plain string.
  train_files: object | None = None
  dev_files: object | None = None  # dataset='text': the dev split's files, as train_files
  test_files: object | None = None  # dataset='text': the test split's files, as train_files
  eval_sets: Mapping[str, object] | None = None  # name -> split or files; None = {'dev': 'dev'}
  # Several train sources, each {'weight': w, 'name': ..., <data keys it changes>}; None = the one
  # dataset above. Typed `object` (a Python literal on the command line).
  mixture: Sequence[Mapping[str, object]] | None = None
  mixture_weights: Sequence[float] | None = None  # '7:3' or (7, 3): the sources' weights, in order
  # Monolingual text (config.task 'lm' | 'mlm'): the feature key (TFDS) or '{lang}' of the files
  # of the one text of an example; None = translation pairs of source_lang / target_lang.
  text_key: str | None = None
  mask_rate: float = 0.15  # task mlm: each maskable token selected with this probability (BERT)
  mask_token_rate: float = 0.8  # of the selected: replaced by <mask>
  mask_random_rate: float = 0.1  # of the selected: replaced by a uniformly random ordinary piece
  # task mlm: the selection rate of the evaluation sets' fixed masks; None = mask_rate. A run that
  # trains at another rate (Wettig et al. 2023's 0.4) keeps BERT's 0.15 here to be scored on the
  # same masked pieces as the others.
  eval_mask_rate: float | None = None
  noise_density: float = 0.15  # task span: the share of a raw row's tokens in noise spans (T5)
  mean_noise_span_length: float = 3.0  # task span: the mean length of a noise span (T5)
  # Task translate: ids kept above the SentencePiece pieces and never in its data, the sentinels
  # of the span run it starts from (train.init_from), so that its ids and model.vocab_size are
  # that run's; data.vocab_size counts them. 0 otherwise; task span counts its own from its rows.
  sentinels: int = 0

  def __post_init__(self):
    # Mappings held as FrozenDicts, eval_sets as ((name, spec), ...): a frozen config is hashable
    # (a sweep groups runs by their data).
    for key in FILES_KEYS.values():
      object.__setattr__(self, key, text_files.as_spec(getattr(self, key)))
    if self.eval_sets is not None and not isinstance(self.eval_sets, (str, bytes)):
      items = self.eval_sets.items() if hasattr(self.eval_sets, "items") else self.eval_sets
      try:
        object.__setattr__(self, "eval_sets", tuple((name, text_files.as_spec(spec))
                                                    for name, spec in items))
      except (TypeError, ValueError):
        _fail("eval_sets", "a mapping of names to a split or text files, or None", self.eval_sets)
    if self.mixture is not None and not isinstance(self.mixture, (str, bytes, Mapping)):
      try:
        object.__setattr__(self, "mixture", tuple(text_files.as_spec(
            {k: text_files.as_spec(v) for k, v in source.items()}) for source in self.mixture))
      except (TypeError, AttributeError):
        _fail("mixture", "a sequence of sources, each a mapping with a 'weight', or None",
              self.mixture)
    if isinstance(self.mixture_weights, list):
      object.__setattr__(self, "mixture_weights", tuple(self.mixture_weights))
    validate_data_config(self)

  @property
  def eval_set_items(self) -> tuple[tuple[str, object], ...]:
    """(name, split or text files spec) of every evaluation set, in order."""
    return DEFAULT_EVAL_SETS if self.eval_sets is None else self.eval_sets

  @property
  def eval_set_names(self) -> tuple[str, ...]:
    return tuple(name for name, _ in self.eval_set_items)

  @property
  def mixture_sources(self) -> tuple[tuple[str, float, "DataConfig"], ...]:
    """(name, weight normalized to sum 1, the source's own DataConfig) of each source of
    data.mixture, in order; () without a mixture. A source's DataConfig is this section with the
    source's keys replaced, no mixture, and evaluation sets it never reads."""
    if self.mixture is None:
      return ()
    weights = mixture_config.mixture_weights(self)
    out = []
    for source, weight, name in zip(self.mixture, weights, mixture_config.mixture_names(self)):
      out.append((name, weight, mixture_config.source_config(self, source)))
    return tuple(out)

  def replace(self, **changes) -> "DataConfig":
    """A copy with `changes` (validated again)."""
    return dataclasses.replace(self, **changes)


def from_mapping(values) -> DataConfig:
  """DataConfig from the `data` section of a config (ConfigDict or dict); unknown keys are named."""
  return sections.from_mapping(DataConfig, "data", values)


def _fail(key: str, expected: str, got) -> None:
  sections.fail(f"data.{key}", expected, got)


def validate_data_config(cfg: DataConfig) -> None:
  """Checks types and ranges of the data section; raises ValueError naming the bad `data.<key>`.

  The dataset and languages are checked against the known datasets (tfm.data.datasets).
  """
  for key in ("dataset", "source_lang", "target_lang"):
    if not isinstance(getattr(cfg, key), str) or not getattr(cfg, key):
      _fail(key, "a non-empty string", getattr(cfg, key))
  for key in ("data_dir", "manual_dir", "vocab_dir", "cache_dir"):
    if getattr(cfg, key) is not None and not isinstance(getattr(cfg, key), str):
      _fail(key, "a path string or None", getattr(cfg, key))
  for key, low in (("vocab_size", 8), ("max_length", 2), ("tokens_per_batch", 1)):
    value = getattr(cfg, key)
    if not sections.is_int(value) or value < low:
      _fail(key, f"an integer >= {low}", value)
  if cfg.tokens_per_batch < cfg.max_length:
    _fail("tokens_per_batch", f"at least data.max_length={cfg.max_length} (one row per step)",
          cfg.tokens_per_batch)
  for key in ("packing", "cache"):
    if not isinstance(getattr(cfg, key), bool):
      _fail(key, "True or False", getattr(cfg, key))
  if cfg.overlong not in OVERLONG_POLICIES:
    _fail("overlong", "'filter' or 'truncate'", cfg.overlong)
  if not sections.is_int(cfg.shuffle_seed) or not 0 <= cfg.shuffle_seed < 2**32:
    _fail("shuffle_seed", "an integer in [0, 2**32)", cfg.shuffle_seed)
  if not sections.is_int(cfg.num_workers) or cfg.num_workers < 0:
    _fail("num_workers", "an integer >= 0", cfg.num_workers)
  if cfg.cache_dir is not None and "://" in cfg.cache_dir:
    _fail("cache_dir", "a local directory (the token cache is memory-mapped) or None",
          cfg.cache_dir)
  if not sections.is_int(cfg.sentinels) or not 0 <= cfg.sentinels <= cfg.vocab_size - 8:
    _fail("sentinels", f"an integer in [0, data.vocab_size - 8 = {cfg.vocab_size - 8}] (ids kept "
          "above 8 or more SentencePiece pieces)", cfg.sentinels)
  if cfg.eval_max_examples is not None and (not sections.is_int(cfg.eval_max_examples)
                                            or cfg.eval_max_examples < 1):
    _fail("eval_max_examples", "a positive integer or None", cfg.eval_max_examples)
  _validate_text_key(cfg)
  _validate_files(cfg)
  mixture_config.validate(cfg)
  _validate_eval_sets(cfg)
  resolve_dataset(cfg)


def _validate_text_key(cfg: DataConfig) -> None:
  if cfg.text_key is not None and (not isinstance(cfg.text_key, str) or not cfg.text_key
                                   or not EVAL_SET_NAME.fullmatch(cfg.text_key)):
    _fail("text_key", "a feature key or language name of letters, digits, '_', '-' or '.' "
          "(monolingual text), or None (translation pairs)", cfg.text_key)
  if cfg.text_key is not None and cfg.packing is False:
    _fail("packing", f"True with data.text_key={cfg.text_key!r} (monolingual text, tasks lm and "
          "mlm, is a token stream cut into rows, not length buckets)", cfg.packing)
  for key in ("mask_rate", "mask_token_rate", "mask_random_rate"):
    value = getattr(cfg, key)
    if not sections.is_number(value) or not 0.0 <= value <= 1.0:
      _fail(key, "a number in [0, 1]", value)
  if cfg.eval_mask_rate is not None and (not sections.is_number(cfg.eval_mask_rate)
                                         or not 0.0 <= cfg.eval_mask_rate <= 1.0):
    _fail("eval_mask_rate", "a number in [0, 1], or None (data.mask_rate)", cfg.eval_mask_rate)
  if cfg.mask_token_rate + cfg.mask_random_rate > 1.0 + 1e-12:
    _fail("mask_random_rate", f"at most 1 - data.mask_token_rate={cfg.mask_token_rate} (the two "
          "shares of the selected tokens sum to <= 1)", cfg.mask_random_rate)
  if not sections.is_number(cfg.noise_density) or not 0.0 < cfg.noise_density < 1.0:
    _fail("noise_density", "a number in (0, 1) (the share of a row's tokens in noise spans)",
          cfg.noise_density)
  if not sections.is_number(cfg.mean_noise_span_length) or cfg.mean_noise_span_length < 1.0:
    _fail("mean_noise_span_length", "a number >= 1 (tokens a noise span holds on average)",
          cfg.mean_noise_span_length)


def _check_files(value, cfg: DataConfig) -> str | None:
  if cfg.text_key is not None:
    return text_files.check_text_spec(value, cfg.text_key)
  return text_files.check_spec(value, cfg.source_lang, cfg.target_lang)


def _validate_files(cfg: DataConfig) -> None:
  for key in FILES_KEYS.values():
    value = getattr(cfg, key)
    wrong = None if value is None else _check_files(value, cfg)
    if wrong:
      _fail(key, wrong if isinstance(value, Mapping) else f"{wrong}, or None", value)
    if value is not None and cfg.dataset != TEXT:
      _fail(key, f"None with data.dataset={cfg.dataset!r} (text files are read with "
            f"data.dataset={TEXT!r})", value)
  if cfg.dataset == TEXT and cfg.train_files is None:
    _fail("train_files", "the train split's text files with data.dataset='text' "
          "('dir/train.{lang}': a file per side, or 'dir/train.tsv')", None)


def _validate_eval_sets(cfg: DataConfig) -> None:
  if cfg.eval_sets is not None and not isinstance(cfg.eval_sets, tuple):
    _fail("eval_sets", "a mapping of names to a split or text files, or None", cfg.eval_sets)
  if cfg.eval_sets is not None and not cfg.eval_sets:
    _fail("eval_sets", "at least one evaluation set, or None (the dev split)", {})
  names = [name for name, _ in cfg.eval_set_items]
  for name, spec in cfg.eval_set_items:
    if not isinstance(name, str) or not EVAL_SET_NAME.fullmatch(name) or name in _RESERVED_NAMES:
      _fail("eval_sets", "names of letters, digits, '_', '-' or '.', not 'train' or 'data'", name)
    if names.count(name) > 1:
      _fail("eval_sets", "distinct names", name)
    if isinstance(spec, Mapping) and "source" in spec:
      _validate_source_set(cfg, name, spec)
      continue
    wrong = (None if spec in SPLITS else _check_files(spec, cfg))
    if wrong:
      _fail(f"eval_sets.{name}", f"a split ({', '.join(SPLITS)}) or text files: {wrong}", spec)
    if name in SPLITS and spec != name:
      _fail(f"eval_sets.{name}", f"{name!r}: the name of a split can only name that split",
            spec)
    if spec in SPLITS and cfg.dataset == TEXT and getattr(cfg, FILES_KEYS[spec]) is None:
      _fail(FILES_KEYS[spec], f"the {spec} split's text files: data.eval_sets evaluates the "
            f"{spec} split as {name!r}", None)


def _validate_source_set(cfg: DataConfig, name: str, spec) -> None:
  """An evaluation set {'source': NAME, 'split': 'dev'}: a split of a source of data.mixture."""
  key = f"eval_sets.{name}"
  if cfg.mixture is None:
    _fail(key, "a split or text files (a {'source': ...} set names a source of data.mixture, "
          "and there is none)", spec)
  if set(spec) - set(EVAL_SOURCE_KEYS):
    _fail(key, "{'source': NAME} or {'source': NAME, 'split': 'dev' | 'test' | 'train'}", spec)
  sources = {source_name: sub for source_name, _, sub in cfg.mixture_sources}
  if spec["source"] not in sources:
    _fail(f"{key}.source", f"a source of data.mixture ({', '.join(sources)})", spec["source"])
  split = spec.get("split", "dev")
  if split not in SPLITS:
    _fail(f"{key}.split", f"a split ({', '.join(SPLITS)})", split)
  sub = sources[spec["source"]]
  if sub.dataset == TEXT and getattr(sub, FILES_KEYS[split]) is None:
    i = list(sources).index(spec["source"])
    _fail(f"mixture[{i}].{FILES_KEYS[split]}", f"the {split} split's text files: "
          f"data.eval_sets evaluates it as {name!r}", None)


def eval_split(spec) -> tuple[str | None, object]:
  """(source name or None, split or text files) of an evaluation set's spec."""
  if isinstance(spec, Mapping) and "source" in spec:
    return spec["source"], spec.get("split", "dev")
  return None, spec
