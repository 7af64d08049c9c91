"""Input pipeline: TFDS translation builders (WMT'14, the offline Bible, any other) or their
text-pair exports (tfm.data.exported), or plain parallel text files (tfm.data.text_files; both
read without TFDS), SentencePiece vocab, packed batches; for tasks lm and mlm one text an example
(data.text_key) as token streams cut into rows (tfm.data.stream), masked for mlm (tfm.data.masking).

Public interface:
  DataConfig (the `data` section, validated when built)   -- tfm.data.config
  DataSource.of(cfg) -> the dataset resolved once: where it lives, its splits  -- tfm.data.sources
  prepare(source)                                         -- tfm.data.sources
  get_tokenizer(cfg, vocab_dir, *, source, task) -> Tokenizer   -- tfm.data.vocabulary
  train_iterator(cfg, source, tokenizer, *, process_index, process_count, row_multiple, task)
  eval_batches(cfg, source, tokenizer, split, *, process_index, process_count, row_multiple,
               task, context_length)
  eval_text_pairs(cfg, source, split) -> list of (source, target)  -- tfm.data.pipeline
  eval_word_count(cfg, source, split, *, task) -> words of a monolingual set  -- tfm.data.pipeline
  prefetch_to_device(iterator, sharding, size=2)          -- tfm.data.prefetch

`task` is the run's task object (tfm/tasks; None: translation pairs), handed in by the caller:
the data layer reads what it provides (monolingual, corrupter, has_inputs, mask_vocabulary,
check_data) and never imports tfm/tasks, which sits above it.
"""

import importlib

_EXPORTS = {
    "DataConfig": "config", "DataSource": "sources", "prepare": "sources",
    "get_tokenizer": "vocabulary", "Tokenizer": "tokenizer", "train_iterator": "pipeline",
    "TrainIterator": "pipeline", "eval_batches": "pipeline", "eval_text_pairs": "pipeline",
    "eval_word_count": "pipeline",
    "prefetch_to_device": "prefetch",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
  # Lazy: `from tfm.data.config import ...` should not pay for importing TFDS, grain and JAX.
  if name in _EXPORTS:
    return getattr(importlib.import_module(f"tfm.data.{_EXPORTS[name]}"), name)
  raise AttributeError(f"module 'tfm.data' has no attribute {name!r}")
