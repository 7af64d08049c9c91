"""BatchProcess: pipeline.train_iterator's batches made in a spawned process, the same to the bit,
with the same checkpointable states, resumable from either side."""

import pytest

import tfm_data_testlib as testlib
from tfm.data import pipeline, sources
from tfm.data.batch_process import BatchProcess, BatchProcessError


def _take(it, n):
  batches, states = [], []
  for _ in range(n):
    batches.append(next(it))
    states.append(it.get_state())
  return batches, states


def test_the_process_gives_the_in_process_batches_and_states(cfg, tok):
  """6 batches in order, each with the state after it; then a fresh BatchProcess set to the state
  after batch 2 (written by the in-process iterator) has its stats before a batch is taken and
  gives batches 3-6 again, and an in-process
  iterator set to the process's state after batch 4 gives 5 and 6."""
  reference = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  try:
    want, want_states = _take(reference, 2)
    stats_after_2 = reference.stats()
    more, more_states = _take(reference, 4)
    want, want_states = want + more, want_states + more_states
    want_stats = reference.stats()
  finally:
    reference.close()
  process = BatchProcess(cfg, sources.DataSource.of(cfg), tok)
  try:
    assert process.get_state() is None  # nothing taken yet
    got, got_states = _take(process, 6)
    assert process.stats() == want_stats
    process.set_state(want_states[1])
    # A resume's owed evaluation logs the data/ figures before the first batch: the state's.
    assert process.stats() == stats_after_2
    again, _ = _take(process, 4)
  finally:
    process.close()
  assert testlib.same_batches(got, want) and got_states == want_states
  assert testlib.same_batches(again, want[2:])
  resumed = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  try:
    resumed.set_state(got_states[3])
    assert testlib.same_batches(_take(resumed, 2)[0], want[4:])
  finally:
    resumed.close()


def test_an_error_in_the_process_reaches_the_caller(cfg, tok, tmp_path):
  """A data directory without the dataset: the process's exception, with its traceback, is raised
  by next(), and the iterator is finished."""
  empty = cfg.replace(data_dir=str(tmp_path / "empty"))
  process = BatchProcess(empty, sources.DataSource.of(empty), tok)
  try:
    with pytest.raises(BatchProcessError, match="the batch process failed"):
      next(process)
    with pytest.raises(StopIteration):
      next(process)
  finally:
    process.close()


def test_a_sigterm_to_the_process_group_leaves_the_batches_coming(cfg, tok):
  """A TERM to every process of the group (SLURM's proctrack/pgid, `kill -TERM -PGID`) reaches the
  batch process too; the training process trains on to the step its hosts agree to save at, so
  the batches must keep coming: the process ignores TERM and INT, and close() still ends it."""
  import os  # pylint: disable=import-outside-toplevel
  import signal  # pylint: disable=import-outside-toplevel
  reference = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  try:
    want, _ = _take(reference, 8)
  finally:
    reference.close()
  process = BatchProcess(cfg, sources.DataSource.of(cfg), tok, ahead=1)
  try:
    got, _ = _take(process, 2)
    for sig in (signal.SIGTERM, signal.SIGINT):
      os.kill(process._process.pid, sig)  # pylint: disable=protected-access
    more, _ = _take(process, 6)
    assert process._process.is_alive()  # pylint: disable=protected-access
  finally:
    process.close()
  assert process._process is None  # pylint: disable=protected-access
  assert testlib.same_batches(got + more, want)
