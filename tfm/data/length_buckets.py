"""A split cut by source length into buckets, for evaluation beyond the training lengths.

Edges e_1 < e_2 < ... < e_k (eval.length_buckets, or `tfm eval --length_buckets`) make the buckets
(0, e_1], (e_1, e_2], ..., (e_{k-1}, e_k] of source length in pieces, EOS included: the length
data.max_length bounds in training, so with e_1 = data.max_length the first bucket holds the dev
pairs whose source a run trained on lengths of, and the others hold longer ones. Sources longer
than e_k are counted and left out. Nothing is truncated: every bucket's rows are as long as its
longest source or target, whatever data.max_length says.

Every host reads and encodes the whole split (a dev set is small), so all hosts agree on the
buckets, their row lengths and their batch counts without communicating; each then keeps every
process_count-th pair of a bucket for its perplexity batches. The text pairs (for BLEU) are the
whole bucket on every host, as tfm/data/pipeline.py's eval_text_pairs gives them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Sequence

from tfm.data import batching
from tfm.data.config import DataConfig

if TYPE_CHECKING:  # the eval section's check_edges loads this module with every config: no grain
  from tfm.data import sources

ROW_MULTIPLE = 8  # row lengths are rounded up to a multiple of this: fewer shapes to compile


def check_edges(edges: Sequence[int], name: str) -> tuple[int, ...]:
  """The edges as a tuple of strictly increasing positive integers, or one ValueError naming
  `name` (the config key or flag they came from)."""
  edges = tuple(edges)
  if not all(isinstance(e, int) and not isinstance(e, bool) and e > 0 for e in edges) or any(
      a >= b for a, b in zip(edges, edges[1:])):
    raise ValueError(f"{name}: expected strictly increasing positive integers (source lengths in "
                     f"pieces), got {list(edges)}")
  return edges


def label(lo: int, hi: int) -> str:
  """A bucket's name: the source lengths it holds, '1-32', '33-64'."""
  return f"{lo + 1}-{hi}"


@dataclasses.dataclass
class Bucket:
  """Source lengths in (lo, hi] pieces. pairs: every (source, target) text of the bucket in split
  order; batches: this host's share as padded [rows, length] batches (every host has the same
  number); length: their row length, the bucket's longest source or target rounded up to
  ROW_MULTIPLE."""
  lo: int
  hi: int
  pairs: list[tuple[str, str]]
  batches: list[dict[str, Any]]
  length: int

  @property
  def label(self) -> str:
    return label(self.lo, self.hi)


def split_by_length(cfg: DataConfig, source: sources.DataSource, tokenizer, split: str,
                    edges: Sequence[int], *, process_index: int = 0, process_count: int = 1,
                    row_multiple: int = 1) -> tuple[list[Bucket], int]:
  """(the buckets of `split`'s first data.eval_max_examples pairs, the number of pairs whose
  source is longer than the last edge). Empty and non-UTF-8 pairs are left out, as in
  pipeline.eval_text_pairs. A batch of row length L has the rows data.tokens_per_batch // L
  gives (rounded as training rounds them: batching.global_rows)."""
  edges = check_edges(edges, "length buckets")
  from tfm.data import pipeline  # pylint: disable=import-outside-toplevel
  members: list[list] = [[] for _ in edges]
  beyond = 0
  for texts in pipeline.eval_text_pairs(cfg, source, split):
    ids = [tokenizer.encode(text) for text in texts]
    slot = next((k for k, e in enumerate(edges) if len(ids[0]) <= e), None)
    if slot is None:
      beyond += 1
      continue
    members[slot].append((texts, ids))
  buckets = []
  for k, group in enumerate(members):
    longest = max((len(side) for _, ids in group for side in ids), default=1)
    length = -(-longest // ROW_MULTIPLE) * ROW_MULTIPLE
    shape = cfg.replace(max_length=length, tokens_per_batch=max(cfg.tokens_per_batch, length))
    rows = batching.global_rows(shape, process_count, row_multiple) // process_count
    mine = [{"inputs": ids[0], "targets": ids[1]} for _, ids in group[process_index::process_count]]
    most = math.ceil(len(group) / process_count)  # host 0's share is the largest
    batches = [batching.pad_examples(mine[i:i + rows], rows, length)
               for i in range(0, most, rows)]
    buckets.append(Bucket(lo=0 if k == 0 else edges[k - 1], hi=edges[k],
                          pairs=[texts for texts, _ in group], batches=batches, length=length))
  return buckets, beyond

