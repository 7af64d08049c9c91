"""The host time the training loop adds to its steps: the real loop against the same step alone.

  python experiments/loop_overhead.py --config=configs/quickstart.py --config.train.steps=200 \
      --config.train.log_every=50 --config.train.eval_every=100 \
      --config.train.checkpoint_every=100 --config.eval.bleu_every=200 \
      --config.eval.bleu_examples=50 --out=experiments/results/loop/cpu.json

First it trains `config` with tfm.loop.train in a fresh workdir (--workdir, default a temporary
directory): the real pipeline, packing, prefetch, metrics windows, checkpoints, dev loss and dev
BLEU at the config's cadence. It times runner.run_steps (tfm/train/runner.py) from the end of the first (compiling) step
to the last step's state being ready, and subtracts the evaluations: each is timed from the moment
the steps dispatched before it have finished (their time is the steps') to its result, and the
redrawing of curves.png that follows them with them. What is
left, over the timed steps, is the loop's time a step: the step and everything around it
(next batch, metrics, flushes, saves, the profiler hooks, curves.png).

Then the same compiled step (the process's Experiment parts are shared, so no new compilation)
runs alone from a fresh state over the very batches the loop trained on, already on the device,
dispatched back to back and waited for once at the end; --repeats times, the fastest kept (the
overhead is then, if anything, overstated). The added time a step is their difference, in wall
seconds and in the process's CPU seconds (all its threads: the step's, the input pipeline's, the
savers'); on a CPU shared with other jobs the wall figures carry their noise, the CPU seconds much
less of it.

--profile=P: the loop traces its last P steps (train.profile_steps), the clock stopping
PROFILE_MARGIN steps before them, and the trace is summarized (experiments/gpu/profile_summary.py:
the top device ops, the device's idle time between steps, the host's time between dispatches).

Output: `key  value` lines, and the same as JSON in --out (with the command, the host's CPU and
the jax version). The figures behind docs/performance.md's loop section are in
experiments/results/loop/.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import jax
from absl import app, flags

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tfm and configs of this checkout, installed or not

from experiments.gpu import profile_summary  # noqa: E402
from tfm import config as config_lib  # noqa: E402
from tfm import loop  # noqa: E402
from tfm.experiment import Experiment  # noqa: E402
from tfm.train import backend, runner  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "the loop's workdir (default: a temporary directory, removed)")
flags.DEFINE_integer("repeats", 2, "runs of the step alone over the loop's batches (fastest kept)")
flags.DEFINE_string("out", None, "also write the figures as JSON here")
flags.DEFINE_integer("profile", 0, "trace the last PROFILE steps (train.profile_steps) and summarize "
                     "the trace (experiments/gpu/profile_summary.py); the clock stops "
                     "PROFILE_MARGIN steps before them", lower_bound=0)

PROFILE_MARGIN = 5


class LoopClock:
  """Wraps runner.run_steps: records the device batches the steps took, the first step's end, the
  evaluations' time (from their inputs being ready) and the end of the last step."""

  def __init__(self, timed_until: int | None = None):
    self.timed_until = timed_until  # the clock stops after this many steps (None: at the end)
    self.batches: list = []
    self.first_done = self.end = None  # (wall, process CPU) seconds
    self.evaluations_s = self.evaluations_cpu_s = 0.0
    self.evaluations = 0

  def _step(self, train_step):
    def step(state, batch):
      if self.end is None and len(self.batches) == self.timed_until:
        jax.block_until_ready(state)
        self.end = clocks()
      if self.end is None:
        self.batches.append(batch)
      out = train_step(state, batch)
      if self.first_done is None:  # the compiling step: the loop waits for it anyway
        jax.block_until_ready(out)
        self.first_done = clocks()
      return out
    return step

  def _evaluation(self, evaluate):
    if evaluate is None:
      return None

    def timed(params, *run):
      jax.block_until_ready(params)  # the steps before it are the steps' time
      start = clocks()
      result = evaluate(params, *run)
      end = clocks()
      self.evaluations_s += end[0] - start[0]
      self.evaluations_cpu_s += end[1] - start[1]
      self.evaluations += 1
      return result
    return timed

  def draw_curves(self, draw):
    """runner._draw_curves, timed with the evaluations (it follows them, at their cadence)."""
    def timed(*args):
      start = clocks()
      draw(*args)
      end = clocks()
      self.evaluations_s += end[0] - start[0]
      self.evaluations_cpu_s += end[1] - start[1]
    return timed

  def run_steps(self, run_steps):
    def timed(runner, state, step):
      runner = dataclasses.replace(runner, train_step=self._step(runner.train_step),
                                   evaluate_dev=self._evaluation(runner.evaluate_dev),
                                   evaluate_bleu=self._evaluation(runner.evaluate_bleu))
      state = run_steps(runner, state, step)
      if self.end is None:
        jax.block_until_ready(state)
        self.end = clocks()
      return state
    return timed


