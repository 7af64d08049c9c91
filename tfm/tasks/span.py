"""Task 'span': T5's span corruption of monolingual text (Raffel et al. 2020), on the
encoder-decoder.

Its batches are data.text_key's texts, each ending with EOS, as one stream cut into raw rows of
T5's length (tfm/data/spans.py: the longest row whose corrupted inputs fit data.max_length; 568
tokens for 512); in each row data.noise_density of the tokens (0.15), in spans of
data.mean_noise_span_length on average (3), are dropped from the inputs, each span replaced by one
sentinel, and are the targets, each after its sentinel: inputs [rows, data.max_length], targets
[rows, T5's targets length] (114 for 512). The sentinels are the vocabulary's top ids (the first
vocab_size - 1, counting down), as T5's, so the SentencePiece model is trained with data.vocab_size
less them (tfm/data/vocabulary.py) and data.vocab_size = model.vocab_size counts them.

The decoder learns the targets by teacher forcing, so the shared loss over the target pieces is
the objective and the dev perplexity is over those pieces (sentinels and EOS included), with the
dev stream corrupted once with spans.EVAL_SEED: the same spans in every run and every evaluation.
Nothing is translated: no BLEU, no decoding.
"""

from __future__ import annotations

import math

import numpy as np

from tfm.data import spans
from tfm.data import stream
from tfm.tasks.task import Task

MIN_PIECES = 8  # SentencePiece's pieces beside the sentinels, as data.vocab_size's own minimum


class SpanCorruption(Task):
  name = "span"
  architecture = "encoder_decoder"
  dev_ppl_note = ("the span targets' pieces, sentinels and EOS included, the dev spans alike for "
                  "every run")
  data_keys = ("noise_density", "mean_noise_span_length")

  def sentinels(self, data) -> int:
    return spans.geometry(data)[2]

  def stream_length(self, data) -> int:
    return spans.geometry(data)[0]

  def target_length(self, data) -> int:
    return spans.geometry(data)[1]

  def corrupter(self, data, tokenizer, *, seed: int, process_index: int = 0):
    return spans.SpanCorrupter.of(data, tokenizer, seed=seed, process_index=process_index)

  def eval_stream(self, tokens, rows: int, length: int, data, tokenizer) -> list[dict]:
    """The dev stream cut into raw rows, corrupted as one batch with spans.EVAL_SEED (each row's
    spans fixed by its place in the stream, whatever the rows of a batch), then `rows` rows a
    batch, the last padded with empty rows: inputs [rows, data.max_length], targets [rows, T5's
    targets length]."""
    if length != data.max_length:
      raise ValueError(f"rows of {length} tokens: task 'span' reads inputs of data.max_length="
                       f"{data.max_length} (no other context length)")
    raw = self.stream_length(data)
    count = math.ceil(len(tokens) / raw)
    corrupted = self.corrupter(data, tokenizer, seed=spans.EVAL_SEED)(
        stream.stream_batch(tokens, count, raw), 0)
    batches = []
    for first in range(0, count, rows):
      batch = {}
      for key, value in corrupted.items():
        part = value[first:first + rows]
        batch[key] = np.concatenate([part, np.zeros((rows - len(part), value.shape[1]), np.int32)])
      batches.append(batch)
    return batches

  def check(self, config) -> None:
    super().check(config)
    self._check_room(config.data)

  def check_data(self, data) -> None:
    super().check_data(data)
    self._check_room(data)

  def _check_room(self, data) -> None:
    """One line naming the keys where data.max_length holds no corrupted row, or data.vocab_size
    cannot hold the sentinels above MIN_PIECES pieces."""
    if data.max_length < 3:
      raise ValueError(f"config keys task='span' and data.max_length={data.max_length}: the "
                       "inputs hold a kept token, a sentinel and EOS at least; expected >= 3")
    raw, targets, sentinels = spans.geometry(data)
    if data.vocab_size - sentinels < MIN_PIECES:
      raise ValueError(f"config keys task='span' and data.vocab_size={data.vocab_size}: its top "
                       f"{sentinels} ids are the sentinels a row of {raw} tokens needs (inputs "
                       f"{data.max_length}, targets {targets}), which leaves "
                       f"{data.vocab_size - sentinels} pieces; expected data.vocab_size >= "
                       f"{sentinels + MIN_PIECES}")

  def unscorable(self, data) -> str:
    return "no text"

  def not_generating(self) -> str:
    return "a span-corruption model fills in dropped spans; it does not continue text"

  def not_translating(self) -> str:
    return ("a span-corruption model fills in dropped spans; it does not translate: start a "
            "translation run from it (train.init_from)")


TASK = SpanCorruption()
