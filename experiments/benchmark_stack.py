"""Times the train step of a config alone and stacked K runs at a time (tfm/train/stack.py): what a
stack buys per run on this machine.

  python experiments/benchmark_stack.py --config=configs/table3_v3.py:base --members=1,2,5
  python experiments/benchmark_stack.py --config=configs/quickstart.py --members=2 --json=OUT.json

For the solo step (experiments/benchmark_step.py's, on its synthetic packed batch; --rows,
--length, --warmup and --steps are its flags) and for each K of --members, the stacked step on K
such batches (one a member, members seeded 0..K-1): the first call's seconds (the compile), then
the mean of --steps timed steps after --warmup more. A stack of K
advances K runs a step, so "runs a second" is K / step time, and "per run" compares it with the
solo step's 1 / step time. Every figure is also printed as one JSON object (--json writes it).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import jax
from absl import app, flags

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tfm and configs of this checkout, installed or not

from experiments.benchmark_step import process_rows, synthetic_batch  # noqa: E402
from tfm import config as config_lib  # noqa: E402
from tfm.data.batching import round_up_rows  # noqa: E402
from tfm.data.prefetch import to_device  # noqa: E402
from tfm.experiment import Experiment  # noqa: E402
from tfm.train import backend, stack  # noqa: E402
from tfm.train.step import member_sharding  # noqa: E402

FLAGS = flags.FLAGS  # --rows, --length, --warmup, --steps: benchmark_step.py's, imported above
flags.DEFINE_list("members", ["1", "2", "5"], "stack sizes K to time")
flags.DEFINE_string("json", None, "also write the figures to this file")


def _time(step, state, batch, warmup: int, steps: int) -> tuple[float, float]:
  """(seconds of the first call, mean seconds of `steps` calls after `warmup` more)."""
  start = time.perf_counter()
  state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  first = time.perf_counter() - start
  for _ in range(warmup):
    state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  start = time.perf_counter()
  for _ in range(steps):
    state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  return first, (time.perf_counter() - start) / steps


def benchmark(config: config_lib.Config, members: list[int], rows: int | None, length: int | None,
              warmup: int, steps: int) -> dict:
  cfg = config.model
  length = length or config.data.max_length
  exp = Experiment(config)
  rows = rows or round_up_rows(config.data.tokens_per_batch // length, exp.batch_row_multiple)
  batch = lambda seed: process_rows(synthetic_batch(rows, length, cfg.vocab_size,
                                                    cfg.has_encoder, seed))
  compile_s, step_s = _time(exp.train_step, exp.init_state(),
                            to_device(batch(0), exp.batch_sharding), warmup, steps)
  out = {"devices": f"{jax.device_count()} x {jax.devices()[0].device_kind}",
         "batch": f"{rows} rows x {length} tokens a run", "choices": exp.choices.describe(),
         "solo": {"compile_s": compile_s, "step_ms": 1e3 * step_s, "runs_per_s": 1 / step_s},
         "stacks": {}}
  for k in members:
    states = [Experiment(config.replace(train=dataclasses.replace(config.train, seed=seed)))
              .init_state() for seed in range(k)]
    state = stack.stack_states(states, exp.state_shardings)
    stacked = to_device(stack.stack_batches([batch(seed) for seed in range(k)]),
                        member_sharding(exp.batch_sharding))
    compile_s, step_s = _time(exp.stacked_train_step(k), state, stacked, warmup, steps)
    out["stacks"][k] = {"compile_s": compile_s, "step_ms": 1e3 * step_s,
                        "runs_per_s": k / step_s,
                        "per_run": (k / step_s) / out["solo"]["runs_per_s"]}
  return out


def main(argv):
  del argv
  backend.limit_platforms()
  if FLAGS.config is None:
    raise app.UsageError("--config=FILE[:ARG] is required")
  try:
    members = [int(k) for k in FLAGS.members]
    if any(k < 1 for k in members):
      raise ValueError
  except ValueError:
    print(f"benchmark_stack.py: --members={','.join(FLAGS.members)}: expected positive integers",
          file=sys.stderr)
    return 2
  try:
    config = config_lib.build(FLAGS.config)
  except ValueError as e:
    print(f"benchmark_stack.py: {e}", file=sys.stderr)
    return 2
  result = benchmark(config, members, FLAGS.rows, FLAGS.length, FLAGS.warmup, FLAGS.steps)
  print(f"{result['devices']}, {result['batch']}; {result['choices']}")
  solo = result["solo"]
  print(f"solo       compile {solo['compile_s']:6.1f} s   step {solo['step_ms']:8.2f} ms   "
        f"{solo['runs_per_s']:8.2f} run-steps/s")
  for k, s in result["stacks"].items():
    print(f"stack of {k:<2} compile {s['compile_s']:6.1f} s   step {s['step_ms']:8.2f} ms   "
          f"{s['runs_per_s']:8.2f} run-steps/s   {s['per_run']:.2f}x the solo step's")
  text = json.dumps(result, indent=1)
  print(text)
  if FLAGS.json:
    Path(FLAGS.json).write_text(text + "\n")
  return 0


if __name__ == "__main__":
  config_lib.define_config_flag(FLAGS, sys.argv)
  app.run(main)
