"""Worker processes (data.num_workers): the same batches and the same resumable state as in-process."""

import json

import grain
import pytest

import tfm_data_testlib as testlib
from tfm.data import pipeline, sources, workers


def _take(it, n):
  return [next(it) for _ in range(n)]


def _batches(cfg, tok, n, state=None):
  it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  try:
    if state is not None:
      it.set_state(state)
    return _take(it, n), it.get_state()
  finally:
    it.close()


def test_stream_starts_at_any_chunk_for_any_worker_count():
  chunks = grain.MapDataset.range(50).shuffle(seed=3).batch(4, batch_fn=list)  # 13 chunks
  want = [chunks[i] for i in range(len(chunks))]
  stream = workers.ChunkStream(chunks, num_workers=2)
  try:
    assert [next(stream) for _ in range(5)] == want[:5]
    assert stream.get_state() == {"next_index": 5}
    stream.set_state({"next_index": 11})
    assert list(stream) == want[11:]
  finally:
    stream.close()
  in_process = workers.ChunkStream(chunks, num_workers=0)
  in_process.set_state({"next_index": 11})
  assert list(in_process) == want[11:] and in_process.get_state() == {"next_index": 13}
  with pytest.raises(ValueError, match="not a chunk position"):
    in_process.set_state({"iterators_in_use_states": []})


@pytest.mark.parametrize("packing", [True, False])
def test_two_workers_give_the_in_process_batches(cfg, tok, packing):
  cfg = cfg.replace(packing=packing)
  want, want_state = _batches(cfg, tok, 12)
  got, got_state = _batches(cfg.replace(num_workers=2), tok, 12)
  assert testlib.same_batches(got, want)
  assert got_state == want_state  # the checkpointed position does not depend on the workers


@pytest.mark.slow
def test_resume_mid_epoch_with_workers_is_exact(cfg, tok):
  # In-process, never interrupted.
  reference = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  _take(reference, 5)
  expected = _take(reference, 10)
  reference.close()
  _, state = _batches(cfg.replace(num_workers=2), tok, 5)
  assert state["batcher"]["offset"] > 0  # mid-chunk: the restore re-reads a partly used chunk
  state = json.loads(json.dumps(state))  # through a JSON checkpoint
  resumed, _ = _batches(cfg.replace(num_workers=2), tok, 10, state)
  assert testlib.same_batches(resumed, expected)
  # A resumed run may change data.num_workers (tfm/train/workdir.py RESUMABLE_PREFIXES).
  in_process, _ = _batches(cfg, tok, 10, state)
  assert testlib.same_batches(in_process, expected)


def test_a_sigterm_to_the_process_group_leaves_the_workers_reading(cfg, tok):
  """A TERM (and an INT) to every process of the group reaches the worker processes too; the
  training process trains on to the step its hosts agree to save at, so the chunks must keep
  coming, the same as without the signal, and close() still ends the workers."""
  import multiprocessing  # pylint: disable=import-outside-toplevel
  import os  # pylint: disable=import-outside-toplevel
  import signal  # pylint: disable=import-outside-toplevel
  import time  # pylint: disable=import-outside-toplevel
  want, _ = _batches(cfg, tok, 10)
  it = pipeline.train_iterator(cfg.replace(num_workers=2), sources.DataSource.of(cfg), tok)
  try:
    got = _take(it, 2)
    deadline = time.monotonic() + 60  # on a loaded machine the second worker may start later
    while len(multiprocessing.active_children()) < 2 and time.monotonic() < deadline:
      time.sleep(0.1)
    children = multiprocessing.active_children()
    assert len(children) >= 2
    for sig in (signal.SIGTERM, signal.SIGINT):
      for child in children:
        os.kill(child.pid, sig)
    time.sleep(0.5)
    got += _take(it, 8)
    assert all(child.is_alive() for child in children)
  finally:
    it.close()
  assert testlib.same_batches(got, want)
  for child in children:
    child.join(timeout=10)
    assert not child.is_alive()
