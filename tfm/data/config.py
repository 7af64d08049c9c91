"""The `data` section of the experiment config and its validation.

`default_data_config()` gives the quickstart defaults (the offline Bible corpus, WEB English ->
Reina-Valera 1909 Spanish). The paper's setting is e.g.::

  cfg.dataset = 'wmt14_translate/de-en'; cfg.source_lang = 'en'; cfg.target_lang = 'de'
  cfg.vocab_size = 37000; cfg.max_length = 256; cfg.tokens_per_batch = 25000

Every check in `validate_data_config` raises `ValueError` naming the offending key as
`data.<key>`, so a bad command-line override is easy to trace.
"""

from __future__ import annotations

import ml_collections

OVERLONG_POLICIES = ("filter", "truncate")


def default_data_config() -> ml_collections.ConfigDict:
  """Returns the default `config.data` (quickstart: Bible WEB -> SPARV, small vocab)."""
  cfg = ml_collections.ConfigDict()
  cfg.dataset = "bible_translate/web-sparv"  # TFDS name/config, see tfm.data.sources.DATASETS
  cfg.source_lang = "en"
  cfg.target_lang = "es"
  cfg.data_dir = ml_collections.FieldReference(None, field_type=str)  # TFDS data dir; None = default
  cfg.manual_dir = ml_collections.FieldReference(None, field_type=str)  # Bible: SWORD data dir
  cfg.vocab_size = 8000  # shared source+target SentencePiece BPE; paper en-de: 37000
  cfg.vocab_dir = ml_collections.FieldReference(None, field_type=str)  # None -> caller's workdir
  cfg.max_length = 128  # row length of a batch (inputs and targets)
  cfg.tokens_per_batch = 8192  # global tokens per step per side; rows = tokens_per_batch // max_length
  cfg.packing = True  # True: packed rows; False: length-bucketed padded batches
  cfg.overlong = "filter"  # 'filter' | 'truncate' examples longer than max_length
  cfg.shuffle_seed = 0
  cfg.num_workers = 0  # grain worker processes for tokenization; 0 = in-process threads
  cfg.eval_max_examples = ml_collections.FieldReference(None, field_type=int)  # dev subset size
  return cfg


def _fail(key: str, expected: str, got) -> None:
  raise ValueError(f"data.{key} must be {expected}, got {got!r}")


def validate_data_config(cfg: ml_collections.ConfigDict) -> None:
  """Checks types and ranges of `config.data`; raises ValueError naming the bad `data.<key>`.

  The dataset name itself is checked against the known datasets by
  `tfm.data.sources.resolve_dataset`, which is called from here too.
  """
  required = ("dataset", "source_lang", "target_lang", "data_dir", "manual_dir", "vocab_size",
              "vocab_dir", "max_length", "tokens_per_batch", "packing", "overlong", "shuffle_seed",
              "num_workers", "eval_max_examples")
  for key in required:
    if key not in cfg:
      raise ValueError(f"data.{key} is missing from the config (see tfm.data.config.default_data_config)")
  for key in ("dataset", "source_lang", "target_lang"):
    if not isinstance(cfg[key], str) or not cfg[key]:
      _fail(key, "a non-empty string", cfg[key])
  for key in ("data_dir", "manual_dir", "vocab_dir"):
    if cfg[key] is not None and not isinstance(cfg[key], str):
      _fail(key, "a path string or None", cfg[key])
  for key, low in (("vocab_size", 8), ("max_length", 2), ("tokens_per_batch", 1)):
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
      _fail(key, f"an integer >= {low}", value)
  if cfg.tokens_per_batch < cfg.max_length:
    _fail("tokens_per_batch", f"at least data.max_length={cfg.max_length} (one row per step)",
          cfg.tokens_per_batch)
  if not isinstance(cfg.packing, bool):
    _fail("packing", "True or False", cfg.packing)
  if cfg.overlong not in OVERLONG_POLICIES:
    _fail("overlong", "'filter' or 'truncate'", cfg.overlong)
  if isinstance(cfg.shuffle_seed, bool) or not isinstance(cfg.shuffle_seed, int) or not (
      0 <= cfg.shuffle_seed < 2**32):
    _fail("shuffle_seed", "an integer in [0, 2**32)", cfg.shuffle_seed)
  if isinstance(cfg.num_workers, bool) or not isinstance(cfg.num_workers, int) or cfg.num_workers < 0:
    _fail("num_workers", "an integer >= 0", cfg.num_workers)
  if cfg.eval_max_examples is not None and (
      isinstance(cfg.eval_max_examples, bool) or not isinstance(cfg.eval_max_examples, int)
      or cfg.eval_max_examples < 1):
    _fail("eval_max_examples", "a positive integer or None", cfg.eval_max_examples)
  from tfm.data import sources  # local import: sources imports TFDS, config should stay light
  sources.resolve_dataset(cfg)
