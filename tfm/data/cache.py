"""The token cache: a host's share of the train split, tokenized once, read back memory-mapped.

With data.cache=True the train pipeline does not run SentencePiece: the first run tokenizes this
host's examples (`source[process_index::process_count]`, in that order, with data.num_workers
processes) and writes them under

  <data.cache_dir>/<dataset>_<src>-<tgt>_L<max_length>_<fingerprint>/host-<i>-of-<n>/
  (monolingual text, data.text_key: <dataset>_<text_key>_<fingerprint>, examples kept whole)

(data.cache_dir None -> <data.data_dir or TFDS's default data dir>/tfm_cache; for text files
without a data.data_dir, ~/.cache/tfm). The fingerprint is a hash of everything the cached ids
depend on: the dataset, the languages, the split's record count and TFDS version (for text files:
a SHA-256 of their contents, so an edited file is tokenized again), the SentencePiece model's bytes (so a new vocabulary never reads old ids),
data.max_length and data.overlong, the host count and the format version. Packing, batch size
and shuffling are applied when reading, after the cache (as without it), so changing them never
meets a stale cache and needs no rebuild. The directory is built under a temporary name and
renamed, so a reader sees a whole cache or none; meta.json records its inputs.

Files (n = examples of this host, T_side = their tokens on that side):
  inputs.bin, targets.bin        token ids, concatenated, uint16 (vocab < 65536) or int32 [T_side]
  inputs_offsets.npy, targets_offsets.npy   int64 [n + 1]: example i is ids[off[i]:off[i + 1]]
  status.npy, truncated.npy      int8 [n]: examples.OK/EMPTY/NON_UTF8/OVERLONG, data.overlong cut
  meta.json                      the fingerprinted inputs, n, T_side, dtype, build seconds

Bad examples keep their slot (length 0 and their status), so the main process counts them exactly
as it does without the cache, and `TokenCache.chunk(indices)` returns the very chunk
examples.EncodeChunk would have built from the same pairs: the batches are identical with and
without the cache. Why not array_record: a chunk gathers 128 examples at random positions, and a
random array_record read decodes a whole record group; a memory-mapped gather is a few
microseconds per example and costs nothing to open in a worker process.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import time
from typing import Any

import grain
import numpy as np

from tfm import storage
from tfm.data import examples as examples_lib
from tfm.data import sources
from tfm.data import workers
from tfm.data.datasets import TEXT
from tfm.data.host_shard import HostShard

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
CHUNK_SIZE = 128  # pairs tokenized together while building (one grain element)
SIDES = ("inputs", "targets")


def cache_root(cfg) -> str:
  """data.cache_dir, or <data.data_dir or TFDS's default data dir>/tfm_cache (text files without
  a data.data_dir: ~/.cache/tfm, TFDS is not imported for them); must be local."""
  if cfg.cache_dir is not None:  # validated local by DataConfig
    root = cfg.cache_dir
  elif cfg.dataset == TEXT and cfg.data_dir is None:
    root = os.path.join("~", ".cache", "tfm")
  else:
    root = os.path.join(cfg.data_dir or sources.tfds_module().core.constants.DATA_DIR,
                        "tfm_cache")
    if storage.is_remote(root):
      raise ValueError(f"data.data_dir={cfg.data_dir!r} is remote and the token cache is "
                       "memory-mapped: set data.cache_dir to a local directory")
  return os.path.abspath(os.path.expanduser(root))


def fingerprint_inputs(cfg, tokenizer, source, process_count: int) -> dict[str, Any]:
  """Everything the cached token ids depend on (hashed into the directory name)."""
  inputs = {"format": FORMAT_VERSION, "dataset": cfg.dataset, "source_lang": cfg.source_lang,
            "target_lang": cfg.target_lang, "split": "train", "records": len(source),
            "tfds_version": source.version, "vocab_sha256": tokenizer.model_sha256,
            "max_length": cfg.max_length, "overlong": cfg.overlong,
            "process_count": process_count}
  if cfg.text_key is not None:  # monolingual: one text, no length limit (examples.length_limit)
    inputs.update(text_key=cfg.text_key, source_lang=None, target_lang=None, max_length=None,
                  overlong=None)
  return inputs


def cache_dir(cfg, tokenizer, source, process_index: int, process_count: int) -> str:
  """This host's cache directory (see the module docstring)."""
  inputs = fingerprint_inputs(cfg, tokenizer, source, process_count)
  digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
  slug = re.sub(r"[^A-Za-z0-9]+", "-", cfg.dataset).strip("-")
  name = (f"{slug}_{cfg.text_key}_{digest}" if cfg.text_key is not None else
          f"{slug}_{cfg.source_lang}-{cfg.target_lang}_L{cfg.max_length}_{digest}")
  return os.path.join(cache_root(cfg), name, f"host-{process_index}-of-{process_count}")


