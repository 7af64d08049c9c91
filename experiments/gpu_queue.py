"""The GPU queue: one command works through every job that waits for a GPU, in one call of a few
minutes, starting only what is predicted to end before its deadline, publishing each run as it
ends, and leaving the next call what it could not finish (docs/gpu.md).

  python3 experiments/gpu_queue.py --out=$OUT --deadline=9.5    # on the GPU machine
  .venv/bin/python experiments/gpu_queue.py --import_from=OUT    # here: a call's results in
  .venv/bin/python experiments/gpu_queue.py --prepare            # here: bundles, the next call

The jobs, in this order, each skipped once published (experiments/gpu/queue_jobs.py): Table 3 v3's
runs (configs/table3_v3.py), the positions table (configs/positions.py), its language-model form
(configs/positions.py:lm), then the timing jobs (experiments/gpu/timings.py): the stacks probe
(v3 base alone and as stacks of 1, 2, 10), the forms (guard, dropout PRNG, input, at most 90 s;
the GPU's auto set from them on import), the step speed (base and big at the paper's batch in
bfloat16) and the trained loop against the step alone. A table's job is a `tfm sweep --publish`
of a row's seeds as one stack (or its runs, where the stack does not fit), up to --slots of them at
once on the GPU (NVIDIA's MPS where the machine has it), every run under candidate c's kernels
(experiments/gpu/kernels.py); a timing job runs alone.

Planning (experiments/gpu/plan.py, dispatch.py): each job's seconds are predicted from the table
of measured seconds (experiments/gpu/seconds.json), and a job starts only when the call simulated
with it still ends every job before the horizon (the deadline less the stop's seconds and a
margin); big only at a call's start. The queue plans again whenever a job ends.

At the stop (the deadline less its seconds) every running job gets SIGTERM: its runs save their
step; a stack member evaluated before it is published (tfm sweep publishes each member as its
evaluation lands). OUT receives at most 8 plain files: record.json (where the seconds went:
experiments/gpu/call_record.py; the plan; the jobs; the measurements), runs.tar.gz (every run
published in this call, TABLE/RUN/files), logs.tar.gz (every run's log and every job's output),
rows.json (the timing jobs' rows and figures), queue.txt (this command's output) and carry.tgz.N
(the stopped runs worth resuming, experiments/gpu/carry.py).

--import_from=OUT, here: the runs into experiments/results/<table>/ (a run published before under
the same fingerprint kept, another replaced) with each table's report rebuilt and the call's
share of seconds in its gpu_calls.jsonl; the timing figures into experiments/results/gpu/queue/
(rows.json, table.md; the forms' choice into tfm/train/platform_choices.py's GPU_MEASURED); the
record into experiments/results/gpu/queue/calls.jsonl; its measurements into the seconds table;
the carry into experiments/gpu/carry/. Nothing is committed; an OUT imported twice changes nothing
the second time.

--prepare, here: builds each bundle the next call may reach (experiments/gpu/make_bundle.py; the
tables in order while a call simulated from the published runs has room), then prints the call:
its command line, the folders it must carry, and their size with the checkout against the 64 MiB
that may travel.

--quick: the plumbing on the CPU, tiny configs (the tables' two cheapest rows, 12 steps); give
--results (its runs are no results).

This file holds the flags; the parts are in experiments/gpu/: on_node.py (the call on the GPU
machine), import_call.py (--import_from), prepare_call.py (--prepare), queue_tables.py (the tables
made ready for a call), travel.py (what a call sends) and queue_call.py (the flags as the parts
read them, and the queue's log).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

START = time.monotonic()  # the deadline counts from the process's start
EPOCH0 = time.time()

from absl import app, flags  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from experiments.gpu import queue_jobs  # noqa: E402  pylint: disable=wrong-import-position
from experiments.gpu.import_call import import_call  # noqa: E402  pylint: disable=wrong-import-position
from experiments.gpu.on_node import on_node  # noqa: E402  pylint: disable=wrong-import-position
from experiments.gpu.prepare_call import prepare  # noqa: E402  pylint: disable=wrong-import-position
from experiments.gpu.queue_call import Log, Options  # noqa: E402  pylint: disable=wrong-import-position
from experiments.gpu.seconds import TABLE  # noqa: E402  pylint: disable=wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "on the GPU machine: where the files that come back go")
flags.DEFINE_float("deadline", 9.5, "minutes for the whole command", lower_bound=0.5)
flags.DEFINE_string("import_from", None, "here: a call's returned files (OUT), imported")
flags.DEFINE_bool("prepare", False, "here: build the bundles the next call may reach and print it")
flags.DEFINE_bool("quick", False, "on the CPU: tiny configs, the plumbing (give --results)")
flags.DEFINE_list("jobs", list(queue_jobs.FAMILIES), "the job families, in the queue's order: "
                  f"{', '.join(queue_jobs.FAMILIES)}")
flags.DEFINE_list("rows", None, "the tables' rows (default: every row; --quick: each table's two "
                  "cheapest)")
flags.DEFINE_integer("slots", None, "jobs at once on the GPU (default 4, measured with MPS on an "
                     "H200: experiments/results/gpu/2026-11-27_h200_kernels; --quick 2)",
                     lower_bound=1)
flags.DEFINE_string("seconds", str(TABLE), "the table of measured seconds")
flags.DEFINE_string("results", str(ROOT / "experiments" / "results"), "the results: each table's "
                    "published runs in RESULTS/<table>, the timings' in RESULTS/gpu/queue")
flags.DEFINE_string("bundles", str(ROOT / "experiments" / "gpu"), "the folder of the bundles "
                    "(bundle_table3, bundle_positions, bundle_positions_lm, bundle)")
flags.DEFINE_string("carry_dir", str(ROOT / "experiments" / "gpu" / "carry"), "what a call leaves "
                    "the next (experiments/gpu/carry.py)")
flags.DEFINE_string("root", "/tmp/tfm_queue", "the runs' workdirs (ROOT/<table>/<run>), the jobs' "
                    "logs and the compilation cache")
flags.DEFINE_list("set", [], "config overrides (key=value) for every run of the tables")
flags.DEFINE_enum("mps", "auto", ["auto", "off"], "auto: NVIDIA's MPS where the machine has it")
flags.DEFINE_string("platform_choices", str(ROOT / "tfm" / "train" / "platform_choices.py"),
                    "--import_from: the file whose GPU_MEASURED line the forms' choice rewrites")


def options() -> Options:
  """The flags as the queue's parts read them (experiments/gpu/queue_call.py)."""
  return Options(start=START, epoch0=EPOCH0, deadline=FLAGS.deadline, quick=FLAGS.quick,
                 jobs=tuple(FLAGS.jobs), rows=tuple(FLAGS.rows) if FLAGS.rows else None,
                 slots=FLAGS.slots, seconds=Path(FLAGS.seconds), results=Path(FLAGS.results),
                 bundles=Path(FLAGS.bundles), carry_dir=Path(FLAGS.carry_dir),
                 root=Path(FLAGS.root), set=tuple(FLAGS.set), mps=FLAGS.mps,
                 platform_choices=Path(FLAGS.platform_choices))


def main(argv):
  del argv
  os.environ["JAX_PLATFORMS"] = "cpu"  # this process never takes the GPU; its jobs do
  unknown = sorted(set(FLAGS.jobs) - set(queue_jobs.FAMILIES))
  if unknown:
    raise app.UsageError(f"--jobs: unknown {', '.join(unknown)}; expected some of "
                         f"{', '.join(queue_jobs.FAMILIES)}")
  if FLAGS.quick and FLAGS.results == str(ROOT / "experiments" / "results"):
    raise app.UsageError("--quick: give --results (its runs are no results)")
  try:
    if FLAGS.import_from:
      return import_call(options(), Path(FLAGS.import_from).resolve())
    if FLAGS.prepare:
      return prepare(options(), Log(START))
    if not FLAGS.out:
      raise app.UsageError("--out=DIR is required (or --import_from=OUT, or --prepare)")
    out = Path(FLAGS.out).resolve()
    if out.is_dir() and any(out.iterdir()):  # an earlier call's carry parts would join this one's
      raise app.UsageError(f"--out={out}: not empty; a call writes its files into an empty folder")
    return on_node(options(), Log(START), out)
  except ValueError as e:
    raise app.UsageError(str(e)) from None


if __name__ == "__main__":
  app.run(main)
