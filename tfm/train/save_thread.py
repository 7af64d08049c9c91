"""Checkpoint saves started on a thread of their own, so that the steps after a save do not wait.

Checkpointer.save returns only once the state's checksums are on the host and Orbax holds its own
host copy of the arrays: the thread that calls it waits for the step that made the state, so the
steps dispatched ahead drain and the device idles until the host has dispatched the next ones.
SaveThread.save instead copies the state on the device (dispatched in order, ahead of the next
step, which may then donate the original: the runtime keeps the buffer until the copy has read it)
and hands the copy to one background thread that calls Checkpointer.save, in the order the saves
came. The checkpoint holds the same arrays to the bit; the device holds a second copy of the state
until its save has taken its host copy.

wait() waits for the saves handed over, then Checkpointer.wait(); an exception raised by a save
is raised again by the next save() or wait(). Every host hands over the same saves in the same
order, so Orbax's collectives between the hosts meet as they would on the calling thread.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import jax


class SaveThread:
  """A Checkpointer whose save() returns at once (see the module docstring); restore, all_steps
  and the rest are the wrapped Checkpointer's."""

  def __init__(self, checkpointer):
    self.checkpointer = checkpointer
    self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tfm-save")
    self._pending: list[concurrent.futures.Future] = []

  def save(self, step: int, state: Any, data_state: Any = None) -> None:
    """Starts saving checkpoint `step` of `state` (a TrainState of device arrays, which the caller
    may donate right after) with this host's `data_state`."""
    self._raise_failed()
    copy = jax.tree.map(lambda x: x.copy() if isinstance(x, jax.Array) else x, state)
    self._pending.append(self._executor.submit(self.checkpointer.save, step, copy, data_state))

  def _raise_failed(self, wait: bool = False) -> None:
    pending, self._pending = self._pending, []
    for i, future in enumerate(pending):
      if not wait and not future.done():
        self._pending = pending[i:]
        return
      future.result()  # raises the save's exception

  def wait(self) -> None:
    """Blocks until every save handed over is on disk."""
    self._raise_failed(wait=True)
    self.checkpointer.wait()

  def close(self) -> None:
    """Waits for the saves handed over (their errors are not raised here) and stops the thread."""
    self._executor.shutdown(wait=True)

  def __getattr__(self, name: str):
    return getattr(self.checkpointer, name)
