"""Packing encoded examples into fixed [rows, max_length] batches, and measuring how full they are.

Algorithm (first-fit, one group per batch): take examples in stream order and put each into the
first row where both its inputs and its targets still fit; when an example fits in no row, the
batch is complete and that example opens the next batch. An example is never split across rows.
Layout follows the flax WMT example: segment ids 1, 2, ... per row and 0 on padding, positions
restart at 0 in every segment, padding tokens are 0.

grain 0.2.18 has the same algorithm as `grain.experimental.FirstFitPackIterDataset` (with the
same checkpoint idea: parent state at the group start). Its per-example cost and grain's
per-element iterator overhead alone capped the pipeline far below what training reads (see
experiments/SPEED.md); building the whole batch at once from chunks costs a few us per example,
so packing here is our own and the state is the `ExampleCursor` position of the first
example of the next batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tfm.data.batching import BATCH_KEYS


def build_packed_batch(contents, rows: int, length: int) -> dict[str, np.ndarray]:
  """contents[r] = examples packed in row r (each {'inputs','targets'} int32 1-D, summed lengths
  <= length per side) -> dict of int32 [rows, length] arrays with BATCH_KEYS."""
  batch = {key: np.zeros((rows, length), np.int32) for key in BATCH_KEYS}
  for r, row in enumerate(contents):
    if not row:
      continue
    for side in ("inputs", "targets"):
      lengths = np.fromiter((len(e[side]) for e in row), np.int64, len(row))
      n = int(lengths.sum())
      starts = np.cumsum(lengths) - lengths
      batch[side][r, :n] = np.concatenate([e[side] for e in row])
      batch[f"{side}_segmentation"][r, :n] = np.repeat(np.arange(1, len(row) + 1), lengths)
      batch[f"{side}_position"][r, :n] = np.arange(n) - np.repeat(starts, lengths)
  return batch


class PackedBatcher:
  """Iterator of packed batches {key: int32 [rows, length]} read from an ExampleCursor.

  A finite stream ends with a partial batch whose unused rows are all zero.
  """

  def __init__(self, cursor, rows: int, length: int):
    self.cursor = cursor
    self.rows = rows
    self.length = length

  def __iter__(self):
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    example = self.cursor.peek()
    if example is None:
      raise StopIteration
    contents = [[] for _ in range(self.rows)]
    free_inputs = [self.length] * self.rows
    free_targets = [self.length] * self.rows
    while example is not None:
      a, b = len(example["inputs"]), len(example["targets"])
      if a > self.length or b > self.length:
        raise ValueError(f"example of lengths ({a}, {b}) exceeds the row length {self.length}; "
                         "data.overlong should have filtered or truncated it")
      for r in range(self.rows):
        if a <= free_inputs[r] and b <= free_targets[r]:
          break
      else:
        break  # fits nowhere: the batch is complete, the example starts the next one
      contents[r].append(self.cursor.take())
      free_inputs[r] -= a
      free_targets[r] -= b
      example = self.cursor.peek()
    return build_packed_batch(contents, self.rows, self.length)

  def get_state(self) -> dict[str, Any]:
    return self.cursor.get_state()

  def set_state(self, state: dict[str, Any]) -> None:
    self.cursor.set_state(state)


class Efficiency:
  """Running fraction of the token slots of emitted batches that hold what the step uses, per
  side: inputs, the real (non-pad) pieces; targets, the pieces the loss scores (targets != 0 in
  a segment: every real piece of a translation or lm batch, the masked ones alone of an mlm
  batch, whose other targets are 0). real_targets counts every real target-side piece."""

  def __init__(self, state: dict | None = None):
    state = state or {}
    self.real_inputs = int(state.get("real_inputs", 0))
    self.real_targets = int(state.get("real_targets", 0))
    # (a state written before this count: every real target scored, as in translation and lm)
    self.scored_targets = int(state.get("scored_targets", self.real_targets))
    self.slots_inputs = int(state.get("slots_inputs", 0))
    self.slots_targets = int(state.get("slots_targets", 0))
    self.batches = int(state.get("batches", 0))

  def update(self, batch: dict[str, np.ndarray]) -> None:
    self.real_inputs += int(np.count_nonzero(batch["inputs_segmentation"]))
    self.real_targets += int(np.count_nonzero(batch["targets_segmentation"]))
    self.scored_targets += int(np.count_nonzero((batch["targets"] != 0)
                                                & (batch["targets_segmentation"] != 0)))
    self.slots_inputs += batch["inputs_segmentation"].size
    self.slots_targets += batch["targets_segmentation"].size
    self.batches += 1

  def state(self) -> dict[str, int]:
    return {"real_inputs": self.real_inputs, "real_targets": self.real_targets,
            "scored_targets": self.scored_targets, "slots_inputs": self.slots_inputs,
            "slots_targets": self.slots_targets, "batches": self.batches}

  def summary(self) -> dict[str, float]:
    """inputs efficiency = real input pieces / slots, targets efficiency = scored targets / slots
    (0.0 before any batch)."""
    return {
        "inputs_efficiency": self.real_inputs / self.slots_inputs if self.slots_inputs else 0.0,
        "targets_efficiency": (self.scored_targets / self.slots_targets if self.slots_targets
                               else 0.0),
        "batches": self.batches, "real_input_tokens": self.real_inputs,
        "real_target_tokens": self.real_targets,
    }
