"""The GPU table (docs/gpu.md) in one command, inside a hard time box, on a node with no network.

  python3 experiments/gpu_table.py --out=DIR          # on the GPU node (docs/gpu.md)
  python3 experiments/gpu_table.py --quick --out=DIR  # the plumbing on a CPU: no figures

It runs from the checkout on the node's own Python: tfm and configs from this checkout, and the
packages the node lacks from the bundle's wheels (experiments/gpu/bundle/wheels, built here by
experiments/gpu/make_bundle.py), which it unpacks once into bundle/site-cp3XY and puts on the path
of every job. First the preflight (experiments/gpu/preflight.py, under a minute): a GPU backend,
one tiny train step, one beam search, the device and versions; without a GPU it stops there in one
line (exit 3). Then the jobs (--jobs; by default DEFAULT_JOBS, step_cudnn and loop: about 7.5
minutes on one H100 with the preflight, an estimate from the preflight's and step_cudnn's times on
an H100 and loop's 270 s timeout, as loop has not run on a GPU; one call on a GPU node with a
15-minute time limit), in this order (the most wanted first), each in its own process (a process
holds the GPU's memory until it exits), its output streamed to OUT/<job>.txt:
  step_cudnn  experiments/benchmark_step.py, base then big, the paper's batch (96 x 256 a side) in
              bfloat16 with cuDNN's attention: step time, tokens/s, MFU; a step that runs out of
              memory is retried with twice the microbatches (up to 8)
  loop        experiments/loop_overhead.py on configs/bible_base.py (the bundle's corpus):
              LOOP_STEPS steps of the real training loop against the same step alone on the same
              batches, the last LOOP_PROFILE traced and summarized (top device ops, the device's
              idle time between steps, the host's between dispatches); output in OUT/bible.txt
              (experiments/gpu/loop_job.py)
  variants    base as in step_cudnn, timed once a choice the step makes per platform: the default,
              rbg dropout, the select guard, LayerNorm's autodiff backward, the default
              again; each row its change against the default; output in OUT/step_cudnn.txt
              (experiments/gpu/step_jobs.py)
  stacks      experiments/benchmark_stack.py: configs/table3_v3.py's base under the kernels its GPU
              runs compile with, its train step alone and stacks of 1, 2 and 10 runs at once
              (tfm/train/stack.py); output in OUT/step_cudnn.txt
  step_xla    the same with XLA's attention
  beam        experiments/decode_speed.py: beam 4, batch 32, the paper's base, output tokens/s
  flax        experiments/compare_flax_wmt.py: the Flax example (experiments/flax_wmt/, vendored)
              beside tfm, base and big, the batch and dtype of the step rows, cuDNN on tfm's side
  bible       configs/bible_base.py on the bundle's Bible corpus (token cache, vocabulary, dev
              verses): its step timed (20 steps), trained for what is left of --minutes and of the
              time box, dev BLEU during training, then `tfm eval --average 5` on the dev verses
Time box: --deadline for the whole run; each job stops at its own timeout (--timeouts) or at the
deadline, whichever comes first (its process group is killed), and the next job starts; a job with
too little time left is skipped. OUT/table.md is rewritten after every job, so a run cut off at any
point leaves the rows it finished; OUT/rows.json keeps the rows of earlier runs into the same OUT
(--jobs=bible fills one row later), and the figures as numbers. OUT holds at most 8 files, no
folders: table.md, rows.json, preflight.txt and the jobs' .txt files (loop and bible share
bible.txt, step_cudnn, variants and stacks step_cudnn.txt; the Bible runs' workdirs are temporary
directories).

Every job sees one GPU (CUDA_VISIBLE_DEVICES=0 unless set) and JAX_PLATFORMS=cuda (cpu with
--quick) unless set: a CUDA plugin that does not load fails the preflight instead of running the
table on the CPU. --quick shrinks every model to 1 + 1 layers and every batch to a few rows, in
float32: its figures mean nothing; it shows that every job runs and every figure is found (the
cuDNN rows fail on a CPU, which shows a failed row).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from absl import app, flags

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # configs (bible_base's run sizing), once the bundle's wheels are too
from experiments.gpu.node import carried_site, device_name  # noqa: E402  pylint: disable=wrong-import-position
from experiments.gpu.loop_job import bible_config, loop_rows, no_bundle  # noqa: E402  pylint: disable=wrong-import-position
from experiments.gpu.step_jobs import (QUICK_MODEL, key_values, stack_rows,  # noqa: E402  pylint: disable=wrong-import-position
                                       step_rows, variants_rows)
from experiments.gpu.timebox import Run, Runner  # noqa: E402  pylint: disable=wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "where table.md and the jobs' outputs go (default: "
                    "experiments/results/gpu/<date>_<device>)")
flags.DEFINE_float("deadline", 8.0, "minutes for the whole run, preflight included", lower_bound=0.1)
flags.DEFINE_list("timeouts", [], "JOB=SECONDS, each job's own limit (defaults: TIMEOUTS)")
flags.DEFINE_float("minutes", 10.0, "the most minutes the Bible base model trains",
                   lower_bound=0.01)
flags.DEFINE_bool("quick", False, "tiny shapes on the CPU: a plumbing check, not figures")
flags.DEFINE_string("bundle", str(ROOT / "experiments" / "gpu" / "bundle"),
                    "the bundle's directory (experiments/gpu/make_bundle.py)")
flags.DEFINE_string("flax_wmt_dir", str(ROOT / "experiments" / "flax_wmt"),
                    "the Flax example's directory (default: the vendored copy)")

JOBS = ("step_cudnn", "loop", "variants", "stacks", "step_xla", "beam", "flax", "bible")
# The default run: the preflight, step_cudnn and loop, estimated to fit --deadline 8 on one H100 (one
# call on a GPU node with a 15-minute time limit, the node's start included); the others by --jobs,
# a call each (docs/gpu.md).
DEFAULT_JOBS = ("step_cudnn", "loop")
TIMEOUTS = {"preflight": 90, "step_cudnn": 180, "loop": 270, "variants": 420, "stacks": 240,
            "step_xla": 180,
            "beam": 90, "flax": 330, "bible": 900}
flags.DEFINE_list("jobs", list(DEFAULT_JOBS), "the jobs to run, in the table's order (all: "
                  f"{','.join(JOBS)})")
QUICK_PREFLIGHT_TIMEOUT = 240  # a loaded CPU imports and compiles slowly
MIN_SECONDS = 20  # a job with less time left than this is skipped
BIBLE_OVERHEAD_S = {False: 240, True: 60}  # compilations, 5 dev BLEUs, the averaged evaluation
QUICK_BIBLE_MINUTES = 0.25  # timing, compilations, evaluations around the training


def flax_rows(run: Run) -> list[str]:
  """compare_flax_wmt.py's own table rows (tfm / flax ratio and both sides' figures)."""
  rows = [line for line in run.output.splitlines() if line.startswith("| train step")]
  if not run.ok or not rows:
    return [f"| {run.name} | {run.failure() if not run.ok else 'no rows: ' + run.last_line()} |"]
  cells = [[cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in rows]
  return [f"| {run.name} | {work}: tfm / flax {ratio} ({detail}) |" for work, ratio, detail in cells]


def beam_row(run: Run) -> str:
  found = re.search(r"^beam .*tokens/s.*$", run.output, re.M)
  if not run.ok or not found:
    return f"| {run.name} | {run.failure() if not run.ok else 'no figure: ' + run.last_line()} |"
  return f"| {run.name} | {found.group(0)} |"


class Table:
  """The jobs' rows, written to OUT/table.md and, with their figures as numbers, to OUT/rows.json
  ({"rows": {job: [markdown row]}, "numbers": {job: {figure: value}}}) after every job."""

  def __init__(self, out: Path, quick: bool):
    self.out, self.quick = out, quick
    saved = out / "rows.json"
    saved = json.loads(saved.read_text()) if saved.exists() else {}
    if "rows" not in saved:  # written before the numbers: {job: rows}
      saved = {"rows": saved, "numbers": {}}
    self.rows, self.numbers = saved["rows"], saved.get("numbers", {})
    self.header: list[str] = []

  def set(self, job: str, rows: list[str], numbers: dict | None = None) -> None:
    self.rows[job] = rows
    self.numbers[job] = numbers or {}
    self.write()

  def write(self) -> None:
    note = " (--quick: plumbing only, not figures)" if self.quick else ""
    text = "\n".join([*self.header, "", f"| job{note} | result |", "|---|---|",
                      *(row for name in ("preflight",) + JOBS for row in self.rows.get(name, ())),
                      ""])
    saved = json.dumps({"rows": self.rows, "numbers": self.numbers}, indent=1)
    for name, content in (("rows.json", saved), ("table.md", text)):
      tmp = self.out / f".{name}.tmp"
      tmp.write_text(content)
      os.replace(tmp, self.out / name)


def bible_rows(runner: Runner, bundle: Path, ends_at: float, quick: bool
               ) -> tuple[list[str], dict]:
  """configs/bible_base.py on the bundle's corpus: step timed, trained, evaluated averaged.
  Returns the row and its figures as numbers."""
  from configs import bible_base  # pylint: disable=import-outside-toplevel  (ml_collections)
  config = bible_config(bundle, quick)
  if config is None:
    return [no_bundle(bundle)], {}
  timing = runner.run("bible", "bible_base_step", [
      sys.executable, "experiments/benchmark_step.py", *config,
      "--steps=3" if quick else "--steps=20"], ends_at)
  if not timing.ok:
    return [f"| bible_base | step timing {timing.failure()} |"], {}
  step_s = float(key_values(timing.output)["step_seconds"])
  minutes = min(FLAGS.minutes, QUICK_BIBLE_MINUTES) if quick else FLAGS.minutes
  train_s = min(60 * minutes, min(ends_at, runner.deadline_at) - time.monotonic()
                - BIBLE_OVERHEAD_S[quick])
  if train_s < 10:
    return [f"| bible_base | skipped: {train_s + BIBLE_OVERHEAD_S[quick]:.0f} s left for its "
            "training and evaluations |"], {}
  run_of = bible_base.cadences(bible_base.steps_for(train_s, step_s))
  workdir = Path(tempfile.mkdtemp(prefix="gpu_table_bible_"))
  try:
    cadence = [f"--config.{section}.{k}={v}" for section, values in run_of.items()
               for k, v in values.items()]
    train = runner.run("bible", "bible_base_train", [
        sys.executable, "-m", "tfm.cli", "train", *config, *cadence,
        f"--workdir={workdir}"], ends_at)
    if not train.ok:
      return [f"| bible_base | training {train.failure()} |"], {}
    evaluate = runner.run("bible", "bible_base_eval", [
        sys.executable, "-m", "tfm.cli", "eval", f"--workdir={workdir}", "--average=5"], ends_at)
    evaluated = sorted(workdir.glob("eval_dev_*.json"))
    final = json.loads(evaluated[-1].read_text()) if evaluated else {}
    with open(runner.out / "bible.txt", "a", encoding="utf-8") as f:
      f.write(f"# {evaluated[-1].name if evaluated else 'no eval_dev_*.json'}: "
              f"{json.dumps(final)}\n")
  finally:
    shutil.rmtree(workdir, ignore_errors=True)
  bleus = re.findall(r"\[dev\] step (\d+) \| bleu ([\d.]+(?:e[+-]\d+)?)", train.output)
  mfus = [float(m) for m in re.findall(r"^\[train\].*\| mfu ([\d.e+-]+)", train.output, re.M)]
  curve = ", ".join(f"{float(b):.1f} at {int(s):,}" for s, b in bleus)
  row = (f"| bible_base | {run_of['train']['steps']:,} steps of {1e3 * step_s:.1f} ms (timed "
         f"alone; the run took {train.seconds / 60:.1f} minutes with data, compilation and "
         f"evaluations)" + (f", training MFU {statistics.median(mfus):.1%}" if mfus else "")
         + f"; dev BLEU {curve or 'none logged'}; ")
  numbers = {"steps": run_of["train"]["steps"], "step_alone_ms": 1e3 * step_s,
             "train_minutes": train.seconds / 60,
             "median_training_mfu": statistics.median(mfus) if mfus else None,
             "dev_bleu": {int(s): float(b) for s, b in bleus}}
  if not evaluate.ok:
    return [row + f"averaged evaluation {evaluate.failure()} |"], numbers
  numbers.update(averaged_bleu=final.get("bleu"), averaged_perplexity=final.get("perplexity"))
  return [row + f"last 5 checkpoints averaged: sacreBLEU {final.get('bleu', float('nan')):.1f}, "
          f"perplexity {final.get('perplexity', float('nan')):.2f} on "
          f"{final.get('sentences', '?')} dev verses |"], numbers


def job_rows(name: str, runner: Runner, bundle: Path, ends_at: float) -> tuple[list[str], dict]:
  """The job's table rows and its figures as numbers."""
  quick = FLAGS.quick
  if name.startswith("step_"):
    return step_rows(runner, name.split("_")[1], ends_at, quick)
  if name == "loop":
    return loop_rows(runner, bundle, ends_at, quick)
  if name == "variants":
    return variants_rows(runner, ends_at, quick)
  if name == "stacks":
    return stack_rows(runner, ends_at, quick)
  if name == "beam":
    shape = ["--batch_size=2", "--source_length=8", "--repeats=1",
             *(f"--config.{o}" for o in QUICK_MODEL)] if quick else []
    run = runner.run(name, "beam_base", [sys.executable, "experiments/decode_speed.py",
                                         "--config=configs/base.py", *shape], ends_at)
    return [beam_row(run)], {}
  if name == "flax":
    shape = (["--only=train_small", "--train_rows=2", "--train_length=16", "--rounds=1",
              "--calls=1"] if quick else
             ["--only=train_base,train_big", "--train_rows=96", "--train_length=256",
              "--dtype=bfloat16", "--tfm_overrides=model.attention_impl=cudnn", "--rounds=5"])
    run = runner.run(name, "flax", [sys.executable, "experiments/compare_flax_wmt.py",
                                    f"--flax_wmt_dir={FLAGS.flax_wmt_dir}", *shape], ends_at)
    return flax_rows(run), {}
  return bible_rows(runner, bundle, ends_at, quick)