class TokenCache:
  """Read access to one host's cache directory; picklable (workers reopen the memory maps).

  len(cache) = examples of this host; cache.chunk(indices) -> EncodeChunk layout: 'inputs' /
  'targets' int32 [sum of lengths], '<side>_length' / 'status' / 'truncated' int32 [len(indices)].
  """

  def __init__(self, directory: str):
    self.directory = directory
    self.meta = storage.read_json(os.path.join(directory, "meta.json"))
    self._arrays = None

  def __getstate__(self):
    return {"directory": self.directory, "meta": self.meta}

  def __setstate__(self, state):
    self.directory, self.meta, self._arrays = state["directory"], state["meta"], None

  def __len__(self) -> int:
    return int(self.meta["examples"])

  def _open(self) -> dict[str, np.ndarray]:
    if self._arrays is None:
      path = lambda name: os.path.join(self.directory, name)
      arrays = {name: np.load(path(f"{name}.npy"), mmap_mode="r")
                for name in ("status", "truncated") + tuple(f"{s}_offsets" for s in SIDES)}
      for side in SIDES:
        tokens = int(self.meta["tokens"][side])
        arrays[side] = (np.memmap(path(f"{side}.bin"), dtype=self.meta["dtype"], mode="r",
                                  shape=(tokens,)) if tokens else np.zeros((0,), np.int32))
      self._arrays = arrays
    return self._arrays

  def chunk(self, indices) -> dict[str, np.ndarray]:
    """The encoded chunk of the examples at `indices` (this host's order), as EncodeChunk's."""
    arrays = self._open()
    index = np.asarray(indices, np.int64).reshape(-1)
    out = {}
    for side in SIDES:
      offsets = arrays[f"{side}_offsets"]
      starts = offsets[index]
      lengths = offsets[index + 1] - starts
      total = int(lengths.sum())
      # Position of every token: its example's start + its rank inside the example.
      shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
      out[side] = np.asarray(arrays[side][shift + np.arange(total)], np.int32)
      out[f"{side}_length"] = lengths.astype(np.int32)
    out["status"] = np.asarray(arrays["status"][index], np.int32)
    out["truncated"] = np.asarray(arrays["truncated"][index], np.int32)
    return out


def _write(directory: str, chunks, dtype, inputs: dict[str, Any]) -> None:
  """Streams encoded chunks into the cache files of a new `directory`."""
  os.makedirs(directory)
  files = {side: open(os.path.join(directory, f"{side}.bin"), "wb") for side in SIDES}
  lengths = {side: [] for side in SIDES}
  status, truncated = [], []
  start = time.perf_counter()
  try:
    for chunk in chunks:
      for side in SIDES:
        files[side].write(np.asarray(chunk[side], dtype).tobytes())
        lengths[side].append(chunk[f"{side}_length"])
      status.append(chunk["status"])
      truncated.append(chunk["truncated"])
  finally:
    for f in files.values():
      f.close()
  tokens = {}
  for side in SIDES:
    side_lengths = np.concatenate(lengths[side]) if lengths[side] else np.zeros((0,), np.int64)
    offsets = np.concatenate([[0], np.cumsum(side_lengths, dtype=np.int64)])
    np.save(os.path.join(directory, f"{side}_offsets.npy"), offsets)
    tokens[side] = int(offsets[-1])
  for name, parts in (("status", status), ("truncated", truncated)):
    values = np.concatenate(parts) if parts else np.zeros((0,), np.int32)
    np.save(os.path.join(directory, f"{name}.npy"), values.astype(np.int8))
  examples = sum(len(part) for part in status)
  storage.write_json(os.path.join(directory, "meta.json"), {
      **inputs, "examples": examples, "tokens": tokens, "dtype": np.dtype(dtype).name,
      "build_seconds": round(time.perf_counter() - start, 2)})


def build(cfg, tokenizer, directory: str, host: HostShard) -> None:
  """Tokenizes this host's shard of the split into `directory` (temporary name, renamed)."""
  chunks = grain.MapDataset.source(host).batch(CHUNK_SIZE, batch_fn=list).map(
      examples_lib.EncodeChunk(tokenizer, examples_lib.length_limit(cfg), cfg.overlong))
  dtype = np.uint16 if tokenizer.vocab_size <= np.iinfo(np.uint16).max + 1 else np.int32
  tmp = f"{directory}.tmp-{os.getpid()}"
  if os.path.exists(tmp):
    shutil.rmtree(tmp)
  os.makedirs(os.path.dirname(directory), exist_ok=True)
  stream = workers.ChunkStream(chunks, cfg.num_workers)
  try:
    _write(tmp, stream, dtype, fingerprint_inputs(cfg, tokenizer, host.source, host.process_count))
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  finally:
    stream.close()
  try:
    os.rename(tmp, directory)
  except OSError:  # another process published the same cache first: keep theirs
    if not os.path.exists(os.path.join(directory, "meta.json")):
      raise
    shutil.rmtree(tmp, ignore_errors=True)


def open_cache(cfg, source: sources.DataSource, tokenizer, process_index: int = 0,
               process_count: int = 1) -> TokenCache:
  """This host's token cache for the source's train split, built first when it does not exist
  yet."""
  host = HostShard(source.open("train"), process_index, process_count)
  directory = cache_dir(cfg, tokenizer, host.source, process_index, process_count)
  if not os.path.exists(os.path.join(directory, "meta.json")):
    log.info("building the token cache %s (%d examples on this host, data.num_workers=%d)",
             directory, len(host), cfg.num_workers)
    start = time.perf_counter()
    build(cfg, tokenizer, directory, host)
    log.info("token cache built in %.1f s", time.perf_counter() - start)
  return TokenCache(directory)
