"""One host of the 2-process sharding test (run as a script by test_multihost.py).

argv: process_id port config.json out.json. Joins a 2-process JAX CPU cluster, reads one epoch
of its train shard and its eval share, puts one batch on the global mesh, writes what it read.
"""

import json
import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import numpy as np  # noqa: E402


def segments(batch, side):
  tokens, seg = batch[side], batch[f"{side}_segmentation"]
  for row in range(tokens.shape[0]):
    for segment_id in np.unique(seg[row]):
      if segment_id:
        yield [int(t) for t in tokens[row][seg[row] == segment_id]]


def join(argv):
  """(the DataConfig of config.json, out.json's path) of argv `process_id port config.json
  out.json`, once this process has joined the 2-process cluster (coordinator on 127.0.0.1:port)."""
  process_id, port, config_path, out_path = argv[1:5]
  jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                             process_id=int(process_id), initialization_timeout=60)
  from tfm.data.config import DataConfig  # pylint: disable=import-outside-toplevel
  with open(config_path, encoding="utf-8") as f:
    return DataConfig(**json.load(f)), out_path


def main():
  cfg, out_path = join(sys.argv)
  from tfm.data import pipeline, prefetch, sources, vocabulary  # pylint: disable=import-outside-toplevel
  tok = vocabulary.get_tokenizer(cfg, None, source=sources.DataSource.of(cfg))
  index, count = jax.process_index(), jax.process_count()
  source = sources.DataSource.of(cfg)
  it = pipeline.train_iterator(cfg, source, tok, process_index=index, process_count=count,
                               num_epochs=1)
  batches = list(it)
  train = [[a, b] for batch in batches
           for a, b in zip(segments(batch, "inputs"), segments(batch, "targets"))]
  dev = pipeline.eval_batches(cfg, source, tok, "dev", process_index=index, process_count=count)
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
  sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
  global_batch = next(prefetch.prefetch_to_device(iter(batches[:1]), sharding))
  local = [np.asarray(s.data) for s in global_batch["inputs"].addressable_shards]
  with open(out_path, "w", encoding="utf-8") as f:
    json.dump({"index": index, "count": count, "train": train, "num_dev_batches": len(dev),
               "global_shape": list(global_batch["inputs"].shape),
               "local_matches": bool(np.array_equal(np.concatenate(local), batches[0]["inputs"]))},
              f)
  jax.distributed.shutdown()


if __name__ == "__main__":
  main()
