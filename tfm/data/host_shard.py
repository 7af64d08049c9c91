"""A host's share of a split: what each of process_count hosts reads, disjoint and complete
(tests/data/test_multihost.py reads it from 2 real JAX processes)."""

from __future__ import annotations


class HostShard:
  """This host's share of a split: position i is example process_index + i * process_count of
  the split's first `limit` examples (all when None): `split[:limit][process_index::process_count]`.

  A grain data source (`len`, `shard[i] -> (source, target)`, batched reads) for reading in
  order, and a grain map (int64 positions [n] -> those n pairs, read together) for reading at
  shuffled positions.
  """

  def __init__(self, source, process_index: int, process_count: int, limit: int | None = None):
    if process_count < 1 or not 0 <= process_index < process_count:
      raise ValueError(f"process_index={process_index} must be in [0, process_count="
                       f"{process_count})")
    self.source, self.process_index, self.process_count = source, process_index, process_count
    self._indices = range(process_index, len(source) if limit is None else min(limit, len(source)),
                          process_count)

  def __len__(self) -> int:
    return len(self._indices)

  def __getitem__(self, position: int):
    return self.source[self._indices[int(position)]]

  def _getitems(self, positions) -> list:  # grain's name for a batched read
    indices = [self._indices[int(i)] for i in positions]
    batched = getattr(self.source, "_getitems", None)
    return batched(indices) if batched else [self.source[i] for i in indices]

  def __call__(self, positions) -> list:
    return self._getitems(positions)

  def __repr__(self) -> str:
    return (f"HostShard({self.source!r}, host {self.process_index} of {self.process_count}, "
            f"{len(self)} pairs)")
