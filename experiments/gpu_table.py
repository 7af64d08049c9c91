"""The GPU table (docs/gpu.md) in one command: train steps, the Flax example beside tfm, beam
search, and the Bible base model trained for ten minutes with its dev BLEU.

  git clone --depth 1 https://github.com/google/flax /tmp/flax     # for the comparison rows
  python experiments/gpu_table.py --flax_wmt_dir=/tmp/flax/examples/wmt
  python experiments/gpu_table.py --quick      # a few minutes on a CPU: checks the plumbing only

Each job runs in its own process, one after the other (a process holds the GPU's memory until it
exits), its output kept in OUT/<job>.txt under the exact command. Rows:
  step_{base,big}_{cudnn,xla}  experiments/benchmark_step.py at the paper's batch (96 x 256 a side)
                               in bfloat16, cuDNN's attention kernel or XLA's; a step that runs out
                               of memory is retried with twice the microbatches (up to 8)
  flax_{base,big}              experiments/compare_flax_wmt.py, the same batch and dtype on both
                               sides, cuDNN attention on tfm's (the example has its own attention;
                               skipped without --flax_wmt_dir)
  beam_base                    experiments/decode_speed.py: beam 4, batch 32, the paper's base
  bible_base                   configs/bible_base.py: its step timed on this GPU (20 steps), then
                               trained for --minutes of steps (600 s / step time), dev loss and
                               BLEU during training, then `tfm eval --average 5` on the whole dev
                               split
Every job sees one GPU (CUDA_VISIBLE_DEVICES=0 unless set): the table is a one-GPU table, whatever
the host has. OUT/table.md gathers the figures with the device's name (nvidia-smi); a job that fails is a row
saying so with its error line, and the others still run. `--jobs=step_base_cudnn,bible_base` runs
some of them; rows of earlier calls into the same --out stay (OUT/rows.json), so the table can be
filled over several sessions. The table is for docs/gpu.md; the job outputs stay beside it as the
evidence.

--quick shrinks every job (tiny batches, one timing, a 1+1-layer float32 Bible model for ~20
seconds) so that the whole script runs on a CPU in about five minutes: its figures mean nothing,
it only shows that every job runs and every figure is found in its output (on a CPU the cuDNN rows
fail with "cuDNN is not detected", which shows a failed row).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from absl import app, flags

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from configs import bible_base  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("flax_wmt_dir", None, "the Flax example's directory (.../flax/examples/wmt); "
                    "without it the comparison rows are skipped")
flags.DEFINE_string("out", None, "where the outputs and table.md go (default: "
                    "experiments/results/gpu/<date>_<device>)")
flags.DEFINE_float("minutes", 10.0, "training time of the Bible base model", lower_bound=0.01)
flags.DEFINE_list("jobs", None, "run only these jobs (default: all)")
flags.DEFINE_bool("quick", False, "tiny shapes everywhere: a plumbing check for a CPU")

PAPER_BATCH = ["--rows=96", "--length=256"]
QUICK_STEP = ["--rows=4", "--length=16", "--warmup=1", "--steps=2",
              "--config.model.dtype=float32"]
QUICK_BIBLE = ["--config.model.num_encoder_layers=1", "--config.model.num_decoder_layers=1",
               "--config.model.d_model=64", "--config.model.d_ff=256", "--config.model.d_k=16",
               "--config.model.d_v=16", "--config.model.num_heads=4",
               "--config.model.dtype=float32", "--config.model.vocab_size=1000",
               "--config.data.vocab_size=1000", "--config.data.tokens_per_batch=512",
               "--config.data.eval_max_examples=32", "--config.eval.bleu_examples=32",
               "--config.train.warmup_steps=100"]
OOM = re.compile(r"RESOURCE_EXHAUSTED|[Oo]ut of memory")


@dataclasses.dataclass
class Job:
  """One process: its name, its argv, and what it printed (filled in by `run`)."""
  name: str
  argv: list[str]
  output: str = ""
  returncode: int | None = None
  seconds: float = 0.0

  @property
  def ok(self) -> bool:
    return self.returncode == 0

  def last_line(self) -> str:
    """The last error line of the output (a Python exception or a tfm error), else its last line."""
    lines = [line.strip() for line in self.output.splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^([\w.]+(Error|Exception)|tfm \w+): ", line)]
    return (errors or lines or ["(no output)"])[-1][:200]


def run(job: Job, out: Path) -> Job:
  """Runs the job from the repository root, keeping its command and output in out/<name>.txt."""
  print(f"[gpu_table] {job.name}: {shlex.join(job.argv)}", flush=True)
  start = time.perf_counter()
  env = {"CUDA_VISIBLE_DEVICES": "0", **os.environ}  # one GPU, unless the caller chose
  done = subprocess.run(job.argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True, check=False, env=env)
  job.seconds, job.output, job.returncode = time.perf_counter() - start, done.stdout, done.returncode
  (out / f"{job.name}.txt").write_text(
      f"$ {shlex.join(job.argv)}\n# exit {job.returncode} after {job.seconds:.0f} s\n\n{job.output}")
  print(f"[gpu_table] {job.name}: exit {job.returncode} after {job.seconds:.0f} s", flush=True)
  return job


def step_job(name: str, config: str, impl: str, quick: bool, out: Path) -> Job:
  """benchmark_step.py for `config` with attention `impl`; doubles the microbatches on OOM."""
  microbatches = 1
  while True:
    job = run(Job(name, [sys.executable, "experiments/benchmark_step.py", f"--config={config}",
                         f"--config.model.attention_impl={impl}",
                         f"--config.train.microbatches={microbatches}",
                         *(QUICK_STEP if quick else PAPER_BATCH)]), out)
    if job.ok or not OOM.search(job.output) or microbatches == 8:
      return job
    microbatches *= 2


def key_values(output: str) -> dict[str, str]:
  """benchmark_step.py's `key  value` lines."""
  pairs = (re.match(r"^([a-z_]+)\s{2,}(.+)$", line) for line in output.splitlines())
  return {m.group(1): m.group(2).strip() for m in pairs if m}


