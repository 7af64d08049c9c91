"""The GPU table's jobs that time the train step alone (experiments/benchmark_step.py, a process a
run): step_cudnn and step_xla (base then big at the paper's batch), and variants (base, each of the
step's per-platform choices switched in turn against the default). experiments/gpu_table.py runs
them; docs/gpu.md says what each row means.
"""

from __future__ import annotations

import json
import re
import sys

from experiments.gpu.timebox import Run, Runner

PAPER_BATCH = ["--rows=96", "--length=256"]
QUICK_MODEL = ["model.num_encoder_layers=1", "model.num_decoder_layers=1", "model.d_model=64",
               "model.d_ff=256", "model.d_k=16", "model.d_v=16", "model.num_heads=4",
               "model.dtype=float32"]
QUICK_STEP = ["--rows=4", "--length=16", "--warmup=1", "--steps=2"]
OOM = re.compile(r"RESOURCE_EXHAUSTED|[Oo]ut of memory")

# The variants job: (name, benchmark_step.py's flags for it). The default is the step training
# compiles on a GPU ("auto": tfm/train/platform_choices.py, tfm/model/layer_norm.py: grad_for);
# each other row switches one of those choices to its other form and is set against the default;
# the default again last shows how far two runs of one program differ. Its figures decide the
# GPU's "auto" (platform_choices.AUTO).
VARIANTS = (
    ("default", []),
    ("rbg", ["--config.train.dropout_prng=rbg"]),  # dropout masks from RngBitGenerator
    ("select_guard", ["--config.train.guard=select"]),  # the non-finite guard as a select
    ("layer_norm_autodiff", ["--config.model.layer_norm_grad=autodiff"]),
    ("default_again", []),
)
VARIANT_STEP = ["--warmup=3", "--steps=30"]  # ~40 ms steps: the compile is most of a run's time


def key_values(output: str) -> dict[str, str]:
  """benchmark_step.py's `key  value` lines."""
  pairs = (re.match(r"^([a-z_]+)\s{2,}(.+)$", line) for line in output.splitlines())
  return {m.group(1): m.group(2).strip() for m in pairs if m}


def rate(x: float) -> str:
  """2.56M, 88.9k, 333."""
  return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}k" if x >= 1e3 else f"{x:.0f}"


def step_numbers(run: Run) -> dict:
  """A benchmark_step.py run's figures as numbers ({} when it failed), with the step's choices."""
  if not run.ok:
    return {}
  v = key_values(run.output)
  number = lambda key: float(v[key]) if key in v and not v[key].startswith("n/a") else None
  return {"step_ms": 1e3 * float(v["step_seconds"]),
          "tokens_per_s": float(v["all_tokens_per_second"]), "mfu": number("mfu"),
          "tflops_per_step": number("tflops_per_step"), "microbatches": int(v["microbatches"]),
          "batch": v["batch"], "dtype": v["dtype"], "prng": v.get("prng"),
          "guard": v.get("guard"), "layer_norm_grad": v.get("layer_norm_grad")}


def step_row(run: Run) -> str:
  """A table row from a benchmark_step.py run."""
  if not run.ok:
    return f"| {run.name} | {run.failure()} |"
  v = key_values(run.output)
  mfu = v["mfu"] if v["mfu"].startswith("n/a") else f"{float(v['mfu']):.1%}"
  return (f"| {run.name} | {v['devices']}, {v['batch']}, {v['dtype']}, microbatches "
          f"{v['microbatches']}: {1e3 * float(v['step_seconds']):.1f} ms a step, "
          f"{rate(float(v['all_tokens_per_second']))} tokens/s (source + target), "
          f"{v['tflops_per_step']} model TFLOP a step, MFU {mfu} |")


def step_rows(runner: Runner, impl: str, ends_at: float, quick: bool
              ) -> tuple[list[str], dict]:
  """benchmark_step.py for base then big with attention `impl`; on OOM, twice the microbatches.
  Returns the rows and {size: step_numbers}."""
  rows, numbers = [], {}
  for size in ("base", "big"):
    microbatches = 1
    while True:
      shape = ([f"--config.{o}" for o in QUICK_MODEL] + QUICK_STEP) if quick else PAPER_BATCH
      run = runner.run(f"step_{impl}", f"step_{size}_{impl}", [
          sys.executable, "experiments/benchmark_step.py", f"--config=configs/{size}.py",
          f"--config.model.attention_impl={impl}", f"--config.train.microbatches={microbatches}",
          *shape], ends_at)
      if run.ok or run.timed_out or not OOM.search(run.output) or microbatches == 8:
        break
      microbatches *= 2
    rows.append(step_row(run))
    numbers[size] = step_numbers(run)
    if run.timed_out:  # the job's time is spent
      break
  return rows, numbers


