"""Input pipeline: TFDS sources (WMT'14, offline Bible) or their text-pair exports
(tfm.data.exported, read without TFDS), SentencePiece vocab, packed batches.

Public interface:
  DataConfig (the `data` section, validated when built)   -- tfm.data.config
  prepare(cfg)                                            -- tfm.data.sources
  get_tokenizer(cfg, vocab_dir) -> Tokenizer              -- tfm.data.tokenizer
  train_iterator(cfg, tokenizer, *, process_index, process_count, row_multiple) -> TrainIterator
  eval_batches(cfg, tokenizer, split, *, process_index, process_count, row_multiple) -> batches
  eval_text_pairs(cfg, split) -> list of (source, target)  -- tfm.data.pipeline
  prefetch_to_device(iterator, sharding, size=2)          -- tfm.data.prefetch
"""

import importlib

_EXPORTS = {
    "DataConfig": "config", "prepare": "sources",
    "get_tokenizer": "tokenizer", "Tokenizer": "tokenizer", "train_iterator": "pipeline",
    "TrainIterator": "pipeline", "eval_batches": "pipeline", "eval_text_pairs": "pipeline",
    "prefetch_to_device": "prefetch",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
  # Lazy: `from tfm.data.config import ...` should not pay for importing TFDS, grain and JAX.
  if name in _EXPORTS:
    return getattr(importlib.import_module(f"tfm.data.{_EXPORTS[name]}"), name)
  raise AttributeError(f"module 'tfm.data' has no attribute {name!r}")
