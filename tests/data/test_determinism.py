"""One seed -> one batch sequence; epochs reshuffle; exact resumption from get_state()."""

import json

import numpy as np
import pytest

import tfm_data_testlib as testlib

from tfm.data import bucketing, pipeline, sources
from tfm.data.examples import chunk_examples


def _take(it, n):
  return [next(it) for _ in range(n)]


def _same(a, b):
  return len(a) == len(b) and all(
      x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


@pytest.mark.parametrize("packing", [True, False])
def test_same_seed_same_batches_different_seed_different(cfg, tok, packing):
  cfg = cfg.replace(packing=packing)
  first = _take(pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok), 6)
  assert _same(first, _take(pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok), 6))
  cfg = cfg.replace(shuffle_seed=1)
  assert not _same(first, _take(pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok), 6))


def test_each_epoch_is_a_new_permutation(cfg, tok):
  chunks = pipeline.train_chunks(cfg, sources.DataSource.of(cfg), tok, num_epochs=3)
  examples = [tuple(e["inputs"].tolist()) for chunk in chunks for e in chunk_examples(chunk)]
  n = len(examples) // 3
  epochs = [examples[e * n:(e + 1) * n] for e in range(3)]
  assert sorted(epochs[0]) == sorted(epochs[1]) == sorted(epochs[2])
  assert epochs[0] != epochs[1] and epochs[1] != epochs[2]


@pytest.mark.parametrize("packing", [True, False])
def test_resume_is_exact(cfg, tok, packing):
  cfg = cfg.replace(packing=packing)
  it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  _take(it, 5)
  state = json.loads(json.dumps(it.get_state()))  # must survive a JSON checkpoint
  assert len(json.dumps(state)) < 4096
  expected = _take(it, 40)  # runs past the end of the first epoch (~30 packed batches)
  expected_stats = it.stats()
  fresh = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  fresh.set_state(state)
  assert _same(_take(fresh, 40), expected)
  assert fresh.stats() == expected_stats


def test_infinite_stream_repeats_with_new_order(cfg, tok):
  it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  one_epoch = len(list(pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, num_epochs=1)))
  batches = _take(it, 2 * one_epoch + 2)
  assert not _same(batches[:3], batches[one_epoch:one_epoch + 3])
  train = sum(1 for ref in testlib.clean_pairs() if testlib.expected_split(ref) == "train")
  assert it.stats()["examples_read"] >= 2 * train


@pytest.mark.long  # its parts in the fast tier, with two workers: tests/data/test_workers.py::
# test_two_workers_give_the_in_process_batches (the in-process batches and states) and
# test_resume_mid_epoch_with_workers_is_exact (a resume with workers)
def test_worker_processes_same_data_and_resumable(cfg, tok):
  cfg = cfg.replace(num_workers=1)
  it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  try:
    _take(it, 3)
    state = json.loads(json.dumps(it.get_state()))
    expected = _take(it, 4)
  finally:
    it.close()
  fresh = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  try:
    fresh.set_state(state)
    assert _same(_take(fresh, 4), expected)
  finally:
    fresh.close()
  cfg = cfg.replace(num_workers=0)
  in_process = _take(pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok), 7)
  assert _same(in_process[3:], expected)  # one worker sees the same order as no worker


def test_bucketed_resume_refuses_a_window_cut_into_other_rows(cfg, tok):
  """Bucket rows follow the step's batch split (row_multiple): `emitted` batches of a window cut
  for 8-row batches are not the same examples as that many batches of a window cut for 5-row ones."""
  cfg = cfg.replace(packing=False)
  it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  start = json.loads(json.dumps(it.get_state()))
  _take(it, 3)
  mid_window = json.loads(json.dumps(it.get_state()))
  assert mid_window["batcher"]["emitted"] == 3 and mid_window["batcher"]["window"] == 0
  other_rows = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, row_multiple=5)
  with pytest.raises(bucketing.LayoutChanged, match=r"mesh\.\* and train\.microbatches"):
    other_rows.set_state(mid_window)
  other_rows.set_state(start)  # at a window's start nothing was cut yet: any rows continue it
  again = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, row_multiple=5)
  assert _same(_take(other_rows, 2), _take(again, 2))
  # At a window's end the state is the next window's start: other rows continue from there, as
  # an uninterrupted run with those rows does (windows are cut by token slots, not rows).
  def first_window(**kw):  # batches in window 0, read by a throwaway iterator
    it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, **kw)
    return len(it._batcher._read_window())  # pylint: disable=protected-access
  window = first_window()
  at_end = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  _take(at_end, window)
  boundary = json.loads(json.dumps(at_end.get_state()))
  assert (boundary["batcher"]["window"], boundary["batcher"]["emitted"]) == (1, 0)
  resumed = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, row_multiple=5)
  resumed.set_state(boundary)
  uninterrupted = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok, row_multiple=5)
  _take(uninterrupted, first_window(row_multiple=5))
  assert _same(_take(resumed, 3), _take(uninterrupted, 3))
  again = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  assert _same(_take(again, window + 2)[window:], _take(at_end, 2))
  # A state from before the layout was recorded is taken as it is.
  old = json.loads(json.dumps(mid_window))
  del old["batcher"]["layout"]
  same_rows = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  same_rows.set_state(old)
  assert _same(_take(same_rows, 2), _take(it, 2))
