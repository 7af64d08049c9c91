"""Beam search runs unchanged on a cache sharded along the batch (2 host devices, subprocess)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

# Also covers the tuple API of beam_search and the batch size derived from the cache.
SCRIPT = r"""
import functools
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tfm.decode import beam
from tests.decode.toy_models import PrefixToy, np_lp, np_sequence_logp

assert jax.device_count() == 2, jax.devices()
model = PrefixToy(11, 4, 6, eos_bias=np.linspace(-2, 2, 12))
mesh = Mesh(np.array(jax.devices()), ("data",))
cache = jax.device_put(model.init_cache(), NamedSharding(mesh, PartitionSpec("data")))
assert len(cache["table"].sharding.device_set) == 2
search = jax.jit(functools.partial(beam.beam_search, PrefixToy.tokens_to_logits, beam_size=4,
                                   alpha=0.6, max_decode_len=12))
seqs, scores = jax.tree.map(np.asarray, search(cache))
assert seqs.shape == (4, 4, 12) and scores.shape == (4, 4)
for row in range(4):
  assert np.all(np.diff(scores[row]) <= 0)
  for i in range(4):
    seq = tuple(int(x) for x in seqs[row, i])
    n = seq.index(1) + 1 if 1 in seq else 12
    assert not any(seq[n:])
    expect = np_sequence_logp(model, row, seq[:n]) / np_lp(n, 0.6)
    assert abs(scores[row, i] - expect) < 1e-5 * abs(expect), (row, i, scores[row, i], expect)
print("OK")
"""


def test_sharded_cache():
  root = pathlib.Path(__file__).resolve().parents[2]
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
             JAX_PLATFORMS="cpu", PYTHONPATH=str(root))
  proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=root, env=env, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
