"""Worker processes (data.num_workers): the same batches and the same resumable state as in-process."""

import json

import grain
import pytest

import tfm_data_testlib as testlib
from tfm.data import pipeline, sources, workers


def _take(it, n):
  return [next(it) for _ in range(n)]


def _batches(cfg, tok, n, state=None, state_after=None):
  """(n batches, the state after them); with state_after=k also the state after the first k."""
  it = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  try:
    if state is not None:
      it.set_state(state)
    if state_after is None:
      return _take(it, n), it.get_state()
    first = _take(it, state_after)
    middle = it.get_state()
    return first + _take(it, n - state_after), it.get_state(), middle
  finally:
    it.close()


def test_stream_starts_at_any_chunk_for_any_worker_count():
  """In process from the start, then moved to a later chunk mid-stream; two worker processes moved
  the same way: set_state closes whatever runs, for any worker count, and the next next() starts
  afresh at the chunk asked for, round-robin to the end."""
  chunks = grain.MapDataset.range(50).shuffle(seed=3).batch(4, batch_fn=list)  # 13 chunks
  want = [chunks[i] for i in range(len(chunks))]
  in_process = workers.ChunkStream(chunks, num_workers=0)
  assert [next(in_process) for _ in range(5)] == want[:5]
  assert in_process.get_state() == {"next_index": 5}
  in_process.set_state({"next_index": 11})
  assert list(in_process) == want[11:] and in_process.get_state() == {"next_index": 13}
  stream = workers.ChunkStream(chunks, num_workers=2)
  try:
    assert [next(stream) for _ in range(2)] == want[:2]  # the workers run
    stream.set_state({"next_index": 5})  # drops them; the next next() starts them at chunk 5
    assert list(stream) == want[5:] and stream.get_state() == {"next_index": 13}
  finally:
    stream.close()
  with pytest.raises(ValueError, match="not a chunk position"):
    in_process.set_state({"iterators_in_use_states": []})


# The workers make chunks, whatever data.packing (pipeline.train_chunks); packed rows or length
# buckets are cut from them in the main process: [True] runs the workers' stream, and
# tests/data/test_determinism.py the bucketed batches in process.
@pytest.mark.parametrize("packing", [True, pytest.param(False, marks=pytest.mark.long)])
def test_two_workers_give_the_in_process_batches(cfg, tok, packing):
  cfg = cfg.replace(packing=packing)
  want, want_state, want_middle = _batches(cfg, tok, 12, state_after=5)
  got, got_state, got_middle = _batches(cfg.replace(num_workers=2), tok, 12, state_after=5)
  assert testlib.same_batches(got, want)
  # The checkpointed position does not depend on the workers, mid-chunk (packed: 5) or not.
  assert not packing or want_middle["batcher"]["offset"] > 0
  assert got_middle == want_middle and got_state == want_state


@pytest.mark.slow
def test_resume_mid_epoch_with_workers_is_exact(cfg, tok):
  """The state after 5 batches, taken in process (worker processes write the same one there:
  test_two_workers_give_the_in_process_batches), restored with two workers: the next 10 batches
  of the run never interrupted. A resumed run may change data.num_workers (tfm/train/workdir.py
  RESUMABLE_PREFIXES)."""
  reference = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  _take(reference, 5)
  state = reference.get_state()
  expected = _take(reference, 10)
  reference.close()
  assert state["batcher"]["offset"] > 0  # mid-chunk: the restore re-reads a partly used chunk
  state = json.loads(json.dumps(state))  # through a JSON checkpoint
  resumed, _ = _batches(cfg.replace(num_workers=2), tok, 10, state)
  assert testlib.same_batches(resumed, expected)


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
