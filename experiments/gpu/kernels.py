"""Which kernels a GPU node's sweep compiles with: the candidates, the probe that times them on
configs/table3_v3.py's base, and the rule that picks one (experiments/gpu/table3.py --probe_minutes).

A tiny model's step on a large GPU is set by how XLA compiles its matrix products, not by their
FLOPs. The candidates (XLA's flags and model.matmul_precision):
  a  XLA's autotuning off (Triton product fusions, the first tiling untimed), float32 "highest"
  b  products by cuBLAS (--xla_gpu_enable_triton_gemm=false), whose autotuning times a handful of
     algorithms, the fusion autotuner off, autotuning on; "highest"
  c  b with model.matmul_precision="tensorfloat32": TF32 tensor cores for the products
Each trains base for PROBE_STEPS steps (same seed, same dropout keys) in one process after the
other, the compilation cache shared.

The rule, fixed before any probe ran: the fastest candidate (step time over steps 251-500) whose
train loss at steps 250 and 500 differs from a's by less than TOLERANCE, half the spread of six H200
seeds of base at those steps (0.041 and 0.023: experiments/results/gpu/2026-11-27_h200_table3). A
precision or kernel change is kept only where it moves a run less than the seeds already do. a
itself always qualifies. A candidate whose flags this XLA does not know is left out (an unknown flag
stops a process at start), as is one without train figures at both steps; the rule reads nothing
else, so a candidate stopped by the probe's time box in the dev evaluation that ends every run
still counts (its row's "process" says how its process ended).

On one H200 (experiments/results/gpu/2026-11-27_h200_kernels) the rule chose c: 5.0 ms a step
against b's 6.3 and a's 11.7, train loss within 0.003 of a's.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from experiments.gpu.timebox import Runner

PROBE_STEPS, LOG_EVERY = 500, 250
TOLERANCE = {250: 0.020, 500: 0.011}  # step -> the largest train-loss change the rule keeps
QUICK_STEPS, QUICK_EVERY = 12, 6  # --quick: the rule's plumbing at steps 6 and 12
PROBE_TIMEOUT_S = 100  # one candidate's process: start, data, compile, 500 steps


@dataclasses.dataclass(frozen=True)
class Candidate:
  name: str
  what: str
  xla_flags: tuple[str, ...]
  precision: str  # model.matmul_precision

  def env(self, base: dict[str, str]) -> dict[str, str]:
    """base's environment with this candidate's XLA flags after any given there."""
    flags = " ".join(filter(None, [base.get("XLA_FLAGS"), *self.xla_flags]))
    return {**base, "XLA_FLAGS": flags}

  def overrides(self) -> list[str]:
    return [f"model.matmul_precision={self.precision}"]

  def record(self) -> dict:
    return {"candidate": self.name, "what": self.what, "xla_flags": list(self.xla_flags),
            "matmul_precision": self.precision}


CUBLAS = ("--xla_gpu_enable_triton_gemm=false",
          "--xla_gpu_experimental_enable_fusion_autotuner=false")
CANDIDATES = (
    Candidate("a", "Triton products, autotuning off, float32", ("--xla_gpu_autotune_level=0",),
              "highest"),
    Candidate("b", "cuBLAS products, fusion autotuner off, autotuning on, float32", CUBLAS,
              "highest"),
    Candidate("c", "cuBLAS products, fusion autotuner off, autotuning on, TF32", CUBLAS,
              "tensorfloat32"),
)
BASELINE = CANDIDATES[0]


def unknown_flags(candidate: Candidate, env: dict[str, str], known: dict[str, bool]) -> list[str]:
  """The candidate's flags this process's XLA refuses: each tried alone in a CPU-only JAX start
  (XLA parses every flag of XLA_FLAGS there, GPU flags included, and stops at an unknown one).
  known: flag -> accepted, the answers so far (each flag is tried once)."""
  for flag in candidate.xla_flags:
    if flag not in known:
      ran = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"],
                           env={**env, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"},
                           capture_output=True, text=True, timeout=120, check=False)
      known[flag] = ran.returncode == 0
  return [flag for flag in candidate.xla_flags if not known[flag]]


def figures(output: str) -> dict:
  """compile_s, and per logged step its train loss and step seconds, from a `tfm train` output."""
  out: dict = {"loss": {}, "step_s": {}}
  compiled = re.search(r"train step compiled \(or loaded from the compilation cache\) in "
                       r"([\d.]+) s", output)
  if compiled:
    out["compile_s"] = float(compiled.group(1))
  number = r"([-+\d.eE]+)"  # tfm prints 0.0118 or 6.270e-03
  for m in re.finditer(rf"^\[train\] step (\d+)/\d+ .*?\| loss {number} .*?\| step_s {number}",
                       output, re.M):
    out["loss"][int(m.group(1))] = float(m.group(2))
    out["step_s"][int(m.group(1))] = float(m.group(3))
  return out


def tolerances(quick: bool) -> dict[int, float]:
  """The rule's steps and tolerances; with --quick the same tolerances at its two logged steps."""
  return dict(zip((QUICK_EVERY, QUICK_STEPS), TOLERANCE.values())) if quick else TOLERANCE


