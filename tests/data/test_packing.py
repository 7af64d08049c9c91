"""Packed batches: layout (segments, positions, padding), no example split, tokens preserved."""

import collections

import grain
import numpy as np
import pytest

import tfm_data_testlib as testlib
from tfm.data import batching, cursor, packing, pipeline, sources
from conftest import MAX_LENGTH, ROWS


def _check_row_layout(batch):
  """Checks the flax-WMT packing convention on every row, independently of the packer."""
  for side in ("inputs", "targets"):
    tokens, seg, pos = (batch[side], batch[f"{side}_segmentation"], batch[f"{side}_position"])
    for row in range(tokens.shape[0]):
      n = int(np.count_nonzero(seg[row]))
      assert np.all(seg[row][:n] > 0) and np.all(seg[row][n:] == 0)  # padding only at the end
      assert np.all(tokens[row][n:] == 0) and np.all(pos[row][n:] == 0)
      assert np.all(tokens[row][:n] != 0)  # 0 is never a real token
      expected_seg, expected_pos = [], []
      ids = seg[row][:n]
      if n:
        boundaries = [0] + [i for i in range(1, n) if ids[i] != ids[i - 1]] + [n]
        for k, (a, b) in enumerate(zip(boundaries[:-1], boundaries[1:]), start=1):
          expected_seg += [k] * (b - a)
          expected_pos += list(range(b - a))
          assert tokens[row][b - 1] == 1  # each segment ends with EOS
      assert list(ids) == expected_seg and list(pos[row][:n]) == expected_pos


def _cursor_over(examples, chunk=7):
  def compact(part):
    return {"inputs": np.concatenate([e["inputs"] for e in part]),
            "targets": np.concatenate([e["targets"] for e in part]),
            "inputs_length": np.array([len(e["inputs"]) for e in part], np.int32),
            "targets_length": np.array([len(e["targets"]) for e in part], np.int32),
            "status": np.zeros(len(part), np.int32), "truncated": np.zeros(len(part), np.int32)}
  chunks = [compact(examples[i:i + chunk]) for i in range(0, len(examples), chunk)]
  return cursor.ExampleCursor(iter(grain.MapDataset.source(chunks).to_iter_dataset()))


def test_pack_synthetic_examples():
  rng = np.random.default_rng(0)
  lengths = [(int(a), int(b)) for a, b in rng.integers(1, 11, size=(60, 2))]
  examples = [{"inputs": np.array(list(range(100 + i * 10, 100 + i * 10 + a - 1)) + [1], np.int32),
               "targets": np.array([7] * (b - 1) + [1], np.int32)}
              for i, (a, b) in enumerate(lengths)]
  batches = list(packing.PackedBatcher(_cursor_over(examples), rows=4, length=12))
  for batch in batches:
    assert set(batch) == set(batching.BATCH_KEYS)
    assert batch["inputs"].shape == (4, 12) and batch["inputs"].dtype == np.int32
    _check_row_layout(batch)
  got = [pair for b in batches
         for pair in zip(testlib.segments(b, "inputs"), testlib.segments(b, "targets"))]
  want = [(tuple(e["inputs"].tolist()), tuple(e["targets"].tolist())) for e in examples]
  assert collections.Counter(got) == collections.Counter(want)
  # First fit, in order: each batch's first example is the one that did not fit the previous
  # batch, and within a row, examples keep stream order.
  order = {pair: i for i, pair in enumerate(want)}
  firsts = [order[next(zip(testlib.segments(b, "inputs"), testlib.segments(b, "targets")))]
            for b in batches]
  assert firsts == sorted(firsts) and firsts[0] == 0


def test_pack_first_fit_by_hand():
  sizes = [(6, 2), (5, 2), (3, 9), (2, 2), (7, 2)]
  examples = [{"inputs": np.array([5] * (a - 1) + [1], np.int32),
               "targets": np.array([6] * (b - 1) + [1], np.int32)} for a, b in sizes]
  first, second = list(packing.PackedBatcher(_cursor_over(examples), rows=2, length=10))
  # Batch 1: ex0 -> row 0 (free 4, 8); ex1 -> row 1 (free 5, 8); ex2 (3, 9) fits no row's
  # targets, so batch 1 closes. Batch 2: ex2 -> row 0 (free 7, 1); ex3 (2, 2) -> row 1
  # (row 0 lacks target room); ex4 (7, 2) -> row 1 (free 8, 8 before it).
  seg_in, seg_tgt = first["inputs_segmentation"].tolist(), first["targets_segmentation"].tolist()
  assert seg_in == [[1] * 6 + [0] * 4, [1] * 5 + [0] * 5]
  assert seg_tgt == [[1, 1] + [0] * 8, [1, 1] + [0] * 8]
  assert second["inputs_segmentation"].tolist() == [[1] * 3 + [0] * 7,
                                                    [1, 1, 2, 2, 2, 2, 2, 2, 2, 0]]
  assert second["targets_segmentation"].tolist() == [[1] * 9 + [0],
                                                     [1, 1, 2, 2, 0, 0, 0, 0, 0, 0]]
  assert second["inputs_position"].tolist()[1] == [0, 1, 0, 1, 2, 3, 4, 5, 6, 0]
  assert second["inputs"].tolist()[1] == [5, 1, 5, 5, 5, 5, 5, 5, 1, 0]