def variants_rows(runner: Runner, ends_at: float, quick: bool) -> tuple[list[str], dict]:
  """benchmark_step.py on base at the paper's batch, bfloat16, cuDNN's attention (as step_cudnn),
  once a VARIANTS entry, a process each; --quick: QUICK_MODEL at QUICK_STEP on the CPU (float32,
  the default attention: cuDNN takes no float32). A row a variant: its ms a step and, for all but
  the default, the change against the default's. Returns the rows and {variant: step_numbers
  with change_ms and change_percent}. Output in OUT/step_cudnn.txt, the file of the runs it
  varies (OUT holds at most 8 files)."""
  shape = ([f"--config.{o}" for o in QUICK_MODEL] + QUICK_STEP if quick else
           ["--config.model.attention_impl=cudnn", *PAPER_BATCH, *VARIANT_STEP])
  rows, numbers = [], {}
  for name, flags in VARIANTS:
    run = runner.run("step_cudnn", f"variants_base_{name}", [
        sys.executable, "experiments/benchmark_step.py", "--config=configs/base.py",
        "--config.train.microbatches=1", *shape, *flags], ends_at)
    figures = step_numbers(run)
    if not figures:
      rows.append(f"| {run.name} | {run.failure()} |")
    else:
      default = numbers.get("default", {}).get("step_ms")
      choices = (f"prng {figures['prng']}, guard {figures['guard']}, layer_norm_grad "
                 f"{figures['layer_norm_grad']}")
      against = ""
      if name != "default" and default:
        figures.update(change_ms=figures["step_ms"] - default,
                       change_percent=100 * (figures["step_ms"] - default) / default)
        against = (f", {figures['change_ms']:+.2f} ms ({figures['change_percent']:+.1f}%) "
                   "against the default")
      rows.append(f"| {run.name} | {figures['batch']}, {figures['dtype']}: "
                  f"{figures['step_ms']:.2f} ms a step{against} ({choices}) |")
    numbers[name] = figures
    if run.timed_out:  # the job's time is spent
      break
  return rows, numbers


STACK_MEMBERS = "1,2,10"  # the stack sizes the stacks job times (--quick: 1,2)


def stack_rows(runner: Runner, ends_at: float, quick: bool) -> tuple[list[str], dict]:
  """experiments/benchmark_stack.py on configs/table3_v3.py's base at its own batch, under the
  kernels its GPU runs compile with (experiments/gpu/kernels.py: candidate c), stacks of 1, 2 and
  10 beside the solo step: what a stack buys a run. --quick: QUICK_MODEL at QUICK_STEP, stacks of
  1 and 2, on the CPU. Output in OUT/step_cudnn.txt (OUT holds at most 8 files)."""
  from experiments.gpu.kernels import CANDIDATES  # pylint: disable=import-outside-toplevel
  kernels = next(c for c in CANDIDATES if c.name == "c")
  shape = ([f"--config.{o}" for o in QUICK_MODEL] + QUICK_STEP + ["--members=1,2"] if quick else
           ["--warmup=3", "--steps=30", f"--members={STACK_MEMBERS}"])
  run = runner.run("step_cudnn", "stacks_table3_v3_base", [
      "env", f"XLA_FLAGS={' '.join(kernels.xla_flags)}", sys.executable,
      "experiments/benchmark_stack.py", "--config=configs/table3_v3.py:base",
      *(f"--config.{o}" for o in kernels.overrides()), *shape], ends_at)
  found = re.search(r"^\{.*^\}", run.output, re.M | re.S)
  if not run.ok or not found:
    return [f"| {run.name} | {run.failure() if not run.ok else 'no figures'} |"], {}
  figures = json.loads(found.group(0))
  solo = figures["solo"]
  cells = [f"solo {solo['step_ms']:.2f} ms a step"] + [
      f"{k} at once {s['step_ms']:.2f} ms ({s['per_run']:.2f}x the solo step's runs a second, "
      f"compiled in {s['compile_s']:.0f} s)" for k, s in figures["stacks"].items()]
  return [f"| {run.name} | {figures['batch']}: {'; '.join(cells)} |"], figures
