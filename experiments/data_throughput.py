"""Input pipeline throughput on this host: real tokens/s per worker count, with or without the cache.

Builds the offline Bible corpus if needed (array_record), trains/loads the vocabulary, builds the
token cache (--cache; its build time is printed), then for each of --workers times
`train_iterator` (one host's share): a warm-up (worker start, first fills), then --repeats
windows of --num_batches batches; the median window and the range are printed. It also times
the two halves of the pipeline alone, for projecting to more cores:

  producer, 1 core:  chunks of encoded examples made in this process, one after another
                     (reading + SentencePiece without the cache, a gather of cached ids with it):
                     what one worker process delivers
  main process alone: the ExampleCursor + packer (or bucketer) on chunks already in memory: the
                     ceiling of one host whatever the number of workers

Examples (the paper's batch shape: 96 rows of 256 tokens, ~25k source + 25k target tokens):

  PYTHONPATH=. python experiments/data_throughput.py --cache --workers 0,1,2,4
  PYTHONPATH=. python experiments/data_throughput.py --workers 0,2 --bucketed

Real tokens are non-pad tokens (inputs + targets); slots are all [rows, length] positions.
"""

from __future__ import annotations

import argparse
import os
import statistics
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
  p.add_argument("--max_length", type=int, default=256)
  p.add_argument("--tokens_per_batch", type=int, default=24576)
  p.add_argument("--bucketed", action="store_true", help="length-bucketed instead of packed")
  p.add_argument("--overlong", default="filter", choices=("filter", "truncate"))
  p.add_argument("--cache", action="store_true", help="data.cache=True (the token cache)")
  p.add_argument("--cache_dir", default=None, help="data.cache_dir (default: under data_dir)")
  p.add_argument("--rebuild_cache", action="store_true",
                 help="delete this config's cache first, to time its build")
  p.add_argument("--workers", default="0", help="comma-separated data.num_workers values")
  p.add_argument("--build_workers", type=int, default=None,
                 help="data.num_workers building the cache (default: the largest of --workers)")
  p.add_argument("--num_batches", type=int, default=20, help="batches per timed window")
  p.add_argument("--repeats", type=int, default=5, help="timed windows per worker count")
  p.add_argument("--warmup", type=int, default=3, help="batches before timing")
  p.add_argument("--device_prefetch", action="store_true",
                 help="also pull the batches through prefetch_to_device (CPU device here)")
  return p.parse_args()


def make_config(args, num_workers=0):
  from tfm.data.config import DataConfig  # pylint: disable=import-outside-toplevel
  return DataConfig(dataset=args.dataset, source_lang=args.source_lang, target_lang=args.target_lang,
                    data_dir=args.data_dir, vocab_size=args.vocab_size, vocab_dir=args.workdir,
                    max_length=args.max_length, tokens_per_batch=args.tokens_per_batch,
                    packing=not args.bucketed, overlong=args.overlong, cache=args.cache,
                    cache_dir=args.cache_dir, num_workers=num_workers)


def real_tokens(batch) -> int:
  return sum(int(np.count_nonzero(np.asarray(batch[f"{side}_segmentation"])))
             for side in ("inputs", "targets"))


def children_cpu_seconds() -> float:
  """CPU seconds (user + system) used so far by this process's live descendants (Linux /proc)."""
  ticks, total, pending = os.sysconf("SC_CLK_TCK"), 0.0, [os.getpid()]
  while pending:
    pid = pending.pop()
    try:
      for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f:
          for child in f.read().split():
            pending.append(int(child))
            with open(f"/proc/{child}/stat", encoding="ascii") as stat:
              fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    except (FileNotFoundError, ProcessLookupError):
      continue
  return total


def time_pipeline(args, cfg, tok):
  """Median / min / max real tokens/s over the timed windows, real tokens per CPU second of the
  main process and of the worker processes (summed over the windows), the first batch's shapes.

  On a shared machine wall-clock rates depend on the other jobs; CPU seconds per token do much
  less, so they are what the projection to more cores uses."""
  from tfm import data  # pylint: disable=import-outside-toplevel
  it = data.train_iterator(cfg, data.DataSource.of(cfg), tok)
  batches = it
  if args.device_prefetch:
    import jax  # pylint: disable=import-outside-toplevel
    batches = data.prefetch_to_device(it, jax.sharding.SingleDeviceSharding(jax.devices()[0]))
  start = time.perf_counter()
  first = next(batches)
  first_s = time.perf_counter() - start
  for _ in range(args.warmup):
    next(batches)
  rates, examples_rates, slots = [], [], 0
  total_real, main_cpu, worker_cpu = 0, 0.0, 0.0
  for _ in range(args.repeats):
    real = examples = 0
    cpu, children = time.process_time(), children_cpu_seconds()
    start = time.perf_counter()
    for _ in range(args.num_batches):
      batch = next(batches)
      real += real_tokens(batch)
      examples += int(np.asarray(batch["inputs_segmentation"]).max(axis=1).sum())
      slots += 2 * np.asarray(batch["inputs_segmentation"]).size
    elapsed = time.perf_counter() - start
    main_cpu += time.process_time() - cpu
    worker_cpu += children_cpu_seconds() - children
    total_real += real
    rates.append(real / elapsed)
    examples_rates.append(examples / elapsed)
  stats = it.stats()
  if args.device_prefetch:
    batches.close()
  it.close()
  return {"median": statistics.median(rates), "min": min(rates), "max": max(rates),
          "examples": statistics.median(examples_rates), "first_s": first_s,
          "per_main_cpu": total_real / main_cpu,
          "per_worker_cpu": total_real / worker_cpu if worker_cpu else None,
          "shapes": {k: tuple(v.shape) for k, v in first.items()}, "stats": stats}


