"""Train and eval input pipelines: TFDS array_record -> grain -> fixed-shape int32 batches.

Why grain (0.2.18) and not tf.data: the TFDS data source gives random access, and grain's
`MapDataset` turns that into an index-based pipeline whose order is a pure function of (seed,
epoch, index): `source[process_index::process_count]` is a disjoint and complete host shard,
grain's index shuffle reshuffles every epoch deterministically, and every iterator has a
small `get_state()`/`set_state()` (a few integers per stage), so a restored run sees exactly the
batches it would have seen. Tokenization can move to worker processes (`mp_prefetch`,
data.num_workers) without changing that. tf.data would need its (large, opaque) iterator
checkpoints and a TF runtime next to JAX. Batching (packing or buckets) runs in the main process
on an ExampleCursor: ours is far cheaper per example than grain's own packer (see packing.py),
so the producer (record reads + SentencePiece) is what data.num_workers scales and data.cache
removes: with the token cache a chunk is a memory-mapped gather and the main process's packer is
the limit (the figures: experiments/SPEED.md; experiments/data_throughput.py measures them).

Stages (per host):
  chunk k -> ShuffledPositions: CHUNK_SIZE positions in the host's shard, grain's shuffle(seed)
    of each epoch, epochs repeated (tfm/data/shuffle.py computes an epoch's permutation at once)
  data.cache=False: -> HostShard: the pairs at those positions of TextPairSource
    (tfds.data_source)[process_index::process_count] (batched record reads)
    -> EncodeChunk: utf-8 decode, SentencePiece, data.overlong
  data.cache=True: -> TokenCache.chunk: the same examples' ids (a gather)
  -> ChunkStream (workers.py: grain read-ahead threads, or data.num_workers processes; state =
     the next chunk's index, the same for any worker count)
  -> ExampleCursor (skips and counts bad data)
  data.mixture: the stages above for each source (its own shuffle seed) -> MixtureCursor, each
     example drawn from source i with probability w_i (tfm/data/mixture.py)
  -> packed: PackedBatcher(rows)  |  bucketed: BucketBatcher(boundaries)
     | monolingual text (data.text_key): StreamBatcher(rows) (stream.py), the examples cut into
       rows of max_length (span: T5's raw rows), corrupted by the task (masking.py, spans.py)
Each batch is a dict of int32 arrays [rows, length] with keys batching.BATCH_KEYS, where
rows = tokens_per_batch // max_length // process_count (packed; length = max_length) or
rows ~ tokens_per_batch // boundary // process_count (bucketed; length = bucket boundary), each
global count rounded up to split over the hosts and the step (tfm/data/batching.py).
"""

from __future__ import annotations

import math
import sys
import threading
from typing import Any

import grain
import numpy as np

from tfm.data import batching
from tfm.data import bucketing
from tfm.data import cache
from tfm.data import cursor
from tfm.data import examples as examples_lib
from tfm.data import mixture
from tfm.data import packing
from tfm.data import shuffle
from tfm.data import sources
from tfm.data import stream as stream_lib
from tfm.data import workers
from tfm.data.config import DataConfig
from tfm.data.host_shard import HostShard
from tfm.data.tokenizer import check_task

CHUNK_SIZE = 128  # pairs read and tokenized together (one grain element)
_WINDOW_BATCHES = 16  # bucketed mode: batches' worth of tokens read per shuffling window


class TrainIterator:
  """Iterator of per-host train batches with checkpointable state and statistics.

  next(it) -> {key: int32 [rows, length]}; get_state() -> small JSON-serializable dict;
  set_state(state) restores it (on an iterator built with the same config and host);
  stats() -> packing efficiency (real tokens / slots per side) and bad-data counters.
  """

  def __init__(self, batcher, stream, has_inputs: bool = True):
    self._batcher = batcher
    self._stream = stream
    self._has_inputs = has_inputs
    self._efficiency = packing.Efficiency()

  def __iter__(self):
    return self

  def __next__(self) -> dict[str, Any]:
    batch = next(self._batcher)
    self._efficiency.update(batch)
    return batch

  def get_state(self) -> dict[str, Any]:
    return {"batcher": self._batcher.get_state(), "efficiency": self._efficiency.state()}

  def set_state(self, state: dict[str, Any]) -> None:
    self._batcher.set_state(state["batcher"])
    self._efficiency = packing.Efficiency(state["efficiency"])

  def stats(self) -> dict[str, Any]:
    """Efficiency of the batches returned so far, and counts of the examples consumed (bucketed
    mode: read into the current window)."""
    out = self._efficiency.summary()
    if not self._has_inputs:  # lm's batches carry zero inputs (one layout for all): not a 0.0
      del out["inputs_efficiency"]
    out.update(self._batcher.cursor.counters.values)
    if isinstance(self._batcher.cursor, mixture.MixtureCursor):  # data.mixture: from_<source>
      out.update(self._batcher.cursor.source_counts())
    return out

  def close(self) -> None:
    """Stops grain's read-ahead threads / worker processes."""
    self._stream.close()