def rate(x: float) -> str:
  """2.56M, 88.9k, 333 (benchmark_step.py prints four figures)."""
  return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}k" if x >= 1e3 else f"{x:.0f}"


def step_row(job: Job) -> str:
  """A table row from a benchmark_step.py job."""
  if not job.ok:
    return f"| {job.name} | failed: {job.last_line()} |"
  v = key_values(job.output)
  mfu = v["mfu"] if v["mfu"].startswith("n/a") else f"{float(v['mfu']):.1%}"
  return (f"| {job.name} | {v['devices']}, {v['batch']}, {v['dtype']}, microbatches "
          f"{v['microbatches']}: {1e3 * float(v['step_seconds']):.1f} ms a step, "
          f"{rate(float(v['all_tokens_per_second']))} tokens/s (source + target), "
          f"{v['tflops_per_step']} model TFLOP a step, MFU {mfu} |")


def flax_rows(job: Job) -> list[str]:
  """compare_flax_wmt.py's own table rows (tfm / flax ratio and both sides' figures)."""
  rows = [line for line in job.output.splitlines() if line.startswith("| train step")]
  if not job.ok or not rows:
    return [f"| {job.name} | failed: {job.last_line()} |"]
  cells = [[cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in rows]
  return [f"| {job.name} | {work}: tfm / flax {ratio} ({detail}) |" for work, ratio, detail in cells]


def beam_row(job: Job) -> str:
  found = re.search(r"^beam .*tokens/s.*$", job.output, re.M)
  if not job.ok or not found:
    return f"| {job.name} | failed: {job.last_line()} |"
  return f"| {job.name} | {found.group(0)} |"


def bible_jobs(minutes: float, quick: bool, out: Path) -> tuple[list[Job], dict]:
  """Times configs/bible_base.py's step, trains it for `minutes` of steps, evaluates it averaged."""
  config = ["--config=configs/bible_base.py", *(QUICK_BIBLE if quick else [])]
  timing = run(Job("bible_base_step", [sys.executable, "experiments/benchmark_step.py", *config,
                                       "--steps=20" if not quick else "--steps=3"]), out)
  if not timing.ok:
    return [timing], {}
  step_s = float(key_values(timing.output)["step_seconds"])
  run_of = bible_base.cadences(bible_base.steps_for(60 * minutes, step_s))
  sizing = {"steps": run_of["train"]["steps"], "step_s": step_s}
  workdir = out / "bible_base"
  shutil.rmtree(workdir, ignore_errors=True)  # a fresh run: never resume an older one
  overrides = [f"--config.{section}.{k}={v}" for section, values in run_of.items()
               for k, v in values.items()]
  train = run(Job("bible_base_train", [sys.executable, "-m", "tfm.cli", "train", *config,
                                       *overrides, f"--workdir={workdir}"]), out)
  if not train.ok:
    return [timing, train], sizing
  evaluate = run(Job("bible_base_eval", [sys.executable, "-m", "tfm.cli", "eval",
                                         f"--workdir={workdir}", "--average=5"]), out)
  return [timing, train, evaluate], sizing


def bible_row(jobs: list[Job], sizing: dict, workdir: Path) -> str:
  failed = [j for j in jobs if not j.ok]
  if failed:
    return f"| {failed[0].name} | failed: {failed[0].last_line()} |"
  _, train, _ = jobs
  bleus = re.findall(r"\[dev\] step (\d+) \| bleu ([\d.]+(?:e[+-]\d+)?)", train.output)
  mfus = [float(m) for m in re.findall(r"^\[train\].*\| mfu ([\d.e+-]+)", train.output, re.M)]
  evaluated = sorted(workdir.glob("eval_dev_*.json"))
  final = json.loads(evaluated[-1].read_text()) if evaluated else {}
  curve = ", ".join(f"{float(b):.1f} at {int(s):,}" for s, b in bleus)
  return (f"| bible_base | {sizing['steps']:,} steps of {1e3 * sizing['step_s']:.1f} ms "
          f"(timed alone; the run took {train.seconds / 60:.1f} minutes with data preparation, "
          f"compilation and evaluations)"
          + (f", training MFU {statistics.median(mfus):.1%}" if mfus else "")
          + f"; dev BLEU {curve}; last 5 checkpoints averaged: sacreBLEU "
          f"{final.get('bleu', float('nan')):.1f}, perplexity {final.get('perplexity', float('nan')):.2f}"
          f" on {final.get('sentences', '?')} dev verses |")


def device_name() -> str:
  """The GPU's name from nvidia-smi (no jax here: this process must not take the GPU's memory)."""
  try:
    names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                           capture_output=True, text=True, check=True, timeout=30).stdout.split("\n")
    return names[0].strip() or "no GPU"
  except (OSError, subprocess.SubprocessError):
    return "no GPU (nvidia-smi found none)"


