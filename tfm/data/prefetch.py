"""Background prefetch of host batches onto devices (depth 2 by default).

`prefetch_to_device(it, sharding)` runs `next(it)` and the host->device copy in a daemon thread
while the training step runs, keeping up to `size` device batches ready. Each numpy array
[rows_per_host, L] becomes a global jax.Array [rows_per_host * process_count, L] laid out by
`sharding`: with one process via `jax.device_put`, with several via
`jax.make_array_from_process_local_data` (each host contributes its own rows).

The wrapper is resumable: `get_state()` returns the wrapped iterator's state right after the
last batch *handed to the caller* (not after the batches still queued), so a checkpoint taken
between steps restores exactly. Restore by calling `set_state` on a fresh data iterator before
wrapping it. `stats()` is likewise the wrapped iterator's figures right after that batch: the
`data/` figures logged at a step are those of the batches trained on, the same in every run and
its resume, whatever the thread had read ahead.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import jax
import numpy as np

_DONE = object()


def to_device(batch: dict[str, np.ndarray], sharding: jax.sharding.Sharding) -> dict[str, jax.Array]:
  """Host batch {key: [rows_per_host, L]} -> {key: jax.Array [global rows, L]} on `sharding`."""
  if jax.process_count() == 1:
    return jax.device_put(batch, sharding)
  return {key: jax.make_array_from_process_local_data(sharding, value)
          for key, value in batch.items()}


class DevicePrefetcher:
  """Iterator of device batches filled by a background thread (see module docstring)."""

  def __init__(self, iterator, sharding: jax.sharding.Sharding, size: int = 2):
    if size < 1:
      raise ValueError(f"prefetch size must be >= 1, got {size}")
    self._iterator = iterator
    self._sharding = sharding
    self._queue: queue.Queue = queue.Queue(maxsize=size)
    self._stop = threading.Event()
    has_state = hasattr(iterator, "get_state")
    self._state = iterator.get_state() if has_state else None
    self._has_state = has_state
    self._has_stats = hasattr(iterator, "stats")
    self._stats = None
    # Set by the thread once it has taken the stats before its first batch: an input process
    # starts on that call (tfm/data/batch_process.py), which runs here beside the step's compile.
    self._started = threading.Event()
    self._finished = False
    self._thread = threading.Thread(target=self._fill, name="tfm-device-prefetch", daemon=True)
    self._thread.start()

  def _put(self, item) -> bool:
    while not self._stop.is_set():
      try:
        self._queue.put(item, timeout=0.1)
        return True
      except queue.Full:
        continue
    return False

  def _fill(self) -> None:
    try:
      try:
        self._stats = self._iterator.stats() if self._has_stats else None  # as wrapped
      finally:
        self._started.set()
      for batch in self._iterator:
        state = self._iterator.get_state() if self._has_state else None
        stats = self._iterator.stats() if self._has_stats else None
        if not self._put((to_device(batch, self._sharding), state, stats)):
          return
      self._put((_DONE, None, None))
    except BaseException as e:  # pylint: disable=broad-except  (re-raised in the consumer)
      self._put((e, None, None))

  def __iter__(self):
    return self

  def __next__(self) -> dict[str, Any]:
    if self._finished:
      raise StopIteration
    item, state, stats = self._queue.get()
    if item is _DONE:
      self._finished = True
      raise StopIteration
    if isinstance(item, BaseException):
      self._finished = True
      raise item
    self._state, self._stats = state, stats
    return item

  def get_state(self):
    """State of the wrapped iterator just after the last batch returned by `next`."""
    if not self._has_state:
      raise TypeError("the wrapped iterator has no get_state()")
    return self._state

  def stats(self) -> Any:
    """The wrapped iterator's stats just after the last batch returned by `next` (before the
    first: as it was wrapped), though the thread runs up to `size` + 1 batches ahead."""
    if not self._has_stats:
      raise TypeError("the wrapped iterator has no stats()")
    self._started.wait()
    return self._stats

  def close(self) -> None:
    """Stops the background thread (the wrapped iterator is left as is)."""
    self._stop.set()
    self._thread.join(timeout=5)


def prefetch_to_device(iterator, sharding: jax.sharding.Sharding, size: int = 2) -> DevicePrefetcher:
  """Wraps a host batch iterator: yields device batches, `size` kept ready in the background."""
  return DevicePrefetcher(iterator, sharding, size)
