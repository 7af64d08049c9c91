"""Token streams cut into rows: the train and eval batches of tasks lm, mlm and span.

GPT and BERT train on a stream, not on packed segments: this host's examples in their shuffled
order, each ending with EOS, concatenated and cut into rows of exactly L = data.max_length tokens;
an example that does not end in a row runs on into the next row (and the next batch). Every slot
holds a token (only a finite stream's last batch has padding), attention runs over the whole row
(one segment), and a model sees the text at every offset and with left context from the example
before: what perplexity at other context lengths (extrapolation) needs.

A stream batch ([rows, L] int32, keys batching.BATCH_KEYS):
  targets               the tokens, row after row (0 on padding)
  targets_segmentation  1 on tokens, 0 on padding
  targets_position      0..L-1 in every row (0 on padding)
  inputs*               zero (task lm); task mlm masks the batch (tfm/data/masking.py), which
                        fills them; task span corrupts its rows (tfm/data/spans.py), whose
                        inputs and targets are then rows of other lengths
The state of a StreamBatcher is the cursor's position at the current example, the offset of the
next token in it, and the batch counter (the mlm masks' seed): a resumed run continues in the
middle of an example exactly where the run it continues would have.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tfm.data.batching import BATCH_KEYS


def stream_batch(tokens: np.ndarray, rows: int, length: int) -> dict[str, np.ndarray]:
  """int32 [n <= rows * length] tokens -> one stream batch {key: int32 [rows, length]}: the
  tokens in row-major order, padding (0, segmentation 0, position 0) after them."""
  n = len(tokens)
  if n > rows * length:
    raise ValueError(f"{n} tokens do not fit in {rows} rows of {length}")
  batch = {key: np.zeros((rows, length), np.int32) for key in BATCH_KEYS}
  flat = batch["targets"].reshape(-1)
  flat[:n] = tokens
  batch["targets_segmentation"].reshape(-1)[:n] = 1
  batch["targets_position"].reshape(-1)[:n] = np.arange(n) % length
  return batch


def cut_into_batches(tokens: np.ndarray, rows: int, length: int) -> list[dict[str, np.ndarray]]:
  """A whole stream (int32 [n]) -> its batches of rows x length tokens, the last padded."""
  per_batch = rows * length
  return [stream_batch(tokens[i:i + per_batch], rows, length)
          for i in range(0, len(tokens), per_batch)]


class StreamBatcher:
  """Iterator of stream batches read from an ExampleCursor (or a mixture's cursor); `mask`
  (masking.Masker, task mlm) turns each into an mlm batch with the batch counter as its seed.

  next(self) -> {key: int32 [rows, length]}; raises StopIteration once a finite stream is spent.
  get_state() / set_state(state): {'cursor', 'offset', 'batches'} (see the module docstring).
  """

  def __init__(self, cursor, rows: int, length: int,
               mask: Callable[[dict, int], dict] | None = None):
    self.cursor = cursor
    self.rows, self.length = rows, length
    self.mask = mask
    self._offset = 0  # tokens of the cursor's next example already in earlier rows
    self._batches = 0

  def __iter__(self):
    return self

  def _tokens(self, count: int) -> np.ndarray:
    """The stream's next `count` tokens (fewer where it ends)."""
    parts, have = [], 0
    while have < count:
      example = self.cursor.peek()
      if example is None:
        break
      ids = example["targets"]
      take = min(len(ids) - self._offset, count - have)
      parts.append(ids[self._offset:self._offset + take])
      have += take
      self._offset += take
      if self._offset == len(ids):
        self.cursor.take()
        self._offset = 0
    return np.concatenate(parts).astype(np.int32) if parts else np.zeros((0,), np.int32)

  def __next__(self) -> dict[str, np.ndarray]:
    tokens = self._tokens(self.rows * self.length)
    if not len(tokens):
      raise StopIteration
    batch = stream_batch(tokens, self.rows, self.length)
    if self.mask is not None:
      batch = self.mask(batch, self._batches)
    self._batches += 1
    return batch

  def get_state(self) -> dict[str, Any]:
    return {"cursor": self.cursor.get_state(), "offset": self._offset, "batches": self._batches}

  def set_state(self, state: dict[str, Any]) -> None:
    if set(state) != {"cursor", "offset", "batches"}:
      raise ValueError("the data position is not a token stream's (a checkpoint of another task: "
                       f"keys {sorted(state)})")
    self.cursor.set_state(state["cursor"])
    self._offset, self._batches = int(state["offset"]), int(state["batches"])


def eval_stream_batches(tokens: np.ndarray, rows: int, length: int,
                        corrupt: Callable[[dict, int], dict] | None) -> list[dict[str, np.ndarray]]:
  """A whole evaluation stream (int32 [n]) -> its global batches of rows x length tokens, the last
  padded; `corrupt` (a corrupter, or None) is applied to the whole stream at once, as one row with
  counter 0, before it is cut: its draws do not depend on the rows of a batch. The inputs of a
  corrupted batch take the targets' segmentation and positions (BERT's masking keeps them)."""
  batches = cut_into_batches(tokens, rows, length)
  if corrupt is None:
    return batches
  corrupted = corrupt(stream_batch(tokens, 1, len(tokens)), 0)
  per_batch = rows * length
  for b, batch in enumerate(batches):
    for key in ("inputs", "targets"):
      part = corrupted[key].reshape(-1)[b * per_batch:(b + 1) * per_batch]
      batch[key] = stream_batch(part, rows, length)["targets"]
    batch["inputs_segmentation"] = batch["targets_segmentation"].copy()
    batch["inputs_position"] = batch["targets_position"].copy()
  return batches
