"""XLA's refusal to compile a TPU program that does not fit in HBM, read for the sizes it names.

libtpu checks the program against the chip's usable HBM (a little under its capacity: 15.75 GiB of a
v5e's 16) and raises RESOURCE_EXHAUSTED instead of returning an executable, with one of:

  Ran out of memory on HBM, the total memory required for HLO temporaries (21.72G) exceeds
  available HBM (15.75G).
  ... Ran out of memory in memory space hbm. Used 17.03G of 15.75G hbm. Exceeded hbm capacity by
  1.28G. ...

Sizes are XLA's human-readable bytes, K/M/G/T being powers of 1024.
"""

from __future__ import annotations

import dataclasses
import re

_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE = r"([0-9.]+)([KMGT]?)i?B?"
_TEMPORARIES = re.compile(rf"HLO temporaries \({_SIZE}\) exceeds available HBM \({_SIZE}\)")
_USED = re.compile(rf"Used {_SIZE} of {_SIZE} hbm")


@dataclasses.dataclass(frozen=True)
class OutOfMemory:
  usable_hbm_bytes: int  # what XLA allows a program on this chip
  temp_bytes: int | None  # set by the first message
  used_bytes: int | None  # set by the second: everything the program needs
  message: str  # XLA's first line


def _bytes(number: str, unit: str) -> int:
  return round(float(number) * _UNITS[unit])


def is_out_of_memory(error: Exception) -> bool:
  text = str(error)
  return "RESOURCE_EXHAUSTED" in text and "Ran out of memory" in text


def parse_out_of_memory(error: Exception) -> OutOfMemory:
  """The sizes in XLA's out-of-memory error (is_out_of_memory(error) must hold)."""
  text = str(error)
  line = next((l.strip() for l in text.splitlines() if "Ran out of memory" in l), text.strip())
  temporaries, used = _TEMPORARIES.search(text), _USED.search(text)
  if temporaries:
    return OutOfMemory(_bytes(*temporaries.group(3, 4)), _bytes(*temporaries.group(1, 2)), None,
                       line)
  if used:
    return OutOfMemory(_bytes(*used.group(3, 4)), None, _bytes(*used.group(1, 2)), line)
  raise ValueError(f"XLA ran out of HBM but its message names no sizes: {line}")
