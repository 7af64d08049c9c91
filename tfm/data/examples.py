"""Per-example processing: text pair -> token ids, with bad data marked, then counted and dropped.

`EncodePair` / `EncodeChunk` run inside grain's map stage (possibly in worker processes). They
never drop an example, they mark it with a `status`, so that the main process (`ExampleCursor`)
can count every reason an example was dropped or changed (`Counters`) and keep those counts in
its checkpointable state.

An encoded example is {'inputs': int32[n], 'targets': int32[m], 'status': int32, 'truncated':
int32}; both id arrays end with EOS (1) and have length <= max_length when status == OK. A
monolingual example (data.text_key: a 1-tuple (text,)) has 'targets' = ids + EOS and 'inputs'
empty; it is encoded with max_length None (no limit: streams cut it into rows, tfm/data/stream.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tfm.data.tokenizer import EOS_ID

OK, EMPTY, NON_UTF8, OVERLONG = 0, 1, 2, 3
COUNTER_NAMES = ("examples_read", "examples_kept", "skipped_empty", "skipped_non_utf8",
                 "filtered_overlong", "truncated")
_STATUS_COUNTER = {EMPTY: "skipped_empty", NON_UTF8: "skipped_non_utf8",
                   OVERLONG: "filtered_overlong"}
_NO_IDS = np.zeros((0,), np.int32)


def decode_text(value) -> tuple[str | None, int]:
  """bytes|str -> (stripped text, OK) or (None, EMPTY|NON_UTF8)."""
  if isinstance(value, (bytes, np.bytes_)):
    try:
      value = bytes(value).decode("utf-8")
    except UnicodeDecodeError:
      return None, NON_UTF8
  value = str(value).strip()
  if not value:
    return None, EMPTY
  return value, OK


def fit_length(ids: list[int], max_length: int | None,
               overlong: str) -> tuple[list[int] | None, bool]:
  """Applies data.overlong to one id list: (ids, truncated) or (None, False) when filtered.

  'truncate' keeps the first max_length - 1 ids and puts EOS back at the end; max_length None
  keeps every id list.
  """
  if max_length is None or len(ids) <= max_length:
    return ids, False
  if overlong == "filter":
    return None, False
  return ids[:max_length - 1] + [EOS_ID], True


def length_limit(cfg) -> int | None:
  """The longest example kept: data.max_length for pairs, None (any) for monolingual text, which
  runs across rows (data.overlong does not apply)."""
  return None if cfg.text_key is not None else cfg.max_length


class EncodePair:
  """grain map: (source_text, target_text) -> encoded example dict (see module docstring); a
  1-tuple (text,) -> its ids as 'targets', 'inputs' empty."""

  def __init__(self, tokenizer, max_length: int | None, overlong: str):
    self.tokenizer = tokenizer
    self.max_length = max_length
    self.overlong = overlong

  def _marked(self, status: int) -> dict[str, Any]:
    return {"inputs": _NO_IDS, "targets": _NO_IDS, "status": np.int32(status),
            "truncated": np.int32(0)}

  def __call__(self, pair) -> dict[str, Any]:
    texts = []
    for value in pair:
      text, status = decode_text(value)
      if status != OK:
        return self._marked(status)
      texts.append(text)
    out, truncated = [], False
    for text in texts:
      ids, cut = fit_length(self.tokenizer.encode(text), self.max_length, self.overlong)
      if ids is None:
        return self._marked(OVERLONG)
      out.append(np.asarray(ids, np.int32))
      truncated |= cut
    if len(out) == 1:
      out.insert(0, _NO_IDS)
    return {"inputs": out[0], "targets": out[1], "status": np.int32(OK),
            "truncated": np.int32(truncated)}


class EncodeChunk:
  """grain map: list of (source, target) pairs -> one compact chunk of encoded examples.

  The chunk is a dict of flat int32 arrays: 'inputs' / 'targets' (all examples' ids
  concatenated), 'inputs_length' / 'targets_length', 'status', 'truncated' (one entry per
  example). Flat arrays cross grain's worker processes cheaply (no per-example pickling);
  `chunk_examples` turns a chunk back into per-example dicts. Working on chunks also
  amortises grain's per-element overhead and lets the source read records in batches.
  """

  def __init__(self, tokenizer, max_length: int | None, overlong: str):
    self.encode_pair = EncodePair(tokenizer, max_length, overlong)

  def __call__(self, pairs) -> dict[str, np.ndarray]:
    encoded = [self.encode_pair(pair) for pair in pairs]
    chunk = {}
    for side in ("inputs", "targets"):
      chunk[side] = (np.concatenate([e[side] for e in encoded]) if encoded
                     else np.zeros((0,), np.int32)).astype(np.int32)
      chunk[f"{side}_length"] = np.array([len(e[side]) for e in encoded], np.int32)
    chunk["status"] = np.array([e["status"] for e in encoded], np.int32)
    chunk["truncated"] = np.array([e["truncated"] for e in encoded], np.int32)
    return chunk


def chunk_examples(chunk: dict[str, np.ndarray]) -> list[dict[str, Any]]:
  """Inverse of EncodeChunk's packing: per-example dicts whose id arrays are views."""
  ends = {side: np.cumsum(chunk[f"{side}_length"]) for side in ("inputs", "targets")}
  out = []
  for i in range(len(chunk["status"])):
    example = {"status": chunk["status"][i], "truncated": chunk["truncated"][i]}
    for side, side_ends in ends.items():
      end = int(side_ends[i])
      example[side] = chunk[side][end - int(chunk[f"{side}_length"][i]):end]
    out.append(example)
  return out


class Counters:
  """Counts of what happened to examples; `count(example)` says whether to keep it."""

  def __init__(self, values: dict[str, int] | None = None):
    self.values = {name: 0 for name in COUNTER_NAMES}
    if values:
      self.values.update({k: int(v) for k, v in values.items()})

  def count(self, example) -> bool:
    self.values["examples_read"] += 1
    status = int(example["status"])
    if status != OK:
      self.values[_STATUS_COUNTER[status]] += 1
      return False
    self.values["examples_kept"] += 1
    self.values["truncated"] += int(example["truncated"])
    return True
