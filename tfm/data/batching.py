"""Batch geometry (rows per host, bucket boundaries) and padding of unpacked examples.

Batch size is given in tokens per step (data.tokens_per_batch, global, per side). A batch of
row length L has tokens_per_batch // L rows globally, split evenly over the hosts.

Unpacked batches use the packed-batch keys: segmentation is 1 on real tokens and 0 on padding,
positions count 0, 1, ... over the real tokens and are 0 on padding; padding tokens are 0. (A
packed row holding a single example is therefore identical to an unpacked row.)
"""

from __future__ import annotations

import math

import numpy as np

BATCH_KEYS = ("inputs", "targets", "inputs_segmentation", "targets_segmentation",
              "inputs_position", "targets_position")


def host_rows(cfg, process_count: int) -> int:
  """Rows per host for packed / max-length batches: (tokens_per_batch // max_length) / hosts."""
  rows = cfg.tokens_per_batch // cfg.max_length
  if rows < 1 or rows % process_count:
    raise ValueError(
        f"data.tokens_per_batch={cfg.tokens_per_batch} gives {rows} global rows of "
        f"data.max_length={cfg.max_length} tokens, which must be a positive multiple of the "
        f"{process_count} hosts (process_count); change data.tokens_per_batch (e.g. to "
        f"{max(1, rows // process_count) * process_count * cfg.max_length})")
  return rows // process_count


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
  rounded down to a multiple of the hosts and of `row_multiple` (the step's batch shards times
  train.microbatches, so every bucket splits evenly over the devices), then split over the hosts."""
  multiple = math.lcm(process_count, row_multiple)
  rows = (cfg.tokens_per_batch // boundary) // multiple * multiple
  if rows < 1:
    raise ValueError(f"data.tokens_per_batch={cfg.tokens_per_batch} is too small for row length "
                     f"{boundary}: fewer than {multiple} rows ({process_count} hosts, batches in "
                     f"multiples of {row_multiple} rows)")
  return rows // process_count


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
