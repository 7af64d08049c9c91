"""A stream of chunks read in order from a grain MapDataset, in-process or by worker processes.

`ChunkStream(chunks, num_workers)` yields chunks[0], chunks[1], ... (each chunk is whatever the
MapDataset's last map returns, here a dict of flat int32 arrays, examples.EncodeChunk's layout).
The work of producing a chunk (reading records, SentencePiece, or gathering token ids from the
token cache) runs in grain's read-ahead threads when num_workers == 0 (data.num_workers), or in
`num_workers` processes (grain `mp_prefetch`: worker w produces chunks w, w + n, w + 2n, ... and
the main process takes them round-robin, numpy arrays through shared memory). Workers ignore a
SIGTERM or SIGINT to the process group, as the batch process does (_worker_init).

The state is the index of the next chunk, {'next_index': k}, whatever the worker count (the same
dict grain's in-process iterator uses, so checkpoints written before this module still restore).
A chunk is a pure function of its index, so the stream is the same for any data.num_workers and a
checkpoint taken with one worker count restores exactly with another: `set_state` drops the
running iterator and the next `next()` starts a fresh one at chunks[k:] (workers are started
lazily, on the first `next()`, so restoring a new stream costs one start).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from absl import flags
import grain
import numpy as np

READ_THREADS = 2  # grain read-ahead threads per process
READ_BUFFER = 4  # chunks read ahead per process
WORKER_BUFFER = 16  # finished chunks each worker process keeps ready (grain's default: 1)


def _plain(value):
  """A worker's array copied into a plain ndarray (which also frees its shared memory at once).

  grain hands over SharedMemoryArray, an ndarray subclass whose every view runs a Python
  __array_finalize__; the packer slices per example, and that cost the main process CPU time per
  token (see experiments/SPEED.md)."""
  return np.array(value) if isinstance(value, np.ndarray) else value


def _worker_init(worker_index: int, num_workers: int) -> None:
  """Run by grain in each worker process before it reads: a SIGTERM or SIGINT to the whole process
  group (SLURM's proctrack/pgid, a VM's shutdown, Ctrl-C) is the training process's to handle: it
  trains on to the step its hosts agree to save at, and needs chunks until then
  (tfm/data/batch_process.py does the same). The worker ends when the training process closes the
  stream, or, orphaned by a kill, when a watchdog sees its parent gone."""
  del worker_index, num_workers
  signal.signal(signal.SIGTERM, signal.SIG_IGN)
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  parent = os.getppid()

  def watch():
    while os.getppid() == parent:
      time.sleep(1.0)
    os._exit(0)  # pylint: disable=protected-access

  threading.Thread(target=watch, name="tfm-orphan-watch", daemon=True).start()


class ChunkStream:
  """Iterator over a grain MapDataset of chunks from a checkpointable index (module docstring)."""

  def __init__(self, chunks: grain.MapDataset, num_workers: int = 0):
    if num_workers < 0:
      raise ValueError(f"data.num_workers must be an integer >= 0, got {num_workers!r}")
    self._chunks = chunks
    self._num_workers = num_workers
    self._next_index = 0
    self._iterator = None

  def _start(self):
    ds = self._chunks[self._next_index:].to_iter_dataset(
        grain.ReadOptions(num_threads=READ_THREADS, prefetch_buffer_size=READ_BUFFER))
    if self._num_workers > 0:
      if not flags.FLAGS.is_parsed():  # grain's worker processes read absl flags
        flags.FLAGS.mark_as_parsed()
      ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=self._num_workers,
                                                      per_worker_buffer_size=WORKER_BUFFER),
                          worker_init_fn=_worker_init)
    return iter(ds)

  def __iter__(self):
    return self

  def __next__(self) -> Any:
    if self._iterator is None:
      self._iterator = self._start()
    chunk = next(self._iterator)
    self._next_index += 1
    if self._num_workers > 0 and isinstance(chunk, dict):
      chunk = {key: _plain(value) for key, value in chunk.items()}
    return chunk

  def get_state(self) -> dict[str, int]:
    return {"next_index": self._next_index}

  def set_state(self, state: dict[str, Any]) -> None:
    if "next_index" not in state:
      raise ValueError(f"data iterator state {sorted(state)} is not a chunk position "
                       "{'next_index': k}; it was written by another input pipeline")
    self.close()
    self._next_index = int(state["next_index"])

  def close(self) -> None:
    """Stops the read-ahead threads / worker processes (a later `next()` starts new ones)."""
    if self._iterator is not None:
      close = getattr(self._iterator, "close", None)
      if close is not None:
        close()
      self._iterator = None
