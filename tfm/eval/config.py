"""The `eval` config section: decoding settings for BLEU (section 6.1) and when to score the dev set.

Defaults are the paper's: beam size 4, length penalty alpha = 0.6, outputs of at most input length
+ 50 tokens. Errors name the key (`config key eval.beam_size: expected ...`).
"""

from __future__ import annotations

import dataclasses

from tfm import sections
from tfm.data.length_buckets import check_edges
from tfm.eval.paper_tokenize import COMPOUND_MODES
from tfm.sections import fail, is_int, is_number


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  """Beam search settings and dev-BLEU bookkeeping."""

  beam_size: int = 4  # section 6.1
  length_penalty: float = 0.6  # alpha of the GNMT penalty ((5 + |Y|) / 6) ** alpha, section 6.1
  max_extra_length: int = 50  # outputs of at most input length + 50 tokens, section 6.1
  bleu_every: int = 0  # dev BLEU during training every this many steps; 0 = only `tfm eval`
  bleu_examples: int = 500  # dev pairs scored during training (the first ones); 0 = all
  batch_size: int = 32  # sentences decoded together
  cache_phases: int = 3  # decode loops, the self-attention caches growing from about a third of
  # the longest output to all of it: a step reads a cache about as long as its prefix
  # (tfm/decode/common.py)
  compounds: str = "t2t"  # tokenized BLEU's hyphen splitting: tensor2tensor's ('t2t', the
  # paper's), 'aggressive' (Moses -a, more splitting than the paper) or 'none'
  length_buckets: tuple[int, ...] = ()  # `tfm eval` also scores the dev pairs by source length:
  # edges in pieces, e.g. (32, 64, 128) for lengths 1-32, 33-64, 65-128, every pair of the split
  # up to the last edge, longer than data.max_length too (tfm/data/length_buckets.py); () = not
  context_lengths: tuple[int, ...] = ()  # a language model's (task 'lm') `tfm eval` also scores
  # the dev texts as a stream cut into rows of each of these many pieces, every piece once, e.g.
  # (64, 128, 256) for a model trained on rows of 64: extrapolation past data.max_length; () = not
  # (`tfm eval --context_lengths` overrides it; other tasks refuse it: tfm/tasks/task.py Task.check)

  def __post_init__(self):
    for key in ("beam_size", "batch_size", "cache_phases"):
      if not is_int(getattr(self, key)) or getattr(self, key) < 1:
        fail(f"eval.{key}", "a positive integer", getattr(self, key))
    for key in ("max_extra_length", "bleu_every", "bleu_examples"):
      if not is_int(getattr(self, key)) or getattr(self, key) < 0:
        fail(f"eval.{key}", "a non-negative integer", getattr(self, key))
    if not is_number(self.length_penalty) or self.length_penalty < 0:
      fail("eval.length_penalty", "a non-negative finite number", self.length_penalty)
    check_edges(self.length_buckets, "config key eval.length_buckets")
    lengths = self.context_lengths
    if (not isinstance(lengths, tuple) or not all(is_int(n) and n >= 1 for n in lengths)
        or len(set(lengths)) != len(lengths)):
      fail("eval.context_lengths", "a tuple of distinct positive integers, e.g. (64, 128, 256)",
           lengths)
    if self.compounds not in COMPOUND_MODES:
      fail("eval.compounds", f"one of {COMPOUND_MODES}", self.compounds)


def from_mapping(values) -> EvalConfig:
  return sections.from_mapping(EvalConfig, "eval", values, length_buckets=_edges,
                               context_lengths=_lengths)


def _edges(value):
  """A JSON list or a command line's tuple as a tuple (a single int as one edge)."""
  return (value,) if isinstance(value, int) else tuple(value)


def _lengths(value):
  """A JSON list or a command line's tuple as a tuple, a single int as one length; anything else
  as given, for the check to name."""
  return (value,) if isinstance(value, int) else tuple(value) if isinstance(value, (list, tuple)) \
      else value
