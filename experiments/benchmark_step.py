"""Times the train step of a config on synthetic packed batches: tokens/s, step time and MFU.

  python experiments/benchmark_step.py --config=configs/base.py
  python experiments/benchmark_step.py --config=configs/table3.py:C5 --config.train.microbatches=2 \
      --rows=64 --length=128 --steps=20

The batch has `rows` rows of `length` tokens on each side (default: data.tokens_per_batch /
data.max_length rows of data.max_length, rounded up to split over the batch shards x microbatches),
every row filled with 1-4 packed examples, so all tokens
are real. After `warmup` steps (the first one compiles) it times `steps` steps and prints the mean
step time, target tokens/s (source + target tokens/s too for encoder-decoder models), the model
FLOPs of a step (tfm/train/flops.py) and the MFU against the devices' bf16 peak; on CPUs, which have no
peak in the table, only throughput. It also prints the host's minor page faults and system CPU seconds a
timed step: on CPUs, XLA's scratch buffer for a step is fresh memory every call, and first touching
its pages costs the kernel time (launch.sh's allocator setting, experiments/SPEED.md, fourteenth pass).

The step is the one training compiles, with the config's choices: --config.train.guard=select,
--config.train.dropout_prng=rbg or --config.model.layer_norm_grad=autodiff time another form
(tfm/train/platform_choices.py; "auto" is the platform's). The forms are printed with the figures.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import jax
import numpy as np
from absl import app, flags

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tfm and configs of this checkout, installed or not

from tfm import config as config_lib  # noqa: E402
from tfm.data.batching import round_up_rows  # noqa: E402
from tfm.data.prefetch import to_device  # noqa: E402
from tfm.experiment import Experiment  # noqa: E402
from tfm.model import layer_norm  # noqa: E402
from tfm.model.params import parameter_count  # noqa: E402
from tfm.train import backend  # noqa: E402
from tfm.train.flops import mfu, peak_flops, train_flops  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("rows", None, "global batch rows (default: data.tokens_per_batch // length)")
flags.DEFINE_integer("length", None, "tokens per row on each side (default: data.max_length)")
flags.DEFINE_integer("warmup", 2, "untimed steps first (the first compiles)")
flags.DEFINE_integer("steps", 10, "timed steps")
flags.DEFINE_integer("seed", 0, "seed of the synthetic batch")


def synthetic_batch(rows: int, length: int, vocab: int, with_inputs: bool, seed: int) -> dict:
  """Host arrays [rows, length]: 1-4 examples packed per row, no padding, ids in [2, vocab)."""
  rng = np.random.default_rng(seed)
  batch = {}
  for side in ("inputs", "targets") if with_inputs else ("targets",):
    tokens = rng.integers(2, vocab, (rows, length)).astype(np.int32)
    segmentation = np.zeros((rows, length), np.int32)
    position = np.zeros((rows, length), np.int32)
    for r in range(rows):
      cuts = np.sort(rng.choice(np.arange(1, length), size=rng.integers(0, 4), replace=False))
      for s, (a, b) in enumerate(zip(np.r_[0, cuts], np.r_[cuts, length])):
        segmentation[r, a:b] = s + 1
        position[r, a:b] = np.arange(b - a)
    batch.update({side: tokens, f"{side}_segmentation": segmentation, f"{side}_position": position})
  return batch


def process_rows(batch: dict) -> dict:
  """This process's share of the global batch rows (all of it with one process)."""
  n, i = jax.process_count(), jax.process_index()
  return {k: np.split(v, n)[i] for k, v in batch.items()}


def benchmark(config: config_lib.Config, rows: int | None, length: int | None, warmup: int,
              steps: int, seed: int) -> dict:
  """Times the step training compiles for `config`."""
  cfg = config.model
  length = length or config.data.max_length
  exp = Experiment(config)
  rows = rows or round_up_rows(config.data.tokens_per_batch // length, exp.batch_row_multiple)
  step = exp.train_step
  state = exp.init_state()
  host = synthetic_batch(rows, length, cfg.vocab_size, cfg.has_encoder, seed)
  batch = to_device(process_rows(host), exp.batch_sharding)

  start = time.perf_counter()
  for _ in range(max(1, warmup)):
    state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  warmup_seconds = time.perf_counter() - start
  usage, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
  for _ in range(steps):
    state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  step_seconds = (time.perf_counter() - start) / steps
  after = resource.getrusage(resource.RUSAGE_SELF)

  flops = rows * train_flops(cfg, length, length)
  peak = peak_flops()
  sides = 2 if cfg.architecture == "encoder_decoder" else 1
  return {
      "devices": f"{jax.device_count()} x {jax.devices()[0].device_kind}",
      "mesh": dict(exp.mesh.shape), "parameters": parameter_count(state.params),
      "batch": f"{rows} rows x {length} tokens", "microbatches": config.train.microbatches,
      "dtype": cfg.dtype, "remat": cfg.remat, "prng": exp.choices.dropout_prng,
      "guard": exp.choices.guard,
      "layer_norm_grad": (f"auto ({layer_norm.grad_for(exp.platform)})"
                          if cfg.layer_norm_grad == "auto" else cfg.layer_norm_grad),
      "warmup_seconds": warmup_seconds, "step_seconds": step_seconds,
      "target_tokens_per_second": rows * length / step_seconds,
      "all_tokens_per_second": sides * rows * length / step_seconds,
      "tflops_per_step": flops / 1e12, "mfu": mfu(flops, step_seconds, jax.device_count(), peak),
      "minor_page_faults_per_step": (after.ru_minflt - usage.ru_minflt) / steps,
      "system_cpu_seconds_per_step": (after.ru_stime - usage.ru_stime) / steps,
      "loss": float(metrics["loss"]),
  }


def main(argv):
  del argv
  backend.limit_platforms()
  if FLAGS.config is None:
    raise app.UsageError("--config=FILE[:ARG] is required")
  try:
    config = config_lib.build(FLAGS.config)
  except ValueError as e:  # a bad config key: its one line
    print(f"benchmark_step.py: {e}", file=sys.stderr)
    return 2
  result = benchmark(config, FLAGS.rows, FLAGS.length, FLAGS.warmup, FLAGS.steps, FLAGS.seed)
  width = max(map(len, result))
  for key, value in result.items():
    if key == "mfu" and value is None:
      value = "n/a (no peak FLOP/s known for this device)"
    elif isinstance(value, float):
      value = f"{value:.4g}"
    print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
  config_lib.define_config_flag(FLAGS, sys.argv)
  app.run(main)