def test_one_epoch_preserves_every_train_pair(cfg, tok):
  it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, num_epochs=1)
  batches = list(it)
  assert all(b["inputs"].shape == (ROWS, MAX_LENGTH) for b in batches)
  for batch in batches:
    _check_row_layout(batch)
  got = collections.Counter(
      pair for b in batches for pair in zip(testlib.segments(b, "inputs"),
                                            testlib.segments(b, "targets")))
  train = [p for ref, p in testlib.clean_pairs().items() if testlib.expected_split(ref) == "train"]
  want = collections.Counter()
  for src, tgt in train:
    fit = [ids if len(ids) <= MAX_LENGTH else ids[:MAX_LENGTH - 1] + [1]
           for ids in (tok.encode(src), tok.encode(tgt))]
    want[tuple(fit[0]), tuple(fit[1])] += 1
  assert got == want

  real_in = sum(int(np.count_nonzero(b["inputs_segmentation"])) for b in batches)
  real_tgt = sum(int(np.count_nonzero(b["targets_segmentation"])) for b in batches)
  slots = len(batches) * ROWS * MAX_LENGTH
  stats = it.stats()
  assert stats["inputs_efficiency"] == real_in / slots
  assert stats["targets_efficiency"] == real_tgt / slots
  assert real_in == sum(len(k[0]) * v for k, v in want.items())
  assert stats["examples_kept"] == len(train) and stats["batches"] == len(batches)
  assert 0.5 < stats["inputs_efficiency"] <= 1.0


def test_bucketed_batches_are_refused_on_several_hosts(cfg, tok):
  """Each host would fill its buckets from its own shard and pick its own bucket length for a step
  (host 0 [6, 32] while host 1 gives [4, 48]): the step's global batch could not be assembled."""
  with pytest.raises(ValueError, match=r"data\.packing=False .* not 2"):
    pipeline.train_iterator(cfg.replace(packing=False), sources.DataSource.of(cfg), tok,
                            process_index=1, process_count=2)


def test_bucketed_batches_shapes_and_content(cfg, tok):
  cfg = cfg.replace(packing=False)
  it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, num_epochs=1)
  batches = list(it)
  boundaries = batching.bucket_boundaries(MAX_LENGTH)
  shapes = {b["inputs"].shape for b in batches}
  assert {s[1] for s in shapes} <= set(boundaries)
  for b in batches:
    length = b["inputs"].shape[1]
    assert b["inputs"].shape[0] == cfg.tokens_per_batch // length  # rows ~ token budget / length
    _check_row_layout(b)
    assert np.all(b["inputs_segmentation"] <= 1)  # unpacked: one example per row
  got = collections.Counter(
      pair for b in batches for pair in zip(testlib.segments(b, "inputs"),
                                            testlib.segments(b, "targets")))
  assert sum(got.values()) == it.stats()["examples_kept"]
  train = sum(1 for ref in testlib.clean_pairs() if testlib.expected_split(ref) == "train")
  assert sum(got.values()) == train


def test_bucket_boundaries_and_rows(cfg):
  for max_length in (8, 48, 100, 256):
    b = batching.bucket_boundaries(max_length)
    assert b[-1] == max_length and b == sorted(set(b))
    assert all(y <= 1.5 * x for x, y in zip(b[:-1], b[1:]))
  assert len(batching.bucket_boundaries(256)) <= 12  # a bounded number of jit shapes
  assert batching.host_rows(cfg, 2) == ROWS // 2
  assert batching.bucket_rows(cfg, 12, 2) == (cfg.tokens_per_batch // 12) // 2
  # Buckets on 2 hosts feeding a step that splits the batch 6 ways (3 shards x 2 microbatches):
  # global rows = the smallest multiple of lcm(2, 6) = 6 that holds the token budget's rows.
  for boundary in batching.bucket_boundaries(MAX_LENGTH):
    global_rows = 2 * batching.bucket_rows(cfg, boundary, 2, row_multiple=6)
    assert global_rows % 6 == 0 and 0 <= global_rows - cfg.tokens_per_batch // boundary < 6
  # More batch shards than the budget has rows: one row per shard, not an error.
  assert batching.bucket_rows(cfg, MAX_LENGTH, 1, row_multiple=cfg.tokens_per_batch) == (
      cfg.tokens_per_batch)


@pytest.mark.parametrize("hosts, multiple, rows", [
    (1, 1, ROWS), (2, 4, ROWS), (1, 3, 9), (2, 3, 12), (1, 64, 64), (4, 256, 256)])
def test_packed_rows_round_up_to_split(cfg, hosts, multiple, rows):
  # ROWS = 8 rows of the token budget, rounded up to a multiple of the hosts and of the step's
  # batch shards x microbatches (the paper's 96 rows on 64 shards run as 128).
  assert batching.global_rows(cfg, hosts, multiple) == rows
  assert batching.host_rows(cfg, hosts, multiple) * hosts == rows
  note = batching.rows_note(cfg, hosts, multiple, f"{multiple} batch shards")
  if rows == ROWS:
    assert note is None
  else:
    assert note.startswith(f"data.tokens_per_batch={cfg.tokens_per_batch} gives {ROWS} rows of "
                           f"data.max_length={MAX_LENGTH}; rounded up to {rows} rows "
                           f"({rows * MAX_LENGTH} tokens) to split over {multiple} batch shards")
  paper = cfg.replace(tokens_per_batch=24576, max_length=256)  # 96 rows
  assert batching.global_rows(paper, 1, 64) == 128 and batching.global_rows(paper, 1, 32) == 96


def test_packed_batches_have_the_rounded_rows(cfg, tok):
  batches = list(pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, num_epochs=1,
                                         row_multiple=3))
  assert batches and all(b["inputs"].shape == (9, MAX_LENGTH) for b in batches)


def test_bucketed_batches_split_over_the_step(cfg, tok):
  cfg = cfg.replace(packing=False)
  batches = list(pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, num_epochs=1,
                                         row_multiple=5))
  assert batches and all(b["inputs"].shape[0] % 5 == 0 for b in batches)  # budgets: 48, 32, 24 rows...
