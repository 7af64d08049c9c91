"""Per-host shards: HostShard is the split's strided slice; 2 real JAX processes read disjoint
shards that together are the whole train split."""

import collections
import dataclasses
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import tfm_data_testlib as testlib

from tfm.data import sources
from tfm.data.host_shard import HostShard

WORKER = os.path.join(os.path.dirname(__file__), "multihost_worker.py")


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def run_two_hosts(worker: str, config_path, tmp_path, timeout: int = 120) -> list[dict]:
  """Runs `worker HOST PORT CONFIG OUT` as JAX processes 0 and 1 on the CPU (a jax.distributed
  coordinator on 127.0.0.1) and returns each host's JSON output, in host order."""
  port = _free_port()
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
  procs = [subprocess.Popen([sys.executable, worker, str(i), str(port), str(config_path),
                             str(tmp_path / f"host{i}.json")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
           for i in range(2)]
  for p in procs:
    out, _ = p.communicate(timeout=timeout)
    assert p.returncode == 0, out.decode()[-3000:]
  return [json.loads((tmp_path / f"host{i}.json").read_text()) for i in range(2)]


def test_two_processes_read_disjoint_complete_shards(cfg, tok, tmp_path):
  config_path = tmp_path / "data_config.json"
  config_path.write_text(json.dumps(dataclasses.asdict(cfg)))
  hosts = run_two_hosts(WORKER, config_path, tmp_path)
  assert [h["index"] for h in hosts] == [0, 1] and all(h["count"] == 2 for h in hosts)
  reads = [collections.Counter((tuple(a), tuple(b)) for a, b in h["train"]) for h in hosts]
  assert reads[0] and reads[1] and not set(reads[0]) & set(reads[1])
  want = collections.Counter()
  for ref, (src, tgt) in testlib.clean_pairs().items():
    if testlib.expected_split(ref) == "train":
      ids = [tok.encode(src), tok.encode(tgt)]
      want[tuple(tuple(x if len(x) <= cfg.max_length else x[:cfg.max_length - 1] + [1])
                 for x in ids)] += 1
  assert reads[0] + reads[1] == want
  assert hosts[0]["num_dev_batches"] == hosts[1]["num_dev_batches"]
  rows = cfg.tokens_per_batch // cfg.max_length
  assert all(h["global_shape"] == [rows, cfg.max_length] and h["local_matches"] for h in hosts)


def test_host_shards_are_the_splits_strided_slices(cfg):
  """HostShard(split, i, n, limit) is split[:limit][i::n] whichever way it is read, so the train
  shards, the eval shards and the token cache's shard agree; a host outside the count is refused."""
  source = sources.DataSource.of(cfg).open("train")
  everything = [source[i] for i in range(len(source))]
  for count, limit in ((1, None), (3, None), (3, 7), (4, len(source) + 5)):
    shards = [HostShard(source, i, count, limit) for i in range(count)]
    for i, shard in enumerate(shards):
      want = everything[:limit][i::count]
      assert len(shard) == len(want) and [shard[p] for p in range(len(shard))] == want
      assert shard(np.arange(len(shard))[::-1]) == want[::-1]  # batched reads, any order
    assert sum(len(s) for s in shards) == len(everything[:limit])
  with pytest.raises(ValueError, match=r"process_index=2 must be in \[0, process_count=2\)"):
    HostShard(source, 2, 2)