JOBS = ("step_base_cudnn", "step_base_xla", "step_big_cudnn", "step_big_xla", "flax_base",
        "flax_big", "beam_base", "bible_base")


def job_rows(name: str, out: Path) -> list[str]:
  """Runs job `name` (its processes) and returns its table rows."""
  quick = FLAGS.quick
  if name.startswith("step_"):
    _, size, impl = name.split("_")
    return [step_row(step_job(name, f"configs/{size}.py", impl, quick, out))]
  if name.startswith("flax_"):
    if not FLAGS.flax_wmt_dir:
      return [f"| {name} | skipped: no --flax_wmt_dir |"]
    shape = (["--train_rows=2", "--train_length=16", "--rounds=1", "--calls=1"] if quick else
             ["--train_rows=96", "--train_length=256", "--dtype=bfloat16",
              "--tfm_overrides=model.attention_impl=cudnn"])
    return flax_rows(run(Job(name, [sys.executable, "experiments/compare_flax_wmt.py",
                                    f"--flax_wmt_dir={FLAGS.flax_wmt_dir}",
                                    f"--only=train_{name.split('_')[1]}", *shape]), out))
  if name == "beam_base":
    shape = ["--batch_size=2", "--source_length=8", "--repeats=1"] if quick else []
    return [beam_row(run(Job(name, [sys.executable, "experiments/decode_speed.py",
                                    "--config=configs/base.py", *shape]), out))]
  jobs, sizing = bible_jobs(0.3 if quick else FLAGS.minutes, quick, out)
  return [bible_row(jobs, sizing, out / "bible_base")]


def main(argv):
  del argv
  unknown = sorted(set(FLAGS.jobs or ()) - set(JOBS))
  if unknown:
    raise app.UsageError(f"--jobs: unknown job(s) {', '.join(unknown)}; expected some of "
                         f"{', '.join(JOBS)}")
  device = device_name()
  slug = re.sub(r"[^A-Za-z0-9]+", "-", device).strip("-").lower()
  out = Path(FLAGS.out or ROOT / "experiments/results/gpu" /
             f"{datetime.date.today().isoformat()}_{slug}{'_quick' if FLAGS.quick else ''}")
  out.mkdir(parents=True, exist_ok=True)
  # Rows of earlier runs into the same directory stay (--jobs splits the table over several calls).
  saved = out / "rows.json"
  rows = json.loads(saved.read_text()) if saved.exists() else {}
  for name in JOBS:
    if FLAGS.jobs is None or name in FLAGS.jobs:
      rows[name] = job_rows(name, out)
      saved.write_text(json.dumps(rows, indent=1))
  table = "\n".join([f"Device: {device}{' (--quick: plumbing only, not figures)' if FLAGS.quick else ''}",
                     "", "| job | result |", "|---|---|",
                     *(row for name in JOBS for row in rows.get(name, ())), ""])
  (out / "table.md").write_text(table)
  print(table)
  print(f"[gpu_table] outputs in {out}")


if __name__ == "__main__":
  app.run(main)
