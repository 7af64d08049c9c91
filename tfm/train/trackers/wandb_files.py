"""What a W&B run's offline files on disk hold: each figure's last step (the wandb tracker's floor).

W&B writes a run's records through its own service process, which flushes them to the run's
transaction log (offline-run-*/run-<id>.wandb) every few seconds and keeps the last step's row
open until a later step arrives; a SIGKILL loses what was not flushed. So a resumed run takes
the steps it must not log again from these files, not from what the killed process sent.

The file: 7 bytes (':W&B', then W&B's own 3), then a LevelDB log: 32 KiB blocks (counted from the
file's start) of chunks, each a 7-byte header (CRC32C: 4 bytes, length: 2, type: 1 full, 2 first,
3 middle, 4 last; 0: the block's padding) and its bytes; a record (one
`wandb_internal_pb2.Record`) is a full chunk or first, middles and last. A file cut short (a
killed writer) ends at its last whole record.
"""

from __future__ import annotations

import glob
import os
import struct

HEADER = 7  # ':W&B' and W&B's 3 bytes
BLOCK = 32768
CHUNK = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: str):
  """The record payloads (bytes) of one transaction log, in order, up to its last whole one."""
  with open(path, "rb") as f:
    data = f.read()
  if data[:4] != b":W&B":
    return
  pos, parts = HEADER, None
  while pos + CHUNK <= len(data):
    left = BLOCK - pos % BLOCK
    if left < CHUNK:  # a block's tail too short for a chunk header
      pos += left
      continue
    _, length, kind = struct.unpack_from("<IHB", data, pos)
    if kind == 0:
      pos += left
      continue
    end = pos + CHUNK + length
    if end > len(data) or kind not in (FULL, FIRST, MIDDLE, LAST):
      return  # cut short by a kill, or not a chunk: what came before stands
    payload, pos = data[pos + CHUNK:end], end
    if kind == FULL:
      yield payload
    elif kind == FIRST:
      parts = [payload]
    elif parts is not None:
      parts.append(payload)
      if kind == LAST:
        yield b"".join(parts)
        parts = None


def last_steps(directory: str, run_id: str) -> dict[str, int]:
  """{figure: the last step its history rows hold} over every offline part of run `run_id` in
  `directory` (offline-run-*/run-<run_id>.wandb); W&B's own keys ('_step', '_runtime') aside."""
  from wandb.proto import wandb_internal_pb2  # pylint: disable=import-outside-toplevel
  steps: dict[str, int] = {}
  for path in sorted(glob.glob(os.path.join(directory, "offline-run-*", f"run-{run_id}.wandb"))):
    for payload in records(path):
      try:
        record = wandb_internal_pb2.Record.FromString(payload)
      except Exception:  # pylint: disable=broad-except
        break  # a damaged record: the rest of this file is not trusted
      if record.WhichOneof("record_type") != "history":
        continue
      step = int(record.history.step.num)
      for item in record.history.item:
        key = "/".join(item.nested_key) or item.key
        if not key.startswith("_"):
          steps[key] = max(step, steps.get(key, step))
  return steps
