"""The GPU queue's timing jobs, each a process of its own (experiments/gpu_queue.py starts them):

  python experiments/gpu/timings.py NAME --out=FILE --logs=DIR [--quick] [--bundle=DIR]

  stacks      Table 3 v3's base alone and as stacks of 1, 2 and 10 runs (experiments/
              benchmark_stack.py under its GPU runs' kernels: step_jobs.stack_rows)
  forms       the forms a GPU run may take, timed against each other (experiments/gpu/forms.py:
              train.guard, train.dropout_prng, train.input; at most forms.LIMIT_S seconds), on
              Table 3 v3's base with its bundle, and the rule's choice of the GPU's auto
  speed_step  base and big at the paper's batch (96 x 256 tokens a side) in bfloat16 with cuDNN's
              attention (step_jobs.step_rows)
  speed_loop  the trained loop against the step alone (Bible base on its bundle: loop_job)

Each writes {"rows": [markdown rows], "numbers": {figures}} to --out (numbers {"error": ...} where
it found none), and its processes' output to DIR/timing_NAME.txt. The processes run on the GPU
alone (the queue starts nothing beside a timing job).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from absl import app, flags

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments.gpu import forms, loop_job, step_jobs  # noqa: E402  pylint: disable=wrong-import-position
from experiments.gpu.timebox import Runner  # noqa: E402  pylint: disable=wrong-import-position

NAMES = ("stacks", "forms", "speed_step", "speed_loop")
# Each job's processes are stopped here (then SIGTERM, SIGKILL 10 s later: experiments/gpu/timebox.py)
LIMITS = {"stacks": 240, "forms": forms.LIMIT_S - 10, "speed_step": 180, "speed_loop": 270}

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "the JSON file of the job's rows and figures")
flags.DEFINE_string("logs", None, "where its processes' output goes (timing_NAME.txt)")
flags.DEFINE_bool("quick", False, "tiny shapes on the CPU: the plumbing, no figures")
flags.DEFINE_string("bundle", None, "the job's bundle (forms: Table 3 v3's; speed_loop: Bible "
                    "base's)")
flags.DEFINE_multi_string("set", [], "forms: config overrides of the timed base (the bundle's "
                          "data, the kernels' precision)")


def forms_rows(runner: Runner, ends_at: float, quick: bool) -> tuple[list[str], dict]:
  """forms.py in one process; the forms it timed before its limit, and the rule's choice."""
  run = runner.run("timing_forms", "forms", [
      sys.executable, "experiments/gpu/forms.py", *(["--quick"] if quick else []),
      *(f"--set={o}" for o in FLAGS.set)], ends_at)
  timed = {}
  for line in run.output.splitlines():
    if line.startswith('{"form"'):
      found = json.loads(line)
      timed[found["form"]] = found["step_ms"]
  rule = forms.choose(timed)
  if not timed:
    return [f"| forms | {run.failure() if not run.ok else 'no figures'} |"], {
        "error": run.failure() if not run.ok else "no figures"}
  cells = ", ".join(f"{name} {ms:.3f} ms" if ms is not None else f"{name} no figure"
                    for name, ms in timed.items())
  chosen = (", ".join(f"train.{k}={v}" for k, v in rule["chosen"].items()) if rule
            else "none (the auto form was not timed twice)")
  process = "" if run.ok else f" (the process: {run.failure()})"
  numbers = {"step_ms": timed, **rule}
  if not rule:  # no choice without the auto form timed twice: the job runs again
    numbers["error"] = "the auto form was not timed twice"
  return [f"| forms | Table 3 v3 base, the real loop: {cells}; the rule's choice for the GPU's "
          f"auto: {chosen}{process} |"], numbers


def main(argv):
  if len(argv) != 2 or argv[1] not in NAMES:
    raise app.UsageError(f"expected one of {', '.join(NAMES)}")
  if not FLAGS.out or not FLAGS.logs:
    raise app.UsageError("--out=FILE and --logs=DIR are required")
  name, quick = argv[1], FLAGS.quick
  logs = Path(FLAGS.logs)
  logs.mkdir(parents=True, exist_ok=True)
  ends_at = time.monotonic() + LIMITS[name]
  runner = Runner(logs, dict(os.environ), ends_at, ROOT)
  if name == "stacks":
    rows, numbers = step_jobs.stack_rows(runner, ends_at, quick)
  elif name == "forms":
    rows, numbers = forms_rows(runner, ends_at, quick)
  elif name == "speed_step":
    # cuDNN's attention takes no float32: --quick's CPU steps use XLA's
    rows, numbers = step_jobs.step_rows(runner, "xla" if quick else "cudnn", ends_at, quick)
    numbers = numbers if any(numbers.values()) else {"error": rows[0]}
  else:
    rows, numbers = loop_job.loop_rows(runner, Path(FLAGS.bundle or ""), ends_at, quick)
  if not numbers:
    numbers = {"error": rows[0] if rows else "no figures"}
  tmp = Path(FLAGS.out).with_suffix(".tmp")
  tmp.write_text(json.dumps({"rows": rows, "numbers": numbers}, indent=1) + "\n")
  tmp.replace(FLAGS.out)
  return 0 if "error" not in numbers else 1


if __name__ == "__main__":
  app.run(main)
