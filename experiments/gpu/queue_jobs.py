"""The GPU queue's jobs (experiments/gpu_queue.py), in the queue's order: the table configs' runs
not yet published (Table 3 v3, the positions table, its language-model form), then the timing jobs
(the stacks probe, the forms, the speed jobs), those without figures yet.

A table's job is one `tfm sweep` of some of its runs (--runs): a row's seeds as one stack (tfm sweep
--stack: one start and one compilation for both, tfm/train/stack.py), which the planner may split
into its runs where the stack does not fit; runs resuming from a step (a checkpoint carried from
an earlier call, experiments/gpu/carry.py, or left in this machine's root) stack with the row's
runs at the same step alone, as the sweep stacks them. Rows go longest first (big first: a `first`
job, which starts only at a call's start). A run is published when experiments/results/<table>/
holds its finished result under the fingerprint it would have now (tfm/sweep/publish.py), exactly
as the sweep itself takes it.

A timing job runs as `python experiments/gpu/timings.py NAME` (exclusive: it needs the GPU alone);
it is done when experiments/results/gpu/queue/rows.json holds its figures.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from experiments.gpu import plan as plan_lib
from experiments.gpu.seconds import Seconds

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "experiments" / "results"
TIMING_ROWS = RESULTS / "gpu" / "queue" / "rows.json"


@dataclasses.dataclass(frozen=True)
class Table:
  name: str  # its results folder, its key in the seconds table, its root
  config: str  # tfm sweep's --config
  first_row: str  # the bundle's row (make_bundle.py --config=CONFIG:ROW)
  bundle: str  # its bundle's folder under experiments/gpu/


TABLES = (Table("table3_v3", "configs/table3_v3.py", "base", "bundle_table3"),
          Table("positions", "configs/positions.py", "sinusoidal", "bundle_positions"),
          Table("positions_lm", "configs/positions.py:lm", "lm_sinusoidal", "bundle_positions_lm"))
# Timing jobs: their bundle (None: the carried wheels alone, from any bundle).
TIMINGS = {"stacks": None, "forms": "bundle_table3", "speed_step": None, "speed_loop": "bundle"}
FAMILIES = tuple(t.name for t in TABLES) + tuple(TIMINGS)
SEEDS = 2  # the tables' protocols: 2 seeds a row
QUICK = ["train.steps=12", "train.warmup_steps=4", "train.log_every=6", "train.eval_every=6",
         "train.checkpoint_every=6", "data.tokens_per_batch=256", "data.eval_max_examples=16",
         "eval.batch_size=4", "eval.beam_size=2", "eval.max_extra_length=4", "data.num_workers=0"]
QUICK_EVAL_LIMIT = 4  # --quick: BLEU on 4 dev pairs


@dataclasses.dataclass(frozen=True)
class RunInfo:
  """One run of a table as the queue sees it."""
  table: Table
  name: str
  row: str
  steps: int
  eval_every: int
  flops_ratio: float  # its training FLOPs over the table's first row's
  fingerprint: str
  published: bool
  resumes_from: int = 0  # the step of a carried checkpoint it resumes from (0: none)


@dataclasses.dataclass(frozen=True)
class Work:
  """What a queue job runs: a sweep of `runs` of `table`, or the timing job `timing`."""
  table: Table | None = None
  runs: tuple[str, ...] = ()
  timing: str | None = None


def table_runs(table: Table, overrides: list[str], eval_limit: int | None, rows: list[str] | None,
               publish: Path, resumes: dict[str, int]) -> list[RunInfo]:
  """The table's runs (rows x SEEDS; `rows`: these rows only), longest row first, each with its
  fingerprint under `overrides` (the bundle's data, the kernels' precision, --quick's) and whether
  `publish` holds it finished. resumes: run name -> the step its carried checkpoint reached."""
  # pylint: disable=import-outside-toplevel
  from experiments.gpu.published import published_fingerprint
  from tfm import config as config_lib
  from tfm import tasks
  from tfm.data import vocabulary
  from tfm.sweep import publish as publish_lib
  from tfm.sweep.runs import Run
  from tfm.train import flops
  rows = rows or list(config_lib.load_config(str(ROOT / table.config)).rows)

  def step_flops(run: Run) -> tuple[float, config_lib.Config]:
    c = config_lib.load_config(str(ROOT / run.spec), run.config_overrides())
    return flops.train_flops(c.model, 128, 128), c

  first, _ = step_flops(Run(table.config, table.first_row, (), 0, tuple(overrides)))
  runs = []
  for row in rows:
    for seed in range(SEEDS):
      run = Run(table.config, row, (), seed, tuple(overrides))
      per_step, c = step_flops(run)
      limit = (c.eval.bleu_examples if eval_limit is None else eval_limit) if c.translates else None
      vocab = vocabulary.get_tokenizer(c.data, task=tasks.get(c.task), train=False).model_sha256
      fingerprint = publish_lib.fingerprint(c, vocab, limit)
      runs.append(RunInfo(table, run.name, row, c.train.steps, c.train.eval_every, per_step / first,
                          fingerprint, published_fingerprint(publish / run.name) == fingerprint,
                          resumes.get(run.name, 0)))
  out = sorted(runs, key=lambda r: -r.flops_ratio * r.steps)  # the longest first, stably
  return out


def table_jobs(runs: list[RunInfo], seconds: Seconds, quick: bool, slack: float = 0.0
               ) -> tuple[list[plan_lib.Job], dict[str, Work]]:
  """The unpublished runs as jobs, in `runs`' order: a row's seeds at one step (fresh, or resuming
  from one) as one stack, split into its runs where it does not fit. Big (3x base's steps, the
  longest) is a `first` job: it starts only at a call's start. slack: each job's predicted seconds taken this
  much longer (0.05: 5%). Returns the jobs and each job's (and part's) work, by its name."""
  out, works, by_row = [], {}, {}
  for r in runs:
    if not r.published:
      by_row.setdefault(r.row, []).append(r)
  for row, members in by_row.items():
    table = members[0].table

    def job(group: list[RunInfo]) -> plan_lib.Job:
      steps = group[0].steps - group[0].resumes_from
      cost = seconds.train_cost(table.name, steps, group[0].eval_every, group[0].flops_ratio,
                                len(group))
      cost = plan_lib.Cost(*(part * (1 + slack) for part in dataclasses.astuple(cost)))
      return plan_lib.Job(f"{table.name}:{','.join(r.name for r in group)}", cost,
                          first=row == "big" and not quick)

    at: dict[int, list[RunInfo]] = {}  # the runs resuming from one step (0: fresh) stack
    for r in members:
      works[job([r]).name] = Work(table, (r.name,))
      at.setdefault(r.resumes_from, []).append(r)
    for group in at.values():
      if len(group) > 1:
        out.append(dataclasses.replace(job(group), split=tuple(job([r]) for r in group)))
        works[out[-1].name] = Work(table, tuple(r.name for r in group))
      else:
        out.append(job(group))
  return out, works


def timing_done(name: str, rows_path: Path = TIMING_ROWS) -> bool:
  """Whether the timing job's figures are published (rows.json's numbers, without an error)."""
  if not rows_path.exists():
    return False
  numbers = json.loads(rows_path.read_text()).get("numbers", {}).get(name)
  return bool(numbers) and not numbers.get("error")


def timing_jobs(names: list[str], seconds: Seconds, rows_path: Path = TIMING_ROWS
                ) -> tuple[list[plan_lib.Job], dict[str, Work]]:
  """The timing jobs of `names` without published figures: exclusive, their seconds the table's."""
  jobs = [plan_lib.Job(f"timing:{n}", plan_lib.Cost(seconds[f"job/{n}"], 0.0, 0.0), exclusive=True)
          for n in names if not timing_done(n, rows_path)]
  return jobs, {j.name: Work(timing=j.name.split(":", 1)[1]) for j in jobs}


def sweep_argv(work: Work, root: Path, publish: Path, overrides: list[str], cache: Path,
               slots: int, quick: bool) -> list[str]:
  """`tfm sweep` of the job's runs of its table (one job: --parallel=1; on a GPU its share of the
  GPU's memory, 1 / slots of it)."""
  rows = sorted({name.rsplit("-s", 1)[0] for name in work.runs})
  argv = [sys.executable, "-m", "tfm.cli", "sweep", f"--config={work.table.config}",
          f"--root={root}", f"--publish={publish}", f"--seeds={SEEDS}", f"--rows={','.join(rows)}",
          f"--runs={','.join(work.runs)}", *(["--stack"] if len(work.runs) > 1 else []),
          *(f"--config.{o}" for o in overrides), f"--config.train.compilation_cache_dir={cache}",
          "--parallel=1"]
  if quick:
    return argv + [f"--eval_limit={QUICK_EVAL_LIMIT}"]
  return argv + ([f"--runs_per_gpu={slots}"] if slots > 1 else [])
