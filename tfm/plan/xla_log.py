"""XLA's own warnings during a compile: what the C++ compiler writes to stderr, captured and replayed.

XLA logs problems it works around, such as "Involuntary full rematerialization" (the SPMD
partitioner could not reshard a tensor and replicates it instead, costing memory and time), to file
descriptor 2, out of Python's reach. `captured_stderr` redirects that descriptor to a file for the
duration of a block, then writes everything back to the real stderr and keeps the text.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile

# Substrings of the XLA log lines tfm plan reports (lower case).
NOTABLE = ("rematerialization",)


@contextlib.contextmanager
def captured_stderr():
  """with captured_stderr() as log: ...; then log.text holds what was written to fd 2 inside."""
  log = _Log()
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile(mode="w+b") as capture:
    os.dup2(capture.fileno(), 2)
    try:
      yield log
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      capture.seek(0)
      log.text = capture.read().decode("utf-8", "replace")
      sys.stderr.write(log.text)
      sys.stderr.flush()


class _Log:
  text: str = ""

  def notable(self) -> list[str]:
    """The captured lines that name a problem XLA worked around (NOTABLE), without duplicates."""
    lines = [line.strip() for line in self.text.splitlines()
             if any(word in line.lower() for word in NOTABLE)]
    return list(dict.fromkeys(lines))