def train_chunks(cfg: DataConfig, source: sources.DataSource, tokenizer, *, process_index: int = 0,
                 process_count: int = 1, num_epochs: int | None = None) -> grain.MapDataset:
  """This host's shuffled train split as a MapDataset of encoded chunks (EncodeChunk layout) of
  CHUNK_SIZE examples: chunk k is a pure function of (data.shuffle_seed, k).

  Chunk k holds the examples at ShuffledPositions(k) of the host's shard (split[process_index::
  process_count]): data.cache=False reads and tokenizes those pairs, True gathers the same
  examples' ids from the token cache (built on first use, in host order), so both give the same
  chunks.
  """
  if cfg.cache:
    tokens = cache.open_cache(cfg, source, tokenizer, process_index, process_count)
    n, reads = len(tokens), [tokens.chunk]
  else:
    host = HostShard(source.open("train"), process_index, process_count)
    n, reads = len(host), [host, examples_lib.EncodeChunk(
        tokenizer, examples_lib.length_limit(cfg), cfg.overlong)]
  positions = ShuffledPositions(n, cfg.shuffle_seed, CHUNK_SIZE, num_epochs)
  chunks = grain.MapDataset.range(positions.num_chunks).map(positions)
  for read in reads:
    chunks = chunks.map(read)
  return chunks


