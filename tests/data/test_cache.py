"""The token cache (data.cache): the same batches as tokenizing on the fly, keyed so it is never stale."""

import os

import grain
import numpy as np
import pytest

import tfm_data_testlib as testlib
from tfm.data import cache, examples, pipeline, sources, vocabulary


def _take(cfg, tok, n, **kwargs):
  it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, **kwargs)
  try:
    return [next(it) for _ in range(n)], it.stats()
  finally:
    it.close()


@pytest.mark.parametrize("packing", [True, False])
def test_cached_batches_equal_tokenized_batches(cfg, tok, tmp_path, packing):
  cfg = cfg.replace(packing=packing, overlong="filter", max_length=40)
  cached = cfg.replace(cache=True, cache_dir=str(tmp_path))
  # 40 batches run past the first epoch (~30 packed batches): the second epoch's shuffle too.
  got, got_stats = _take(cached, tok, 40)
  want, want_stats = _take(cfg, tok, 40)
  assert testlib.same_batches(got, want)
  assert got_stats == want_stats and want_stats["filtered_overlong"] > 0  # dropped data counted alike


def test_each_host_caches_its_own_shard(cfg, tok, tmp_path):
  cached = cfg.replace(cache=True, cache_dir=str(tmp_path))
  for index in range(2):
    got, _ = _take(cached, tok, 4, process_index=index, process_count=2)
    want, _ = _take(cfg, tok, 4, process_index=index, process_count=2)
    assert testlib.same_batches(got, want)
  assert sorted(os.listdir(next(tmp_path.iterdir()))) == ["host-0-of-2", "host-1-of-2"]


def test_cache_holds_each_examples_ids(cfg, tok, tmp_path):
  cfg = cfg.replace(cache=True, cache_dir=str(tmp_path), overlong="filter", max_length=32)
  tokens = cache.open_cache(cfg, sources.DataSource.of(cfg), tok, process_index=1, process_count=2)
  source = sources.DataSource.of(cfg).open("train")
  host = range(1, len(source), 2)
  assert len(tokens) == len(host) and tokens.meta["dtype"] == "uint16"
  chunk = tokens.chunk(np.arange(len(host)))
  ends = {side: np.cumsum(chunk[f"{side}_length"]) for side in ("inputs", "targets")}
  counts = {"ok": 0, "empty": 0, "overlong": 0}
  for i, record in enumerate(host):  # recomputed from the texts, not through EncodeChunk
    texts = [bytes(v).decode("utf-8").strip() for v in source[record]]
    ids = [tok.encode(t) for t in texts]
    status = int(chunk["status"][i])
    if not all(texts):
      assert status == examples.EMPTY
      counts["empty"] += 1
    elif max(len(x) for x in ids) > 32:
      assert status == examples.OVERLONG
      counts["overlong"] += 1
    else:
      assert status == examples.OK
      counts["ok"] += 1
      for side, want in zip(("inputs", "targets"), ids):
        n, end = int(chunk[f"{side}_length"][i]), int(ends[side][i])
        assert chunk[side][end - n:end].tolist() == want
  assert counts["ok"] and counts["overlong"]  # both occur in the fake corpus


def test_cache_key_changes_with_what_the_ids_depend_on(cfg, tok, tmp_path):
  cfg = cfg.replace(cache=True, cache_dir=str(tmp_path))
  source = sources.DataSource.of(cfg).open("train")
  key = lambda c, t=tok, count=1: cache.cache_dir(c, t, source, 0, count)
  other_vocab = vocabulary.get_tokenizer(cfg.replace(vocab_size=200, vocab_dir=str(tmp_path)),
                                        source=sources.DataSource.of(cfg))
  changed = [key(cfg.replace(max_length=32)), key(cfg.replace(overlong="filter")),
             key(cfg, other_vocab), key(cfg, count=2)]
  assert len(set(changed + [key(cfg)])) == 5
  same = [key(cfg.replace(packing=False)), key(cfg.replace(tokens_per_batch=cfg.max_length)),
          key(cfg.replace(shuffle_seed=7)), key(cfg.replace(num_workers=2))]
  assert set(same) == {key(cfg)}
  assert key(cfg).startswith(str(tmp_path))
  assert cache.cache_root(cfg.replace(cache_dir=None)) == os.path.join(cfg.data_dir, "tfm_cache")
  # Built at one max_length, a run at another never reads it: its batches are the uncached ones.
  _take(cfg, tok, 1)
  shorter = cfg.replace(max_length=32, tokens_per_batch=32 * 8)
  got, _ = _take(shorter, tok, 5)
  want, _ = _take(shorter.replace(cache=False), tok, 5)
  assert testlib.same_batches(got, want)
  assert len(list(tmp_path.glob("*/host-0-of-1/meta.json"))) == 2


def test_build_with_workers_writes_the_same_cache(cfg, tok, tmp_path):
  dirs = []
  for workers in (0, 2):
    c = cfg.replace(cache=True, cache_dir=str(tmp_path / f"w{workers}"), num_workers=workers)
    dirs.append(cache.open_cache(c, sources.DataSource.of(c), tok).directory)
  names = sorted(os.listdir(dirs[0]))
  assert names == sorted(os.listdir(dirs[1])) and "inputs.bin" in names
  for name in names:
    if name != "meta.json":  # meta.json holds the build time
      with open(os.path.join(dirs[0], name), "rb") as a, open(os.path.join(dirs[1], name), "rb") as b:
        assert a.read() == b.read(), name
  assert not list(tmp_path.glob("*/*/*.tmp-*"))  # built under a temporary name, then renamed


@pytest.mark.slow
def test_cached_batches_with_workers_resume_exactly(cfg, tok, tmp_path):
  """Cached batches read in process, then resumed with two workers reading the cache: the batches
  tokenized on the fly. The state does not depend on the workers (tests/data/test_workers.py), so
  the first leg runs in process: a worker start less."""
  cached = cfg.replace(cache=True, cache_dir=str(tmp_path), num_workers=2)
  # Built in process: 2 worker starts less.
  cache.open_cache(cached.replace(num_workers=0), sources.DataSource.of(cached), tok)
  want, _ = _take(cfg, tok, 12)  # in process, tokenizing on the fly
  it = pipeline.train_iterator(cached.replace(num_workers=0), sources.DataSource.of(cached), tok)
  try:
    first = [next(it) for _ in range(5)]
    state = it.get_state()
  finally:
    it.close()
  resumed = pipeline.train_iterator(cached, sources.DataSource.of(cached), tok)
  try:
    resumed.set_state(state)
    rest = [next(resumed) for _ in range(7)]
  finally:
    resumed.close()
  assert testlib.same_batches(first + rest, want)


@pytest.mark.parametrize("n,epochs", [(1000, None), (1000, 3), (300, 1), (7, 2)])
def test_shuffled_positions_are_grains_shuffle(n, epochs):
  positions = pipeline.ShuffledPositions(n, seed=5, chunk_size=128, num_epochs=epochs)
  grain_chunks = grain.MapDataset.range(n).shuffle(seed=5)
  if epochs != 1:
    grain_chunks = grain_chunks.repeat(epochs)
  grain_chunks = grain_chunks.batch(128, batch_fn=list)
  count = len(grain_chunks) if epochs else 30  # 30 chunks of the endless stream: > 3 epochs
  assert (positions.num_chunks == len(grain_chunks)) if epochs else positions.num_chunks > 30
  for k in range(count):
    assert positions(k).tolist() == grain_chunks[k], k
