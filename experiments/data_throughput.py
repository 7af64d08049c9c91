"""Input pipeline throughput on this host: examples/s, tokens/s and packing efficiency.

Builds the offline Bible corpus if needed (array_record), trains/loads the vocabulary, then
times `train_iterator` (one host's share) after a warm-up, optionally through the device
prefetcher. Example:

  .venv/bin/python experiments/data_throughput.py --max_length 128 --tokens_per_batch 8192
  .venv/bin/python experiments/data_throughput.py --bucketed --num_workers 2

Real tokens are non-pad tokens (inputs + targets); slots are all [rows, length] positions.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def parse_args():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--dataset", default="bible_translate/web-sparv")
  p.add_argument("--source_lang", default="en")
  p.add_argument("--target_lang", default="es")
  p.add_argument("--data_dir", default=None, help="TFDS data dir (default: TFDS default)")
  p.add_argument("--workdir", default="/tmp/tfm_data_throughput", help="vocab cache dir")
  p.add_argument("--vocab_size", type=int, default=8000)
  p.add_argument("--max_length", type=int, default=128)
  p.add_argument("--tokens_per_batch", type=int, default=8192)
  p.add_argument("--bucketed", action="store_true", help="length-bucketed instead of packed")
  p.add_argument("--overlong", default="filter", choices=("filter", "truncate"))
  p.add_argument("--num_workers", type=int, default=0)
  p.add_argument("--num_batches", type=int, default=100)
  p.add_argument("--device_prefetch", action="store_true",
                 help="also pull the batches through prefetch_to_device (CPU device here)")
  return p.parse_args()


def make_config(args):
  from tfm.data.config import DataConfig  # pylint: disable=import-outside-toplevel
  return DataConfig(dataset=args.dataset, source_lang=args.source_lang, target_lang=args.target_lang,
                    data_dir=args.data_dir, vocab_size=args.vocab_size, vocab_dir=args.workdir,
                    max_length=args.max_length, tokens_per_batch=args.tokens_per_batch,
                    packing=not args.bucketed, overlong=args.overlong,
                    num_workers=args.num_workers)


def main():
  args = parse_args()
  from tfm import data  # pylint: disable=import-outside-toplevel
  cfg = make_config(args)
  t0 = time.perf_counter()
  data.prepare(cfg)
  t1 = time.perf_counter()
  tok = data.get_tokenizer(cfg, args.workdir)
  t2 = time.perf_counter()
  print(f"prepare: {t1 - t0:.1f}s  vocab ({tok.vocab_size} pieces): {t2 - t1:.1f}s")

  it = data.train_iterator(cfg, tok)
  batches = it
  if args.device_prefetch:
    import jax  # pylint: disable=import-outside-toplevel
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    batches = data.prefetch_to_device(it, sharding, size=2)
  first = next(batches)  # warm-up: worker start, first fill of the read-ahead buffers
  shapes = {k: tuple(v.shape) for k, v in first.items()}
  real = slots = examples = 0
  start = time.perf_counter()
  for _ in range(args.num_batches):
    batch = next(batches)
    examples += int(np.asarray(batch["inputs_segmentation"]).max(axis=1).sum())  # segments
    for side in ("inputs", "targets"):
      seg = np.asarray(batch[f"{side}_segmentation"])
      real += int(np.count_nonzero(seg))
      slots += seg.size
  elapsed = time.perf_counter() - start
  after = it.stats()
  mode = "bucketed" if args.bucketed else "packed"
  print(f"{cfg.dataset} {mode} max_length={cfg.max_length} tokens_per_batch="
        f"{cfg.tokens_per_batch} num_workers={cfg.num_workers} first batch shapes {shapes}")
  print(f"{args.num_batches} batches in {elapsed:.2f}s: {args.num_batches / elapsed:.1f} batches/s, "
        f"{examples / elapsed:,.0f} examples/s, {real / elapsed:,.0f} real tokens/s "
        f"(inputs+targets), {slots / elapsed:,.0f} token slots/s")
  print(f"packing efficiency (whole run): inputs {after['inputs_efficiency']:.3f}, targets "
        f"{after['targets_efficiency']:.3f}; over timed batches {real / slots:.3f}")
  print("counters:", {k: after[k] for k in ("examples_read", "examples_kept", "skipped_empty",
                                            "skipped_non_utf8", "filtered_overlong", "truncated")})
  if args.device_prefetch:
    batches.close()
  it.close()


if __name__ == "__main__":
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  main()