def measured(row: dict, quick: bool = False) -> bool:
  """Whether a probe row has its train figures at both of the rule's steps."""
  return all(step in row["loss"] and step in row["step_s"] for step in tolerances(quick))


def verdict(row: dict, baseline: dict, quick: bool = False) -> str | None:
  """None where the rule keeps the candidate's numbers, else why not, in words."""
  if not row.get("ok"):
    return row.get("error", "failed")
  for step, tolerance in tolerances(quick).items():
    got, want = row["loss"].get(step), baseline["loss"].get(step)
    if got is None or want is None:
      return f"no train loss at step {step}"
    if abs(got - want) >= tolerance:
      return f"train loss at step {step} {got:.4f} against a's {want:.4f}: off by >= {tolerance}"
  return None


def choose(rows: list[dict], quick: bool = False) -> dict:
  """The rule: the fastest candidate (step time of the last window) that verdict() keeps; a when
  nothing else qualifies (or a itself failed: then the sweep runs on a's flags untested)."""
  baseline = next(r for r in rows if r["candidate"] == BASELINE.name)
  last = max(tolerances(quick))
  for r in rows:
    if r is not baseline:
      r["verdict"] = verdict(r, baseline, quick) or "kept"
  kept = [r for r in rows if r.get("ok") and (r is baseline or r["verdict"] == "kept")]
  if not kept:
    return baseline
  return min(kept, key=lambda r: r["step_s"][last])


def probe(env: dict[str, str], train_argv: list[str], cwd: Path, root: Path, out: Path,
          ends_at: float, quick: bool) -> tuple[Candidate, list[dict]]:
  """Trains base for PROBE_STEPS under each candidate, one after the other, until ends_at; returns
  the chosen candidate and a row of figures per candidate. train_argv: `tfm train` of base, to
  which the workdir, the step counts and the candidate's overrides are added. Output: OUT/probe.txt."""
  rows, known = [], {}
  steps, every = (QUICK_STEPS, QUICK_EVERY) if quick else (PROBE_STEPS, LOG_EVERY)
  for candidate in CANDIDATES:
    row = candidate.record()
    rows.append(row)
    left = ends_at - time.monotonic()
    if left < 20:
      row.update(ok=False, error=f"not run: {left:.0f} s left of the probe's time")
      continue
    bad = unknown_flags(candidate, env, known)
    if bad:
      row.update(ok=False, error=f"this XLA does not know {' '.join(bad)}")
      continue
    workdir = root / f"probe-{candidate.name}"
    shutil.rmtree(workdir, ignore_errors=True)  # a probe of an earlier call on this root
    argv = [*train_argv, f"--workdir={workdir}", f"--config.train.steps={steps}",
            f"--config.train.log_every={every}", "--config.train.eval_every=1000000",
            "--config.train.checkpoint_every=1000000", "--config.train.curves=False",
            *(f"--config.{o}" for o in candidate.overrides())]
    run = Runner(out, candidate.env(env), ends_at, cwd).run(
        "probe", f"candidate {candidate.name}: {candidate.what}", argv,
        time.monotonic() + PROBE_TIMEOUT_S)
    row.update(figures(run.output), wall_s=round(run.seconds, 1),
               process="ok" if run.ok else run.failure())
    # The rule reads the train figures alone: a process stopped after them (in the dev
    # evaluation every run ends with) still measured its candidate.
    row["ok"] = measured(row, quick)
    if not row["ok"]:
      row["error"] = f"no train figures at steps {sorted(tolerances(quick))}: {run.failure()}"
  chosen = choose(rows, quick)
  return next(c for c in CANDIDATES if c.name == chosen["candidate"]), rows
