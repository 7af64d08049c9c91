"""One host of the 2-process mixture test (run as a script by test_mixture.py).

argv: process_id port config.json out.json. Joins a 2-process JAX CPU cluster, reads 12 train
batches of a mixture straight, and again as 5 batches, the state saved as JSON, and 7 of a new
iterator restored from it; writes whether they matched, the texts read and the per-source counts.
"""

import json
import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import multihost_worker  # noqa: E402  (this folder: the script's own)
import numpy as np  # noqa: E402


def main():
  cfg, out_path = multihost_worker.join(sys.argv)
  from tfm.data import pipeline, sources, vocabulary  # pylint: disable=import-outside-toplevel
  source = sources.DataSource.of(cfg)
  tok = vocabulary.get_tokenizer(cfg, None, source=source)
  keywords = dict(process_index=jax.process_index(), process_count=jax.process_count())
  it = pipeline.train_iterator(cfg, source, tok, **keywords)
  straight = [next(it) for _ in range(12)]
  stats = it.stats()
  it.close()
  it = pipeline.train_iterator(cfg, source, tok, **keywords)
  first = [next(it) for _ in range(5)]
  state = json.loads(json.dumps(it.get_state()))
  it.close()
  it = pipeline.train_iterator(cfg, source, tok, **keywords)
  it.set_state(state)
  rest = [next(it) for _ in range(7)]
  it.close()
  same = all(np.array_equal(a[k], b[k]) for a, b in zip(straight, first + rest) for k in a)
  texts = [tok.decode(b["inputs"][r][b["inputs_segmentation"][r] == s])
           for b in straight for r in range(b["inputs"].shape[0])
           for s in np.unique(b["inputs_segmentation"][r]) if s]
  with open(out_path, "w", encoding="utf-8") as f:
    json.dump({"index": jax.process_index(), "same": same, "texts": texts, "stats": stats}, f)
  jax.distributed.shutdown()


if __name__ == "__main__":
  main()
