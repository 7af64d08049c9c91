"""Eval batches and text pairs: complete, ordered, subset-limited, equal batch counts per host."""

import collections

import numpy as np
import pytest
import tensorflow_datasets as tfds

import tfm_data_testlib as testlib
from tfm.data import pipeline, sources
from conftest import MAX_LENGTH, ROWS


def _dev_in_order(cfg):
  ds = tfds.data_source(cfg.dataset, split="validation", data_dir=cfg.data_dir, download=False)
  return [(ds[i]["en"].decode(), ds[i]["es"].decode()) for i in range(len(ds))]


def _segments(batches):
  return [pair for b in batches
          for pair in zip(testlib.segments(b, "inputs"), testlib.segments(b, "targets"))]


def test_eval_batches_cover_dev_in_order(cfg, tok):
  dev = _dev_in_order(cfg)
  assert set(dev) == {p for ref, p in testlib.clean_pairs().items()
                      if testlib.expected_split(ref) == "validation"}
  batches = pipeline.eval_batches(cfg, sources.DataSource.of(cfg), tok, "dev")
  assert all(b["inputs"].shape == (ROWS, MAX_LENGTH) for b in batches)
  assert all(np.all(b["inputs_segmentation"] <= 1) for b in batches)
  want = [tuple(tuple(ids if len(ids) <= MAX_LENGTH else ids[:MAX_LENGTH - 1] + [1])
                for ids in (tok.encode(s), tok.encode(t))) for s, t in dev]
  assert _segments(batches) == want
  assert pipeline.eval_text_pairs(cfg, sources.DataSource.of(cfg), "dev") == dev


def test_eval_max_examples(cfg, tok):
  cfg = cfg.replace(eval_max_examples=5)
  dev = _dev_in_order(cfg)[:5]
  assert pipeline.eval_text_pairs(cfg, sources.DataSource.of(cfg), "dev") == dev
  batches = pipeline.eval_batches(cfg, sources.DataSource.of(cfg), tok, "dev")
  assert [tok.decode(s) for s, _ in _segments(batches)] == [
      s for s, _ in dev]


def test_eval_hosts_disjoint_complete_same_batch_count(cfg, tok):
  cfg = cfg.replace(tokens_per_batch=MAX_LENGTH * 4)  # 2 rows per host, several batches
  per_host = [pipeline.eval_batches(cfg, sources.DataSource.of(cfg), tok, "test", process_index=i,
                                    process_count=2)
              for i in range(2)]
  assert len(per_host[0]) == len(per_host[1]) > 1
  assert all(b["inputs"].shape == (2, MAX_LENGTH) for h in per_host for b in h)
  segs = [collections.Counter(_segments(h)) for h in per_host]
  assert not set(segs[0]) & set(segs[1])
  everything = collections.Counter(
      _segments(pipeline.eval_batches(cfg, sources.DataSource.of(cfg), tok, "test")))
  assert segs[0] + segs[1] == everything


def test_a_dev_set_with_no_target_left_to_score_is_refused(cfg, tok):
  """Every dev pair longer than data.max_length, filtered: DevLoss (built before the first step, or
  by `tfm eval`) refuses in one line naming the keys, where it printed tokens 0 and perplexity 1.0
  (exp(0 / 0) from the sums). A pair that fits is scored."""
  import jax  # pylint: disable=import-outside-toplevel
  from tfm.eval.dev_loss import DevLoss  # pylint: disable=import-outside-toplevel
  sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  source = sources.DataSource.of(cfg)
  short = cfg.replace(max_length=3, overlong="filter", eval_max_examples=4)
  assert not any(b["targets_segmentation"].any()
                 for b in pipeline.eval_batches(short, source, tok, "dev"))
  with pytest.raises(ValueError, match=r"^evaluation set 'dev': its first 4 pairs "
                     r"\(data.eval_max_examples\) leave no target piece to score, each longer than "
                     r"data.max_length=3 \(data.overlong='filter'; 'truncate' keeps it\); "
                     r"expected at least one$"):
    DevLoss(short, source, tok, None, sharding)
  scored = DevLoss(short.replace(overlong="truncate"), source, tok, None, sharding)
  assert sum(int(b["targets_segmentation"].sum()) for b in scored.batches) == 4 * 3
