"""A weighted mixture of train sources (data.mixture): which source each example comes from.

Each source of data.mixture has its own train pipeline up to an ExampleCursor (tfm/data/cursor.py):
its host shard, shuffled with its own seed (`source_seed`: data.shuffle_seed and the source's
index), repeated epoch after epoch at its own rate, tokenized or read from its own token cache.
`MixtureCursor` puts them behind one cursor that the packer (or the bucketer) reads as it reads a
single source's: the k-th example this host takes (k = 0, 1, ...) comes from source

  s_k = #{j : W_j <= u_k},   W_j = w_0 + ... + w_j (the normalized weights' partial sums),
  u_k ~ Uniform[0, 1): numpy's PCG64 seeded with (data.shuffle_seed, process_index, k // BLOCK),
                      element k % BLOCK of its first BLOCK draws,

so P(s_k = i) = w_i, the draws are independent, and the whole sequence is a pure function of
(data.shuffle_seed, host, k): deterministic in the seed and, through the packer, in the step.
Over n examples the count of source i is Binomial(n, w_i) (tests/data/test_mixture.py checks the
counts against its 4-sigma bounds). Draws are over kept examples: a source's bad examples
(empty, non-UTF-8, over-long) are skipped inside its cursor and never take a mixture slot.

A source is never exhausted in training (num_epochs=None repeats each forever): a small source
with a large weight is read through more epochs than a large one, each epoch reshuffled, as
fairseq's and Marian's upsampling repeat a small corpus. With a finite num_epochs (tests, the
throughput benchmark) the mixture ends when the first source runs out.

State: each source cursor's (its chunk index, offset and counters); k is the sum of the sources'
kept counts, so a restored mixture draws the same sources for the same examples and resumes
bit-exact. Per-source counts (`source_counts`: `from_<name>`, the examples taken from each) go to
the `[data]` line and TensorBoard beside the summed counters.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tfm.data import examples as examples_lib

BLOCK = 4096  # draws computed together (one Generator per block)
_DRAW_TAG = 0x6D6978  # 'mix': keeps these streams apart from any other use of the seed
_SOURCE_TAG = 0x737263  # 'src'


def source_seed(shuffle_seed: int, index: int) -> int:
  """The shuffle seed of source `index` of a mixture: its epochs shuffle with this seed + epoch
  (tfm/data/shuffle.py), distinct streams for two sources of one dataset."""
  return int(np.random.SeedSequence([shuffle_seed, index, _SOURCE_TAG]).generate_state(1)[0])


def draws(weights: Sequence[float], seed: int, process_index: int, block: int) -> np.ndarray:
  """int64 [BLOCK]: the sources s_k of examples k = block * BLOCK ... (block + 1) * BLOCK - 1 of
  host `process_index` (the module docstring's formula)."""
  rng = np.random.Generator(np.random.PCG64(
      np.random.SeedSequence([seed, process_index, block, _DRAW_TAG])))
  u = rng.random(BLOCK)
  edges = np.cumsum(np.asarray(weights, np.float64))
  return np.minimum(np.searchsorted(edges, u, side="right"), len(edges) - 1).astype(np.int64)


class MixtureCursor:
  """An ExampleCursor's interface (peek, take, counters, get_state, set_state) over the cursors of
  a mixture's sources, each example drawn from source i with probability weights[i]."""

  def __init__(self, names: Sequence[str], weights: Sequence[float], cursors: Sequence, *,
               seed: int, process_index: int):
    if not len(names) == len(weights) == len(cursors) >= 1:
      raise ValueError(f"a mixture needs as many names, weights and cursors, got {len(names)}, "
                       f"{len(weights)}, {len(cursors)}")
    self.names, self.weights = tuple(names), tuple(float(w) for w in weights)
    self.cursors = list(cursors)
    self._seed, self._process_index = int(seed), int(process_index)
    self._block = (-1, None)  # (block index, its draws)

  @property
  def taken(self) -> int:
    """k: the examples taken from the mixture so far (the sources' kept examples)."""
    return sum(c.counters.values["examples_kept"] for c in self.cursors)

  def _next_source(self) -> int:
    block, offset = divmod(self.taken, BLOCK)
    if self._block[0] != block:
      self._block = (block, draws(self.weights, self._seed, self._process_index, block))
    return int(self._block[1][offset])

  def peek(self) -> dict[str, Any] | None:
    """The next example (not consumed): the next OK one of the source drawn for it; None once that
    source is exhausted (finite num_epochs only)."""
    return self.cursors[self._next_source()].peek()

  def take(self) -> dict[str, Any]:
    return self.cursors[self._next_source()].take()

  @property
  def counters(self) -> examples_lib.Counters:
    """The sources' counters summed (examples read, kept, skipped, ...)."""
    return examples_lib.Counters({name: sum(c.counters.values[name] for c in self.cursors)
                                  for name in examples_lib.COUNTER_NAMES})

  def source_counts(self) -> dict[str, int]:
    """{'from_<name>': examples taken from that source} in the sources' order."""
    return {f"from_{name}": c.counters.values["examples_kept"]
            for name, c in zip(self.names, self.cursors)}

  def get_state(self) -> dict[str, Any]:
    return {"sources": {name: c.get_state() for name, c in zip(self.names, self.cursors)}}

  def set_state(self, state: dict[str, Any]) -> None:
    saved = state.get("sources") if isinstance(state, dict) else None
    if not isinstance(saved, dict) or set(saved) != set(self.names):
      raise ValueError(f"the checkpoint's data position is not one of a mixture of "
                       f"{list(self.names)} (data.mixture): got {sorted(saved or state)}")
    for name, c in zip(self.names, self.cursors):
      c.set_state(saved[name])
    self._block = (-1, None)


class Streams:
  """The sources' chunk streams, closed together (TrainIterator.close)."""

  def __init__(self, streams):
    self.streams = list(streams)

  def close(self) -> None:
    for stream in self.streams:
      stream.close()
