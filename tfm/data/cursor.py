"""A checkpointable read position in a stream of encoded-example chunks.

The grain part of the pipeline yields chunks of encoded examples (examples.EncodeChunk).
Batchers consume them one example at a time through an `ExampleCursor`: `peek()` shows the next good example without
consuming it (so a packer can stop at the first example that does not fit and leave it for the
next batch), `take()` consumes it. Bad examples (status != OK) are skipped and counted on the
way (tfm.data.examples.Counters).

The state is (grain state before the current chunk, offset in that chunk, counters): restoring
re-reads that one chunk and continues at the offset, so the examples after a checkpoint are
exactly those that would have followed, and the counters continue from where they were.
"""

from __future__ import annotations

import copy
from typing import Any

from tfm.data import examples as examples_lib


class ExampleCursor:
  """Example-at-a-time reader over a grain iterator of chunks of encoded examples."""

  def __init__(self, chunks):
    self._chunks = chunks
    self._chunk_state = copy.deepcopy(chunks.get_state())
    self._chunk = None
    self._offset = 0
    self._exhausted = False
    self.counters = examples_lib.Counters()

  def peek(self) -> dict[str, Any] | None:
    """The next OK example (not consumed), or None when the stream is exhausted."""
    while True:
      if self._chunk is None or self._offset >= len(self._chunk):
        if self._exhausted:
          return None
        state = copy.deepcopy(self._chunks.get_state())
        try:
          chunk = next(self._chunks)
        except StopIteration:
          self._exhausted = True
          return None
        self._chunk_state, self._offset = state, 0
        self._chunk = examples_lib.chunk_examples(chunk)
        continue
      example = self._chunk[self._offset]
      if int(example["status"]) == examples_lib.OK:
        return example
      self.counters.count(example)  # dropped: counted once, as the cursor moves past it
      self._offset += 1

  def take(self) -> dict[str, Any]:
    """Consumes and returns the next OK example (which must exist: check `peek()` first)."""
    example = self.peek()
    if example is None:
      raise StopIteration
    self.counters.count(example)
    self._offset += 1
    return example

  def get_state(self) -> dict[str, Any]:
    return {"chunks": self._chunk_state, "offset": self._offset,
            "counters": dict(self.counters.values)}

  def set_state(self, state: dict[str, Any]) -> None:
    self._chunks.set_state(state["chunks"])
    self._chunk_state = copy.deepcopy(state["chunks"])
    self._chunk, self._offset, self._exhausted = None, 0, False
    self.counters = examples_lib.Counters(state["counters"])
    if state["offset"]:
      self._chunk = examples_lib.chunk_examples(next(self._chunks))
      self._offset = int(state["offset"])