class ShuffledPositions:
  """grain map: chunk index k -> int64 [<= chunk_size] example positions in [0, n).

  The same numbers as chunk k of `MapDataset.range(n).shuffle(seed).repeat(num_epochs)
  .batch(chunk_size)`: grain's index shuffle with seed + epoch, chunks running across epochs.
  Each epoch's permutation is computed whole by tfm/data/shuffle.py (the last two are kept: a
  chunk may span two), not element by element through grain's dataset, whose per-element
  overhead and index shuffle would cap the pipeline (see experiments/SPEED.md).
  """

  def __init__(self, n: int, seed: int, chunk_size: int, num_epochs: int | None):
    if n < 1:
      raise ValueError("the train split of this host is empty")
    self.n, self.seed, self.chunk_size = n, seed, chunk_size
    self.total = sys.maxsize if num_epochs is None else n * num_epochs  # as grain's repeat(None)
    self.num_chunks = -(-self.total // chunk_size)
    self._epochs: dict[int, np.ndarray] = {}
    self._lock = threading.Lock()  # grain's read threads call this map concurrently

  def _epoch(self, epoch: int) -> np.ndarray:
    with self._lock:
      if epoch not in self._epochs:
        if len(self._epochs) >= 2:
          del self._epochs[min(self._epochs)]
        self._epochs[epoch] = shuffle.epoch_permutation(self.n, (self.seed + epoch) % 2**32)
      return self._epochs[epoch]

  def __call__(self, k: int) -> np.ndarray:
    start = int(k) * self.chunk_size
    stop = min(self.total, start + self.chunk_size)
    parts = []
    while start < stop:
      epoch, offset = divmod(start, self.n)
      take = min(stop - start, self.n - offset)
      parts.append(self._epoch(epoch)[offset:offset + take])
      start += take
    return np.concatenate(parts) if parts else np.zeros((0,), np.int64)

  def __getstate__(self):  # worker processes compute their own epochs
    return {k: v for k, v in self.__dict__.items() if k not in ("_epochs", "_lock")}

  def __setstate__(self, state):
    self.__dict__.update(state, _epochs={}, _lock=threading.Lock())


def train_iterator(cfg: DataConfig, source: sources.DataSource, tokenizer, *, process_index: int = 0,
                   process_count: int = 1, num_epochs: int | None = None,
                   row_multiple: int = 1, task=None) -> TrainIterator:
  """Per-host train batches: packed [rows, max_length] (data.packing) or length-bucketed; for
  a monolingual task (lm / mlm) a token stream cut into [rows, max_length] (stream.py), made the
  task's batch by its corrupter (mlm: masked, masking.py). task: the run's task (tfm/tasks,
  handed in; None: translation pairs).

  One seed (data.shuffle_seed) gives one sequence of batches; num_epochs=None repeats forever.
  With a finite num_epochs the last batch is padded with empty rows. row_multiple: the global
  row count of every batch, packed or bucketed, is rounded up to a multiple of it (the step's
  batch shards x microbatches; tfm/data/batching.py).
  """
  check_task(cfg, task)  # lm / mlm: data.text_key set, so data.packing is True (DataConfig)
  if not cfg.packing and process_count > 1:
    raise ValueError(f"config key data.packing=False (length-bucketed batches) runs on one host, "
                     f"not {process_count}: each host picks its own bucket for a step, so the "
                     "hosts' batches would differ in shape; use data.packing=True")
  example_cursor, stream = _train_cursor(cfg, source, tokenizer, process_index, process_count,
                                         num_epochs)
  if task is not None and task.monolingual:
    mask = task.corrupter(cfg, tokenizer, seed=cfg.shuffle_seed, process_index=process_index)
    batcher = stream_lib.StreamBatcher(
        example_cursor, batching.host_rows(cfg, process_count, row_multiple),
        task.stream_length(cfg), mask)
  elif cfg.packing:
    batcher = packing.PackedBatcher(
        example_cursor, batching.host_rows(cfg, process_count, row_multiple), cfg.max_length)
  else:
    boundaries = batching.bucket_boundaries(cfg.max_length)
    batcher = bucketing.BucketBatcher(
        example_cursor, boundaries=boundaries,
        rows_for={b: batching.bucket_rows(cfg, b, process_count, row_multiple) for b in boundaries},
        window_tokens=_WINDOW_BATCHES * cfg.tokens_per_batch // process_count,
        seed=cfg.shuffle_seed)
  return TrainIterator(batcher, stream, task is None or task.has_inputs)


def _train_cursor(cfg: DataConfig, source: sources.DataSource, tokenizer, process_index: int,
                  process_count: int, num_epochs: int | None):
  """(cursor over this host's train examples, what closes its streams): the dataset's, or with
  data.mixture a MixtureCursor over each source's (tfm/data/mixture.py), each source shuffled
  with its own seed."""
  keywords = dict(process_index=process_index, process_count=process_count,
                  num_epochs=num_epochs)
  if not cfg.mixture:
    stream = workers.ChunkStream(train_chunks(cfg, source, tokenizer, **keywords), cfg.num_workers)
    return cursor.ExampleCursor(stream), stream
  streams = [workers.ChunkStream(train_chunks(
      sub.replace(shuffle_seed=mixture.source_seed(cfg.shuffle_seed, i)), member, tokenizer,
      **keywords), cfg.num_workers)
             for i, ((_, _, sub), (_, _, member)) in enumerate(zip(cfg.mixture_sources,
                                                                   source.mixture))]
  names, weights = zip(*[(name, weight) for name, weight, _ in cfg.mixture_sources])
  return mixture.MixtureCursor(names, weights, [cursor.ExampleCursor(s) for s in streams],
                               seed=cfg.shuffle_seed, process_index=process_index), (
                                   mixture.Streams(streams))


class FirstUsable:
  """The first `limit` examples of a split (all when None) whose every text is UTF-8 and not empty,
  in split order: what data.eval_max_examples counts (the first N texts or pairs an evaluation
  scores, not the first N lines whatever they hold). A data source (len, [i]) for HostShard.
  skipped: the examples passed over to find them (empty or not UTF-8), read while looking."""

  READ = 256  # examples read at a time (a batched read where the split has one)

  def __init__(self, split, limit: int | None):
    self.split, self.indices, self.skipped = split, [], 0
    batched = getattr(split, "_getitems", None)
    for first in range(0, len(split), self.READ):
      if limit is not None and len(self.indices) == limit:
        break
      positions = list(range(first, min(first + self.READ, len(split))))
      for i, example in zip(positions, batched(positions) if batched
                            else [split[i] for i in positions]):
        if limit is not None and len(self.indices) == limit:
          break
        if all(examples_lib.decode_text(value)[1] == examples_lib.OK for value in example):
          self.indices.append(i)
        else:
          self.skipped += 1

  def __len__(self) -> int:
    return len(self.indices)

  def __getitem__(self, position: int):
    return self.split[self.indices[int(position)]]

  def _getitems(self, positions) -> list:
    indices = [self.indices[int(i)] for i in positions]
    batched = getattr(self.split, "_getitems", None)
    return batched(indices) if batched else [self.split[i] for i in indices]


def eval_batches(cfg: DataConfig, source: sources.DataSource, tokenizer, split: str = "dev", *,
                 process_index: int = 0, process_count: int = 1, row_multiple: int = 1,
                 task=None, context_length: int | None = None,
                 counts: dict | None = None) -> list[dict[str, Any]]:
  """This host's share of `split` ('dev', 'test' or an evaluation set of data.eval_sets; its first
  data.eval_max_examples examples that hold text, FirstUsable) as unpacked, padded [rows,
  max_length] batches in dataset order, rows = batching.host_rows (tokens_per_batch // max_length
  rounded up to a multiple of the hosts and of row_multiple, the batch shards) // hosts.

  Over-long examples follow data.overlong. Every host returns the same number of batches
  (padded with all-zero batches), so collective eval steps stay in lockstep.
  counts: filled with what was scored, where given: 'skipped' (examples passed over, empty or
  not UTF-8: the whole split's, the same on every host), and this host's 'kept', 'dropped'
  (longer than data.max_length, filtered) and 'truncated' (cut to it).

  task: the run's task (tfm/tasks, handed in; None: translation pairs); a monolingual one (lm,
  mlm): `stream_eval_batches` (rows of context_length, None = data.max_length).
  """
  check_task(cfg, task)
  if task is not None and task.monolingual:
    return stream_eval_batches(cfg, source, tokenizer, split, process_index=process_index,
                               process_count=process_count, row_multiple=row_multiple,
                               task=task, context_length=context_length, counts=counts)
  if context_length is not None:
    raise ValueError(f"context_length={context_length}: scoring at other context lengths is "
                     "for task 'lm' or 'mlm'; translation batches have rows of data.max_length")
  rows = batching.host_rows(cfg, process_count, row_multiple)
  pairs = FirstUsable(source.open(split), cfg.eval_max_examples)
  host = HostShard(pairs, process_index, process_count)
  ds = grain.MapDataset.source(host).map(
      examples_lib.EncodePair(tokenizer, cfg.max_length, cfg.overlong))
  # Host 0's shard is the longest: every host pads to its number of batches.
  longest = HostShard(pairs, 0, process_count)
  num_batches = math.ceil(len(longest) / rows)
  counters = examples_lib.Counters()
  kept = [example for example in ds if counters.count(example)]
  if counts is not None:
    values = counters.values
    counts.update(skipped=pairs.skipped, kept=values["examples_kept"],
                  dropped=values["filtered_overlong"], truncated=values["truncated"])
  batches = [batching.pad_examples(kept[i:i + rows], rows, cfg.max_length)
             for i in range(0, len(kept), rows)]
  while len(batches) < num_batches:
    batches.append(batching.pad_examples([], rows, cfg.max_length))
  return batches


def eval_text_pairs(cfg: DataConfig, source: sources.DataSource,
                    split: str = "dev") -> list[tuple[str, str]]:
  """(source, target) strings of `split` in dataset order for BLEU: the first
  data.eval_max_examples pairs that hold text, FirstUsable (all hosts get the same list)."""
  if cfg.text_key is not None:
    raise ValueError(f"data.text_key={cfg.text_key!r}: a monolingual split has no translation "
                     "pairs to score with BLEU (tasks lm and mlm report perplexity)")
  first = FirstUsable(source.open(split), cfg.eval_max_examples)
  return [tuple(examples_lib.decode_text(value)[0] for value in first[i])
          for i in range(len(first))]


def _eval_texts(cfg: DataConfig, source: sources.DataSource, split: str) -> FirstUsable:
  """The first data.eval_max_examples texts of a monolingual split, in dataset order."""
  return FirstUsable(source.open(split), cfg.eval_max_examples)


def stream_eval_batches(cfg: DataConfig, source: sources.DataSource, tokenizer, split: str = "dev",
                        *, process_index: int = 0, process_count: int = 1, row_multiple: int = 1,
                        task=None, context_length: int | None = None,
                        counts: dict | None = None) -> list[dict[str, Any]]:
  """This host's eval batches of a monolingual split (tasks lm, mlm): the split's first
  data.eval_max_examples examples that hold text (FirstUsable) in dataset order, each ending with
  EOS, concatenated and cut into rows of context_length (None = data.max_length), so every token
  is scored exactly once.

  Global batch b holds rows [b * R, (b + 1) * R) of the stream, R = tokens_per_batch //
  context_length rounded up to a multiple of the hosts and of row_multiple (as
  batching.global_rows); host h takes its R / hosts consecutive rows of each. Every host reads the
  whole (small) split, so the stream, and with it each host's number of batches, is the same for
  any host count; the last batches are padded (all-zero rows). A task with a corrupter (mlm's
  masking) corrupts the whole stream once, as one row, with masking.EVAL_SEED, before it is cut:
  the same masked tokens in every run and every evaluation, whatever the rows a batch has
  (tokens_per_batch, context_length, the hosts and batch shards it is rounded up for); the task
  owns that step (Task.eval_stream: span cuts the stream into raw rows and corrupts them, rows of
  other lengths, its own way). Empty and
  non-UTF-8 examples are skipped (as in training); a set with no text at all is refused
  (ValueError naming it), before any evaluation runs. counts: filled with 'texts' (scored whole,
  every host's) and 'skipped' (empty or not UTF-8), where given.
  """
  length = cfg.max_length if context_length is None else context_length
  if not isinstance(length, int) or isinstance(length, bool) or length < 1:
    raise ValueError(f"context_length: expected a positive integer or None, got {length!r}")
  multiple = math.lcm(process_count, row_multiple)
  rows = batching.round_up_rows(cfg.tokens_per_batch // length, multiple)
  host_rows = rows // process_count
  encode = examples_lib.EncodePair(tokenizer, None, cfg.overlong)
  texts = _eval_texts(cfg, source, split)
  ids = [encode(texts[i])["targets"] for i in range(len(texts))]  # every one OK: FirstUsable's
  if not ids:  # nothing to score: a perplexity of no tokens is no figure (and 0 / 0)
    raise ValueError(f"evaluation set {split!r}: its {texts.skipped} examples hold no text, each "
                     "empty or not UTF-8; expected at least one text to score")
  if counts is not None:
    counts.update(texts=len(ids), skipped=texts.skipped)
  tokens = np.concatenate(ids).astype(np.int32)
  batches = (stream_lib.eval_stream_batches(tokens, rows, length, None) if task is None
             else task.eval_stream(tokens, rows, length, cfg, tokenizer))
  start = process_index * host_rows
  return [{key: value[start:start + host_rows] for key, value in batch.items()}
          for batch in batches]


def eval_word_count(cfg: DataConfig, source: sources.DataSource, split: str = "dev", *,
                    task=None) -> int:
  """Whitespace-separated words of the texts eval_batches scores (the split's first
  data.eval_max_examples examples that hold text), all hosts together: the
  denominator of per-word perplexity, exp(sum of the tokens' NLL, EOS included / words)."""
  if task is not None:  # None: data.text_key's texts, whatever reads them
    check_task(cfg, task)
  if cfg.text_key is None or (task is not None and not task.monolingual):
    raise ValueError("eval_word_count counts the words of a monolingual split (task 'lm' or "
                     "'mlm'); translation reports BLEU")
  texts = _eval_texts(cfg, source, split)
  words = 0
  for i in range(len(texts)):
    text, status = examples_lib.decode_text(texts[i][0])
    if status == examples_lib.OK:
      words += len(text.split())
  return words