def time_halves(args, cfg, tok, num_chunks=60):
  """(producer real tokens/s on one core, main process alone real tokens/s)."""
  import grain  # pylint: disable=import-outside-toplevel
  # pylint: disable-next=import-outside-toplevel
  from tfm.data import bucketing, batching, cursor, packing, pipeline, sources
  chunks_ds = pipeline.train_chunks(cfg, sources.DataSource.of(cfg), tok, num_epochs=1)
  num_chunks = min(num_chunks, len(chunks_ds))
  start = time.perf_counter()
  chunks = [chunks_ds[i] for i in range(num_chunks)]
  produce_s = time.perf_counter() - start
  tokens = sum(int(c["inputs_length"][c["status"] == 0].sum() + c["targets_length"][c["status"] == 0].sum())
               for c in chunks)
  best = 0.0
  for _ in range(args.repeats):
    example_cursor = cursor.ExampleCursor(iter(grain.MapDataset.source(chunks).to_iter_dataset()))
    if cfg.packing:
      batcher = packing.PackedBatcher(example_cursor, batching.host_rows(cfg, 1), cfg.max_length)
    else:
      boundaries = batching.bucket_boundaries(cfg.max_length)
      batcher = bucketing.BucketBatcher(
          example_cursor, boundaries=boundaries,
          rows_for={b: batching.bucket_rows(cfg, b, 1) for b in boundaries},
          window_tokens=16 * cfg.tokens_per_batch, seed=0)
    start = time.perf_counter()
    real = sum(real_tokens(batch) for batch in batcher)
    best = max(best, real / (time.perf_counter() - start))
  return tokens / produce_s, best


def main():
  args = parse_args()
  from tfm import data  # pylint: disable=import-outside-toplevel
  from tfm.data import cache  # pylint: disable=import-outside-toplevel
  cfg = make_config(args)
  t0 = time.perf_counter()
  source = data.DataSource.of(cfg)
  data.prepare(source)
  t1 = time.perf_counter()
  tok = data.get_tokenizer(cfg, args.workdir, source=source)
  t2 = time.perf_counter()
  print(f"prepare: {t1 - t0:.1f}s  vocab ({tok.vocab_size} pieces): {t2 - t1:.1f}s")
  worker_counts = [int(w) for w in args.workers.split(",")]
  if args.cache:
    from tfm.data import sources  # pylint: disable=import-outside-toplevel
    import shutil  # pylint: disable=import-outside-toplevel
    build_workers = max(worker_counts) if args.build_workers is None else args.build_workers
    build_cfg = make_config(args, build_workers)
    build_source = sources.DataSource.of(build_cfg)
    directory = cache.cache_dir(build_cfg, tok, build_source.open("train"), 0, 1)
    if args.rebuild_cache and os.path.exists(directory):
      shutil.rmtree(directory)
    start, reused = time.perf_counter(), os.path.exists(directory)
    tokens = cache.open_cache(build_cfg, build_source, tok)
    built = tokens.meta
    how = (f"reused, built by an earlier call in {built['build_seconds']:.1f}s" if reused else
           f"built with data.num_workers={build_cfg.num_workers} in {built['build_seconds']:.1f}s")
    print(f"token cache {directory}: {len(tokens)} examples, {sum(built['tokens'].values())} "
          f"tokens ({built['dtype']}), {how} (this call: {time.perf_counter() - start:.1f}s)")
  producer, main_alone = time_halves(args, cfg, tok)
  mode = "bucketed" if args.bucketed else "packed"
  print(f"{cfg.dataset} {mode} max_length={cfg.max_length} tokens_per_batch={cfg.tokens_per_batch} "
        f"cache={cfg.cache}; {args.repeats} windows of {args.num_batches} batches, median [min-max]")
  print(f"producer, 1 core: {producer:,.0f} real tokens/s;  main process alone (chunks in memory, "
        f"best of {args.repeats}): {main_alone:,.0f} real tokens/s")
  for workers in worker_counts:
    result = time_pipeline(args, make_config(args, workers), tok)
    per_worker = (f"{result['per_worker_cpu']:,.0f}" if result["per_worker_cpu"] else "-")
    print(f"num_workers={workers}: {result['median']:,.0f} real tokens/s [{result['min']:,.0f}-"
          f"{result['max']:,.0f}], {result['examples']:,.0f} examples/s; real tokens per CPU "
          f"second: main process {result['per_main_cpu']:,.0f}, workers {per_worker}; first "
          f"batch after {result['first_s']:.1f}s; packing efficiency "
          f"{result['stats']['inputs_efficiency']:.3f} / {result['stats']['targets_efficiency']:.3f}",
          flush=True)
  print(f"batch shapes {result['shapes']['inputs']} x {len(result['shapes'])} arrays")


if __name__ == "__main__":
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  main()
