"""The GPU table's loop job (experiments/gpu_table.py, docs/gpu.md): experiments/loop_overhead.py
on configs/bible_base.py and the bundle's Bible corpus, the real training loop against the same
step alone on the same batches, its last steps traced. bible_config gives the Bible runs' flags
(this job's and the bible job's).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from experiments.gpu.step_jobs import QUICK_MODEL
from experiments.gpu.timebox import Runner

LOOP_STEPS = {False: 400, True: 24}  # the loop job's steps (--quick: on a CPU)
LOOP_EVERY = {False: 100, True: 8}  # its dev loss and checkpoint cadence
LOOP_PROFILE = {False: 20, True: 4}  # its last steps traced
QUICK_BIBLE = ["data.tokens_per_batch=512", "data.eval_max_examples=32", "eval.bleu_examples=32",
               "train.warmup_steps=100", "data.num_workers=0"]


def bible_config(bundle: Path, quick: bool) -> list[str] | None:
  """configs/bible_base.py's flags on the bundle's corpus (None without a bundle)."""
  manifest_path = bundle / "manifest.json"
  if not manifest_path.exists():
    return None
  data = json.loads(manifest_path.read_text())["data"]
  # None (a bundle of pairs: no data.text_key) is the config's default, and a flag would read "None"
  # as a string.
  overrides = [f"data.{k}={v}" for k, v in data.items() if v is not None] + [
      f"model.vocab_size={data['vocab_size']}", f"data.data_dir={bundle / 'data'}",
      f"data.vocab_dir={bundle / 'data' / 'vocab'}"]
  if quick:
    overrides += QUICK_MODEL + QUICK_BIBLE
  return ["--config=configs/bible_base.py", *(f"--config.{o}" for o in overrides)]


def no_bundle(bundle: Path) -> str:
  return f"| bible_base | skipped: no bundle at {bundle} (experiments/gpu/make_bundle.py) |"


def loop_rows(runner: Runner, bundle: Path, ends_at: float, quick: bool) -> tuple[list[str], dict]:
  """experiments/loop_overhead.py on configs/bible_base.py (the bundle's corpus): LOOP_STEPS steps
  of the real loop (dev loss and checkpoints every LOOP_EVERY, no dev BLEU), the last
  LOOP_PROFILE traced and summarized, against the same step alone on the same batches. Its output
  goes to OUT/bible.txt (the Bible model's file: OUT holds at most 8)."""
  config = bible_config(bundle, quick)
  if config is None:
    return [no_bundle(bundle).replace("bible_base", "loop_bible_base")], {}
  steps, every = LOOP_STEPS[quick], LOOP_EVERY[quick]
  with tempfile.TemporaryDirectory(prefix="gpu_table_loop_") as tmp:
    result = Path(tmp) / "loop.json"
    run = runner.run("bible", "loop_bible_base", [
        sys.executable, "experiments/loop_overhead.py", *config,
        f"--config.train.steps={steps}", f"--config.train.log_every={min(50, every)}",
        f"--config.train.eval_every={every}", f"--config.train.checkpoint_every={every}",
        "--config.eval.bleu_every=0", f"--profile={LOOP_PROFILE[quick]}",
        f"--workdir={Path(tmp) / 'workdir'}", f"--out={result}"], ends_at)
    numbers = json.loads(result.read_text()) if run.ok and result.exists() else {}
  if not numbers:
    return [f"| loop_bible_base | {run.failure() if not run.ok else 'no figures'} |"], {}
  profile = numbers.get("profile", {})
  gaps = profile.get("device_gaps", {})
  host = profile.get("host_outside_dispatch", {})
  top = profile.get("device_ops", [])[:3]
  traced = ("; traced: " + (f"device idle between steps median {gaps['median_ms']:.2f} ms (max "
                            f"{gaps['max_ms']:.2f})" if gaps.get("count") else "no device gaps")
            + (f", host outside dispatch median {host['median_ms']:.2f} ms" if host.get("count")
               else "")
            + (", top ops " + ", ".join(f"{name[:40]} {share:.0%}" for name, _, share in top)
               if top else "")) if profile.get("trace") else "; no trace"
  row = (f"| loop_bible_base | {numbers['steps_timed']} steps of the real loop (dev loss and "
         f"checkpoints every {every}): {numbers['loop_step_ms']:.1f} ms a step against "
         f"{numbers['alone_step_ms']:.1f} ms for the step alone on the same batches, "
         f"{numbers['added_ms_per_step']:+.1f} ms ({numbers['added_percent']:+.1f}%){traced} |")
  return [row], numbers
