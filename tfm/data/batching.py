"""Batch geometry (rows per host, bucket boundaries) and padding of unpacked examples.

Batch size is given in tokens per step (data.tokens_per_batch, global, per side). A batch of
row length L has tokens_per_batch // L rows globally, rounded up to a multiple of the hosts and of
the step's batch shards x microbatches, split evenly over the hosts.

Unpacked batches use the packed-batch keys: segmentation is 1 on real tokens and 0 on padding,
positions count 0, 1, ... over the real tokens and are 0 on padding; padding tokens are 0. (A
packed row holding a single example is therefore identical to an unpacked row.)
"""

from __future__ import annotations

import math

import numpy as np

BATCH_KEYS = ("inputs", "targets", "inputs_segmentation", "targets_segmentation",
              "inputs_position", "targets_position")


def round_up_rows(rows: int, multiple: int) -> int:
  """The smallest positive multiple of `multiple` that is >= rows."""
  return max(1, -(-rows // multiple)) * multiple


def global_rows(cfg, process_count: int = 1, row_multiple: int = 1) -> int:
  """Global rows of a packed / max-length batch: tokens_per_batch // max_length, rounded UP to a
  multiple of lcm(hosts, row_multiple) so the batch splits over the hosts and over the step
  (row_multiple: its batch shards x train.microbatches). Rounding up, not down, lets the paper's
  96-row batch run on 64 or 256 batch shards (as 128 or 256 rows) instead of failing."""
  return round_up_rows(cfg.tokens_per_batch // cfg.max_length, math.lcm(process_count, row_multiple))


def host_rows(cfg, process_count: int, row_multiple: int = 1) -> int:
  """Rows per host for packed / max-length batches: global_rows split evenly over the hosts."""
  return global_rows(cfg, process_count, row_multiple) // process_count


def rows_note(cfg, process_count: int, row_multiple: int, split: str) -> str | None:
  """The one line that says the global row count was rounded up (None when it was not).

  split: what row_multiple stands for, e.g. "64 batch shards x 2 train.microbatches"."""
  asked, rows = cfg.tokens_per_batch // cfg.max_length, global_rows(cfg, process_count, row_multiple)
  if rows == asked:
    return None
  over = split if process_count == 1 else f"{split} on {process_count} hosts"
  return (f"data.tokens_per_batch={cfg.tokens_per_batch} gives {asked} rows of "
          f"data.max_length={cfg.max_length}; rounded up to {rows} rows ({rows * cfg.max_length} "
          f"tokens) to split over {over}")


def bucket_boundaries(max_length: int) -> list[int]:
  """Row lengths for length-bucketed batches: 8, 12, 16, 24, 32, 48, ... < max_length, then
  max_length. About two buckets per doubling, so padding wastes < 1/3 of a row and jit
  compiles only len(boundaries) shapes."""
  boundaries, length, step = [], 8, 0
  while length < max_length:
    boundaries.append(length)
    length = length * 3 // 2 if step % 2 == 0 else length * 4 // 3
    step += 1
  return boundaries + [max_length]


def bucket_rows(cfg, boundary: int, process_count: int, row_multiple: int = 1) -> int:
  """Rows per host in a bucket of row length `boundary`: global tokens_per_batch // boundary,
  rounded up to a multiple of the hosts and of `row_multiple` (the step's batch shards times
  train.microbatches, so every bucket splits evenly over the devices), then split over the hosts."""
  multiple = math.lcm(process_count, row_multiple)
  return round_up_rows(cfg.tokens_per_batch // boundary, multiple) // process_count


def pad_examples(examples, rows: int, length: int) -> dict[str, np.ndarray]:
  """Encoded examples (dicts with 1-D 'inputs'/'targets', each <= length) -> one unpacked batch
  of int32 [rows, length] arrays with BATCH_KEYS; rows beyond len(examples) are all zero."""
  if len(examples) > rows:
    raise ValueError(f"{len(examples)} examples do not fit in {rows} rows")
  batch = {key: np.zeros((rows, length), np.int32) for key in BATCH_KEYS}
  for row, example in enumerate(examples):
    for side in ("inputs", "targets"):
      ids = example[side]
      n = len(ids)
      if n > length:
        raise ValueError(f"{side} of length {n} exceeds the row length {length}")
      batch[side][row, :n] = ids
      batch[f"{side}_segmentation"][row, :n] = 1
      batch[f"{side}_position"][row, :n] = np.arange(n)
  return batch
