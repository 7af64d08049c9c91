"""Training batches made in a process of their own, off the training process's threads.

`BatchProcess(cfg, source, tokenizer, process_index=, process_count=, row_multiple=)` is an iterator with
pipeline.TrainIterator's interface (next, get_state, set_state, stats, close). A spawned process
builds pipeline.train_iterator with the same arguments, puts it at the state set before the first
`next()`, and sends its stats there first, then every batch with the iterator's state and stats
right after it, through a queue that holds up to `ahead` batches. Everything a batch costs in
Python (the chunk stream's receive, the cursor, the first-fit packer's thousands of numpy calls)
runs there; the training process only unpickles the arrays, a copy each.

Why: in the training process that work competes for the GIL with the thread that dispatches the
steps, and an accelerator's step is short enough for the dispatch to wait on it. On a CPU the
batches are made on the same cores as the step either way, and the loop keeps them in-process.

The batches, their order and the states are TrainIterator's: the process runs the same code on
chunks that are a pure function of their index, so a checkpoint written with either restores with
the other. `set_state` after batches were taken stops the process; the next `next()` starts one
at the new state.
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_lib
import signal
import traceback
from typing import Any

_POLL_S = 0.1


def _produce(arguments: dict, state: dict | None, batches, stop, parent: int) -> None:
  """The process's body: train_iterator(**arguments) at `state`, its stats there put on `batches`
  as ('stats', None, stats), then each batch as (batch, state after it, stats after it), until
  `stop` is set or the training process is gone; an exception is sent as ('error', its
  traceback)."""
  # A SIGTERM or SIGINT to the whole process group (SLURM's proctrack/pgid, a VM's shutdown,
  # Ctrl-C) is the training process's to handle: it trains on to the step the hosts agree to save
  # at, and needs batches until then. This process ends when its parent is gone or stops it.
  signal.signal(signal.SIGTERM, signal.SIG_IGN)
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  # No accelerator here (the training process holds it); set before anything imports jax.
  os.environ["JAX_PLATFORMS"] = "cpu"
  os.environ["CUDA_VISIBLE_DEVICES"] = ""
  from tfm.data import pipeline  # pylint: disable=import-outside-toplevel

  def put(item) -> bool:
    while not stop.is_set() and os.getppid() == parent:
      try:
        batches.put(item, timeout=_POLL_S)
        return True
      except queue_lib.Full:
        continue
    return False

  iterator = None
  try:
    iterator = pipeline.train_iterator(**arguments)
    if state is not None:
      iterator.set_state(state)
    if not put(("stats", None, iterator.stats())):  # a resume's owed evaluation logs these
      return
    for batch in iterator:
      if not put((batch, iterator.get_state(), iterator.stats())):
        break
    else:
      put(("done", None, None))
  except BaseException:  # pylint: disable=broad-except  (raised again in the training process)
    put(("error", traceback.format_exc(), None))
  finally:
    if iterator is not None:
      iterator.close()
    if stop.is_set() or os.getppid() != parent:
      batches.cancel_join_thread()  # exit without flushing batches nobody will read
    # else the exit waits until the last item (done, or the error) is in the pipe


class BatchProcessError(RuntimeError):
  """The batch process failed; the message holds its traceback."""


class BatchProcess:
  """pipeline.train_iterator's batches, made in a spawned process (see the module docstring).

  cfg, source, tokenizer and the keywords are train_iterator's (they must pickle: the config and
  source are frozen dataclasses, and the tokenizer pickles).
  ahead: batches the process keeps ready.
  """

  def __init__(self, cfg, source, tokenizer, *, ahead: int = 4, **keywords: Any):
    if ahead < 1:
      raise ValueError(f"ahead must be >= 1, got {ahead}")
    self._arguments = dict(cfg=cfg, source=source, tokenizer=tokenizer, **keywords)
    self._ahead = ahead
    self._state: dict | None = None  # after the last batch returned (None: the start)
    self._stats: dict | None = None  # after the last batch returned (None: not received yet)
    self._pending = None  # an item stats() received ahead of next() (the process failed first)
    self._process = None
    self._finished = False

  def _start(self) -> None:
    context = multiprocessing.get_context("spawn")  # a fork of a process running JAX is unsafe
    self._queue = context.Queue(maxsize=self._ahead)
    self._stop = context.Event()
    # Not a daemon: with data.num_workers > 0 it starts grain's worker processes of its own.
    self._process = context.Process(
        target=_produce, args=(self._arguments, self._state, self._queue, self._stop,
                               os.getpid()), name="tfm-batches", daemon=False)
    self._process.start()

  def __iter__(self):
    return self

  def __next__(self) -> dict[str, Any]:
    if self._finished:
      raise StopIteration
    batch, state, stats = self._receive()
    while isinstance(batch, str) and batch == "stats":  # the process's first: at the state set
      self._stats = stats
      batch, state, stats = self._receive()
    if isinstance(batch, str):
      self._finished = True
      self.close()
      if batch == "error":
        raise BatchProcessError(f"the batch process failed:\n{state}")
      raise StopIteration
    self._state, self._stats = state, stats
    return batch

  def _receive(self) -> tuple:
    """The process's next item (batch or 'stats', 'done', 'error'; state; stats), started first
    where none runs."""
    if self._pending is not None:
      item, self._pending = self._pending, None
      return item
    if self._process is None:
      self._start()
    while True:
      try:
        return self._queue.get(timeout=1.0)
      except queue_lib.Empty:
        if not self._process.is_alive():
          try:  # its last item may have arrived since
            return self._queue.get(timeout=_POLL_S)
          except queue_lib.Empty:
            self._finished = True
            raise BatchProcessError(f"the batch process exited (code {self._process.exitcode})"
                                    " without a batch or an error") from None

  def get_state(self) -> dict | None:
    """The train iterator's state right after the last batch returned; before the first, the state
    set, or None for a fresh iterator's (which only a process building one could say)."""
    return self._state

  def set_state(self, state: dict) -> None:
    """The next batch is the one after `state` (a TrainIterator state); a running process stops."""
    self.close()
    self._state, self._stats, self._finished = state, None, False

  def stats(self) -> dict[str, Any]:
    """TrainIterator.stats() as the process saw it right after the last batch returned; before the
    first, at the state set (a resume at an evaluation step logs them before its first step), for
    which the process is started and its first item awaited."""
    if self._stats is None and not self._finished:
      item = self._receive()
      if isinstance(item[0], str) and item[0] == "stats":
        self._stats = item[2]
      else:  # the process failed before its first batch: next() raises it
        self._pending = item
    return dict(self._stats or {})

  def close(self) -> None:
    """Stops the process (and, through it, grain's threads and worker processes)."""
    if self._process is None:
      return
    self._stop.set()
    while True:  # drain, so that a put blocked on a full queue returns and the process exits
      try:
        self._queue.get_nowait()
      except (queue_lib.Empty, OSError, ValueError):
        break
    self._process.join(timeout=10)
    if self._process.is_alive():
      self._process.kill()  # it ignores SIGTERM
      self._process.join(timeout=5)
    self._queue.close()
    self._process, self._pending = None, None
