"""Decoding settings chosen on a trained model: the beam size, the length penalty and the maximum
extra length, from the command line over the run's eval section, one point or a grid of them.

The paper chose its beam size and alpha "after experimentation on the development set" (section
6.1): `tfm eval --beam_size=1,4 --length_penalty=0,0.6,1` decodes the dev set at every point of the
grid with one trained model, and `tfm translate --beam_size=...` decodes with one point.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Sequence

from tfm.eval.config import EvalConfig

FLAGS = ("beam_size", "length_penalty", "max_extra_length")


@dataclasses.dataclass(frozen=True)
class Decoding:
  """One point: beam_size (1 = greedy), length_penalty (alpha) and max_extra_length."""
  beam_size: int
  length_penalty: float
  max_extra_length: int

  @classmethod
  def of(cls, e: EvalConfig) -> "Decoding":
    """The eval section's own settings."""
    return cls(e.beam_size, float(e.length_penalty), e.max_extra_length)

  def same_search(self) -> "Decoding":
    """The point whose search gives the same hypotheses: greedy search (beam 1) reads no length
    penalty, so every alpha of beam 1 is alpha 0's search."""
    return dataclasses.replace(self, length_penalty=0.0) if self.beam_size == 1 else self

  def suffix(self, configured: "Decoding") -> str:
    """'' for the run's own settings, else '_beam<K>_lp<alpha>_extra<E>': the part of a result
    file's name that keeps results decoded differently apart."""
    if self == configured:
      return ""
    return f"_beam{self.beam_size}_lp{self.length_penalty:g}_extra{self.max_extra_length}"


def _numbers(flag: str, values: Sequence[str] | str | None, kind: type, lowest: float,
             expected: str) -> list | None:
  if values is None:
    return None
  items = [values] if isinstance(values, (int, float)) else (
      values.split(",") if isinstance(values, str) else list(values))
  out = []
  for item in items:
    try:
      value = kind(str(item).strip())
    except ValueError:
      value = None
    if value is None or not math.isfinite(value) or value < lowest:
      raise ValueError(f"--{flag}={','.join(map(str, items))}: expected {expected}, got {item!r}")
    out.append(value)
  if len(set(out)) != len(out):
    raise ValueError(f"--{flag}={','.join(map(str, items))}: a value is given twice")
  return out


def points(e: EvalConfig, beam_size=None, length_penalty=None, max_extra_length=None
           ) -> list[Decoding]:
  """Every point of the grid the flags give (each a value or a comma-separated list; None: the
  eval section's value), beam sizes outermost; raises ValueError naming a bad flag."""
  beams = _numbers("beam_size", beam_size, int, 1, "positive integers (1 = greedy)")
  alphas = _numbers("length_penalty", length_penalty, float, 0.0, "non-negative numbers")
  extras = _numbers("max_extra_length", max_extra_length, int, 0, "non-negative integers")
  own = Decoding.of(e)
  return [Decoding(b, float(a), x) for b, a, x in itertools.product(
      beams or [own.beam_size], alphas or [own.length_penalty], extras or [own.max_extra_length])]


def check_lengths(config, decodings: Sequence[Decoding]) -> None:
  """Raises ValueError naming --max_extra_length where a point's longest output exceeds what a
  model with learned positions has rows for (the config's own check, with the flag's value)."""
  for d in decodings:
    try:
      config.replace(eval=dataclasses.replace(config.eval, max_extra_length=d.max_extra_length))
    except ValueError as e:
      raise ValueError(f"--max_extra_length={d.max_extra_length}: {e}") from None
