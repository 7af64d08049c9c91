"""Device prefetch: same batches as the host iterator, as jax arrays; resumable state; the
pipeline's figures as of the batches handed out, not those read ahead."""

import time

import jax
import numpy as np
import pytest

from tfm.data import pipeline, prefetch, sources


def test_prefetch_matches_host_batches_and_resumes(cfg, tok):
  sharding = jax.sharding.NamedSharding(
      jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",)),
      jax.sharding.PartitionSpec("data"))
  host = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  expected = [next(host) for _ in range(6)]
  device_it = prefetch.prefetch_to_device(
      pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok), sharding, size=2)
  got = [next(device_it) for _ in range(3)]
  for g, e in zip(got, expected):
    assert g.keys() == e.keys()
    for key in e:
      assert isinstance(g[key], jax.Array) and g[key].sharding == sharding
      np.testing.assert_array_equal(np.asarray(g[key]), e[key])
  state = device_it.get_state()  # after 3 consumed batches, although more were prefetched
  time.sleep(0.5)  # the thread has read its batches ahead by now
  reference = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  for _ in range(3):
    next(reference)
  assert device_it.stats() == reference.stats()  # the data/ figures logged after step 3
  device_it.close()
  resumed = pipeline.train_iterator(cfg, sources.DataSource.of(cfg), tok)
  resumed.set_state(state)
  for e in expected[3:]:
    b = next(resumed)
    assert all(np.array_equal(b[k], e[k]) for k in e)


def test_prefetch_propagates_end_and_errors():
  sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  batches = [{"inputs": np.full((2, 3), i, np.int32)} for i in range(3)]
  out = list(prefetch.prefetch_to_device(iter(batches), sharding))
  assert [int(b["inputs"][0, 0]) for b in out] == [0, 1, 2]

  def broken():
    yield batches[0]
    raise RuntimeError("reader failed")

  it = prefetch.prefetch_to_device(broken(), sharding)
  next(it)
  with pytest.raises(RuntimeError, match="reader failed"):
    next(it)


def test_prefetch_stats_before_the_first_batch_are_the_wrapped_iterators():
  class Counting:
    def __init__(self):
      self.n = 0
    def __iter__(self):
      return self
    def __next__(self):
      self.n += 1
      return {"inputs": np.full((2, 3), self.n, np.int32)}
    def stats(self):
      return {"batches": self.n}

  sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  it = prefetch.prefetch_to_device(Counting(), sharding, size=2)
  time.sleep(0.3)  # three batches read ahead
  assert it.stats() == {"batches": 0}
  next(it)
  next(it)
  assert it.stats() == {"batches": 2}
  it.close()
  with pytest.raises(TypeError, match="no stats"):
    prefetch.prefetch_to_device(iter([]), sharding).stats()
