"""Length-bucketed unpacked batches (the paper's batching), checkpointable.

The paper batches "sentence pairs together by approximate sequence length", ~25000 source and
25000 target tokens per batch. Here, each example goes to the smallest bucket boundary >=
max(len(inputs), len(targets)) (boundaries from `batching.bucket_boundaries`), and a batch of
row length b has `rows_for[b]` rows ~ tokens_per_batch // b, so every batch holds about the same
number of token slots and there are only len(boundaries) distinct shapes to compile.

Examples are read in windows of about `window_tokens` token slots; inside a window, each bucket
(shortest first) is cut into full batches and its leftover examples move up to the next bucket
(they fit there too); only the last bucket's leftovers make a partial batch, padded with empty
rows (segmentation 0). The window's batches are emitted in a seeded random order. The state is
(cursor state at the window start, window number, batches already emitted from the window):
restoring re-reads the window and skips what was emitted, so resumption is exact and the state
stays small. It also records the layout (boundaries, rows per bucket, window size): the rows follow
the step's batch split (mesh.*, train.microbatches), and a window re-cut into other batches would
make `emitted` count other examples, so a mid-window state refuses another layout (LayoutChanged);
a state at a window's end is the next window's start, which any layout continues.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from tfm.data.batching import pad_examples


class LayoutChanged(ValueError):
  """A mid-window data state saved with other bucket rows than this iterator makes."""


class BucketBatcher:
  """Iterator of padded batches {key: int32 [rows_for[b], b]} for bucket boundaries b.

  Args:
    cursor: an ExampleCursor over encoded examples with max length <= boundaries[-1].
    boundaries: increasing row lengths.
    rows_for: {boundary: rows per batch of that boundary}.
    window_tokens: token slots (sum of assigned boundaries) read per window.
    seed: seeds the order of batches within each window.
  """

  def __init__(self, cursor, *, boundaries, rows_for, window_tokens: int, seed: int):
    self.cursor = cursor
    self._boundaries = list(boundaries)
    self._rows_for = dict(rows_for)
    self._window_tokens = int(window_tokens)
    self._seed = int(seed)
    self._window = 0
    self._emitted = 0
    self._window_start = cursor.get_state()
    self._batches = None  # batches of the current window, in emission order

  def _read_window(self) -> list[dict[str, np.ndarray]]:
    buckets = {b: [] for b in self._boundaries}
    budget = 0
    while budget < self._window_tokens and self.cursor.peek() is not None:
      example = self.cursor.take()
      longest = max(len(example["inputs"]), len(example["targets"]))
      index = bisect.bisect_left(self._boundaries, longest)
      if index == len(self._boundaries):
        raise ValueError(f"example of length {longest} exceeds the largest bucket "
                         f"{self._boundaries[-1]}; data.overlong should have handled it")
      buckets[self._boundaries[index]].append(example)
      budget += self._boundaries[index]
    batches, carry = [], []
    for boundary in self._boundaries:
      pending = carry + buckets[boundary]
      rows = self._rows_for[boundary]
      full = len(pending) - len(pending) % rows
      for start in range(0, full, rows):
        batches.append(pad_examples(pending[start:start + rows], rows, boundary))
      carry = pending[full:]  # too few for a full batch: they also fit the next bucket
    if carry:
      last = self._boundaries[-1]
      batches.append(pad_examples(carry, self._rows_for[last], last))
    order = np.random.default_rng([self._seed, self._window]).permutation(len(batches))
    return [batches[i] for i in order]

  def __iter__(self):
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    while self._batches is None or self._emitted >= len(self._batches):
      if self._batches is not None:  # the previous window is done: start the next one
        self._window += 1
        self._emitted = 0
        self._window_start = self.cursor.get_state()
      self._batches = self._read_window()
      if not self._batches:
        raise StopIteration
    batch = self._batches[self._emitted]
    self._emitted += 1
    return batch

  def _layout(self) -> dict[str, Any]:
    return {"boundaries": [int(b) for b in self._boundaries],
            "rows": [int(self._rows_for[b]) for b in self._boundaries],
            "window_tokens": self._window_tokens}

  def get_state(self) -> dict[str, Any]:
    cursor, window, emitted = self._window_start, self._window, self._emitted
    if self._batches is not None and emitted >= len(self._batches):  # a window's end is the next
      cursor, window, emitted = self.cursor.get_state(), window + 1, 0  # one's start (see __next__)
    return {"cursor": cursor, "window": window, "emitted": emitted, "layout": self._layout()}

  def set_state(self, state: dict[str, Any]) -> None:
    saved = state.get("layout")  # absent in states written before tfm recorded it
    if saved is not None and int(state["emitted"]) > 0 and saved != self._layout():
      raise LayoutChanged(
          f"the data position (data.packing=False) was saved {state['emitted']} batches into a "
          f"window cut into batches of {saved['rows']} rows for buckets {saved['boundaries']}, and "
          f"this run cuts {self._layout()['rows']} rows (the rows follow mesh.* and "
          "train.microbatches): resume with the mesh and train.microbatches it was saved with, or "
          "use data.packing=True, whose position survives a new batch split")
    self.cursor.set_state(state["cursor"])
    self._window_start = state["cursor"]
    self._window = int(state["window"])
    self._emitted = int(state["emitted"])
    self._batches = self._read_window()