def clocks() -> tuple[float, float]:
  """(wall seconds, this process's CPU seconds over all its threads)."""
  return time.perf_counter(), time.process_time()


def step_alone(exp: Experiment, batches: list) -> tuple[float, float]:
  """(wall, CPU) seconds for batches[1:] through exp.train_step from a fresh state (batches[0]
  untimed)."""
  state, _ = exp.train_step(exp.init_state(), batches[0])
  jax.block_until_ready(state)
  start = clocks()
  for batch in batches[1:]:
    state, metrics = exp.train_step(state, batch)
  jax.block_until_ready((state, metrics))
  end = clocks()
  return end[0] - start[0], end[1] - start[1]


def cpu_name() -> str:
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    return f"{len(names)} x {names[0]}" if names else platform.processor()
  except OSError:
    return platform.processor()


def measure(config, workdir: str, repeats: int, profile: int = 0) -> dict:
  timed_until = None
  if profile:
    steps = config.train.steps
    timed_until = steps - profile - PROFILE_MARGIN
    if timed_until < 2:
      raise app.UsageError(f"--profile={profile}: train.steps={steps} leaves no steps to time")
    config = config.replace(train=dataclasses.replace(config.train,
                                                      profile_steps=(steps - profile, steps)))
  clock = LoopClock(timed_until)
  original = runner.run_steps, runner._draw_curves  # pylint: disable=protected-access
  runner.run_steps, runner._draw_curves = (clock.run_steps(original[0]),
                                           clock.draw_curves(original[1]))
  try:
    loop.train(config, workdir, stream=io.StringIO())
  finally:
    runner.run_steps, runner._draw_curves = original
  timed = len(clock.batches) - 1
  loop_s = clock.end[0] - clock.first_done[0] - clock.evaluations_s
  loop_cpu = clock.end[1] - clock.first_done[1] - clock.evaluations_cpu_s
  alone = [step_alone(Experiment(config), clock.batches) for _ in range(repeats)]
  alone_s, alone_cpu = min(a[0] for a in alone), min(a[1] for a in alone)
  added, added_cpu = (loop_s - alone_s) / timed, (loop_cpu - alone_cpu) / timed
  return {"steps_timed": timed, "loop_step_ms": 1e3 * loop_s / timed,
          "alone_step_ms": 1e3 * alone_s / timed, "added_ms_per_step": 1e3 * added,
          "added_percent": 100 * added / (alone_s / timed),
          "loop_step_cpu_ms": 1e3 * loop_cpu / timed, "alone_step_cpu_ms": 1e3 * alone_cpu / timed,
          "added_cpu_ms_per_step": 1e3 * added_cpu,
          "added_cpu_percent": 100 * added_cpu / (alone_cpu / timed),
          "alone_runs_s": [round(a[0], 3) for a in alone],
          "evaluations": clock.evaluations, "evaluations_s": clock.evaluations_s,
          "checkpoint_every": config.train.checkpoint_every, "log_every": config.train.log_every,
          "eval_every": config.train.eval_every, "bleu_every": config.eval.bleu_every,
          "device": backend.describe(), "host_cpu": cpu_name(), "os_cpus": os.cpu_count(),
          **({"profile": traced(workdir)} if profile else {})}


def traced(workdir: str) -> dict:
  """profile_summary's figures of the loop's trace ({'trace': None} when it wrote none)."""
  trace = profile_summary.newest_trace(workdir)
  return profile_summary.summarize(trace) if trace else {"trace": None}


def main(argv):
  del argv
  backend.limit_platforms()
  if FLAGS.config is None:
    raise app.UsageError("--config=FILE[:ARG] is required")
  config = config_lib.build(FLAGS.config)
  workdir = FLAGS.workdir or tempfile.mkdtemp(prefix="loop_overhead_")
  try:
    result = measure(config, workdir, FLAGS.repeats, FLAGS.profile)
  finally:
    if FLAGS.workdir is None:
      shutil.rmtree(workdir, ignore_errors=True)
  result["command"] = " ".join(["python", *sys.argv])
  width = max(map(len, result))
  for key, value in result.items():
    if key != "profile":
      print(f"{key:<{width}}  {value:.4g}" if isinstance(value, float) else
            f"{key:<{width}}  {value}")
  if result.get("profile", {}).get("trace"):
    print("\n".join(profile_summary.lines(result["profile"])))
  elif "profile" in result:
    print("profile: the loop wrote no trace")
  if FLAGS.out:
    Path(FLAGS.out).parent.mkdir(parents=True, exist_ok=True)
    Path(FLAGS.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
  config_lib.define_config_flag(FLAGS, sys.argv)
  app.run(main)
