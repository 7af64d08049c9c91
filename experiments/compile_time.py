"""Compile time of the train step against depth, unrolled vs scanned layers (model.scan_layers).

  python experiments/compile_time.py --config=configs/base.py --config.model.dtype=float32
  python experiments/compile_time.py --config=configs/base.py --config.model.dtype=float32 \
      --layers=2,6,12 --rows=8 --length=32 --repeats=2

For each depth N (N encoder and N decoder layers) and each layout it builds the Experiment, then
times lowering (tracing the step to StableHLO) and compiling (XLA) the jitted train step on abstract
arguments: nothing is allocated or run. The persistent compilation cache is off and in-memory caches
are cleared before each measurement; the figure is the fastest of `repeats`. Prints one row per
(N, layout) and, per layout, the ratio of the deepest to the shallowest depth's total.
"""

from __future__ import annotations

import dataclasses
import sys
import time

import jax
from absl import app, flags

from tfm import config as config_lib
from tfm.experiment import Experiment
from tfm.train import backend

FLAGS = flags.FLAGS
flags.DEFINE_list("layers", ["2", "6", "12"], "layers per stack (encoder and decoder alike)")
flags.DEFINE_integer("rows", 8, "batch rows")
flags.DEFINE_integer("length", 32, "tokens per row on each side")
flags.DEFINE_list("layouts", ["unrolled", "scanned"], "which layer layouts to time, in order")
flags.DEFINE_integer("repeats", 1, "measurements per cell; the fastest is reported")


def compile_seconds(config: config_lib.Config, rows: int, length: int) -> tuple[float, float]:
  """(lower seconds, compile seconds) of the train step of `config` for a [rows, length] batch."""
  jax.clear_caches()
  exp = Experiment(config)
  state, batch = exp.abstract_state, exp.abstract_batch(rows, length)
  step = exp.train_step
  start = time.perf_counter()
  lowered = step.lower(state, batch)
  lowered_at = time.perf_counter()
  lowered.compile()
  return lowered_at - start, time.perf_counter() - lowered_at


def table(config: config_lib.Config, depths: list[int], rows: int, length: int, repeats: int,
          layouts=("unrolled", "scanned")):
  """Rows of (layers, scan_layers, lower s, compile s, total s)."""
  out = []
  for scan in (layout == "scanned" for layout in layouts):
    for n in depths:
      model = dataclasses.replace(config.model, num_encoder_layers=n, num_decoder_layers=n,
                                  scan_layers=scan)
      times = [compile_seconds(config.replace(model=model), rows, length) for _ in range(repeats)]
      lower, comp = min(times, key=sum)
      out.append((n, scan, lower, comp, lower + comp))
      print(f"layers {n:>3}  scan_layers={str(scan):<5}  lower {lower:7.2f} s  compile {comp:7.2f} s  "
            f"total {lower + comp:7.2f} s", flush=True)
  return out


def main(argv):
  del argv
  backend.limit_platforms()
  if FLAGS.config is None:
    raise app.UsageError("--config=FILE[:ARG] is required")
  jax.config.update("jax_enable_compilation_cache", False)
  config = config_lib.build(FLAGS.config)
  depths = sorted(int(n) for n in FLAGS.layers)
  print(f"{jax.device_count()} x {jax.devices()[0].device_kind}, d_model {config.model.d_model}, "
        f"dtype {config.model.dtype}, remat {config.model.remat}, batch {FLAGS.rows} x {FLAGS.length}")
  if not set(FLAGS.layouts) <= {"unrolled", "scanned"}:
    raise app.UsageError(f"--layouts: expected unrolled and/or scanned, got {FLAGS.layouts}")
  rows = table(config, depths, FLAGS.rows, FLAGS.length, FLAGS.repeats, FLAGS.layouts)
  for scan in sorted({s for _, s, _, _, _ in rows}):
    total = {n: t for n, s, _, _, t in rows if s == scan}
    print(f"scan_layers={scan}: {depths[-1]} layers / {depths[0]} layers = "
          f"{total[depths[-1]] / total[depths[0]]:.2f}x")


if __name__ == "__main__":
  config_lib.define_config_flag(FLAGS, sys.argv)
  app.run(main)