def parse_timeouts(values: list[str]) -> dict[str, float]:
  """TIMEOUTS with --timeouts' JOB=SECONDS items applied."""
  timeouts = {**TIMEOUTS, **({"preflight": QUICK_PREFLIGHT_TIMEOUT} if FLAGS.quick else {})}
  for item in values:
    name, _, seconds = item.partition("=")
    try:
      value = float(seconds)
    except ValueError:
      value = float("nan")
    if name not in TIMEOUTS or not value > 0:
      raise app.UsageError(f"--timeouts: {item!r} is not JOB=SECONDS with JOB one of "
                           f"{', '.join(TIMEOUTS)} and SECONDS > 0")
    timeouts[name] = value
  return timeouts


def main(argv):
  del argv
  deadline_at = time.monotonic() + 60 * FLAGS.deadline
  unknown = sorted(set(FLAGS.jobs or ()) - set(JOBS))
  if unknown:
    raise app.UsageError(f"--jobs: unknown job(s) {', '.join(unknown)}; expected some of "
                         f"{', '.join(JOBS)}")
  timeouts = parse_timeouts(FLAGS.timeouts)
  bundle = Path(FLAGS.bundle).resolve()
  try:
    site = carried_site(bundle)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  if site:
    sys.path.insert(0, str(site))  # this process imports configs (ml_collections) for the Bible run
  device = "CPU (--quick)" if FLAGS.quick else device_name()
  slug = re.sub(r"[^A-Za-z0-9]+", "-", device).strip("-").lower()
  out = Path(FLAGS.out or ROOT / "experiments/results/gpu" /
             f"{datetime.date.today().isoformat()}_{slug}{'_quick' if FLAGS.quick else ''}")
  out.mkdir(parents=True, exist_ok=True)
  env = {**os.environ, "PYTHONUNBUFFERED": "1",
         "PYTHONPATH": os.pathsep.join([str(ROOT), *([str(site)] if site else []),
                                        *filter(None, [os.environ.get("PYTHONPATH")])])}
  for key, value in (("CUDA_VISIBLE_DEVICES", "0"),  # one GPU, unless the caller chose
                     ("JAX_PLATFORMS", "cpu" if FLAGS.quick else "cuda")):  # never a quiet CPU run
    env[key] = env.get(key) or value
  runner, table = Runner(out, env, deadline_at, ROOT), Table(out, FLAGS.quick)

  preflight = runner.run("preflight", "preflight", [
      sys.executable, "experiments/gpu/preflight.py", *(["--allow_cpu"] if FLAGS.quick else [])],
      time.monotonic() + timeouts["preflight"])
  found = dict(re.findall(r"^(device|versions): (.*)$", preflight.output, re.M))
  table.header = [f"Device: {found.get('device', device)}", f"Versions: {found.get('versions', '?')}",
                  f"Run: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
                  f"--deadline {FLAGS.deadline:g} min, JAX_PLATFORMS={env['JAX_PLATFORMS']}"]
  if not preflight.ok:
    hint = "" if site else f" (no wheels in {bundle}/wheels: experiments/gpu/make_bundle.py)"
    table.set("preflight", [f"| preflight | {preflight.failure()}{hint} |"])
    print(f"[gpu_table] preflight {preflight.failure()}{hint}", flush=True)
    return 3
  ready = re.search(r"^preflight ok in .*$", preflight.output, re.M)
  table.set("preflight", [f"| preflight | {ready.group(0) if ready else 'ok'} |"])
  print(f"[gpu_table] {found.get('device', device)}: preflight ok in {preflight.seconds:.0f} s; "
        f"outputs in {out}", flush=True)
  for name in JOBS:
    if FLAGS.jobs is not None and name not in FLAGS.jobs:
      continue
    if runner.left() < MIN_SECONDS:
      table.set(name, [f"| {name} | skipped: {max(0, runner.left()):.0f} s of --deadline left |"])
      continue
    start = time.monotonic()
    rows, numbers = job_rows(name, runner, bundle, start + timeouts[name])
    table.set(name, rows, numbers)
    print(f"[gpu_table] {name} in {time.monotonic() - start:.0f} s:\n" + "\n".join(rows),
          flush=True)
  print((out / "table.md").read_text(), flush=True)
  return 0


if __name__ == "__main__":
  app.run(main)
