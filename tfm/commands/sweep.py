"""`tfm sweep`: train and evaluate every (row, grid point, seed), then our table beside the paper's.

  tfm sweep --config=configs/table3_mini.py --root=DIR [--rows=base,A1] [--seeds=2] [--parallel=2]
  tfm sweep --config=configs/quickstart.py --grid model.num_heads=1,4,8 \\
      --grid train.label_smoothing=0,0.1 --root=DIR [--config.train.steps=300]
  tfm sweep --report --root=DIR        # rebuild results.jsonl, table.md and the figure
  tfm sweep ... --dry_run              # print each run's commands (e.g. one per TPU slice)
  tfm sweep ... --seeds=4 --stack      # each group's seeds trained at once, as one program
  tfm sweep ... --runs=D4-s1,E-s0      # only these runs of the sweep
  tfm sweep ... --slurm [--sbatch_args="--partition=gpu --gpus-per-task=1 --time=8:00:00"]
  tfm sweep --status --root=DIR        # each run of a --slurm sweep: done / running / queued / failed

Rerunning a command skips finished runs and resumes interrupted ones; a failed run is recorded
with its error and the others go on (tfm/sweep/execute.py). Results: DIR/results.jsonl (one line
per run), DIR/table.md and DIR/table3.png (tfm/sweep/report.py); every run that ends well writes its
hyperparameters and final figures for TensorBoard's HParams dashboard, so `tensorboard --logdir
DIR` compares the runs (tfm/sweep/hparams.py). --slurm submits the unfinished
runs as one SLURM job array instead, one task per run, each running `tfm sweep ... --run_index=I`
(tfm/sweep/slurm.py, docs/cluster.md). --stack trains the unfinished runs that differ only in their
seeds and in scalars that change no shape (dropout rates, label smoothing, the learning rate: a
row's seeds, Table 3's base with D1-D4, a grid over a rate) as one stack, `tfm train --seeds` or
`--members` (tfm/train/stack.py), in one share: for small models that fill a GPU no better one at
a time; each run keeps its workdir and its result.
"""

from __future__ import annotations

import functools
import glob
import os
import shlex
import shutil
import sys

from absl import flags
from ml_collections import config_flags

from tfm import config as config_lib
from tfm import storage, tasks
from tfm.commands import UsageError
from tfm.commands.sweep_results import SweepResults
from tfm.sweep import execute, publish, report, slurm, stacking
from tfm.sweep.shares import device_shares
from tfm.sweep.result import RunResult
from tfm.sweep.runs import Run, expand, parse_grid, stack_train_argv

COMMAND = "sweep_command.txt"  # the command that ran the sweep, for the table's header


def define_flags(fv: flags.FlagValues):
  flags.DEFINE_string("root", None, "one workdir per run under this directory, and the results",
                      flag_values=fv)
  flags.DEFINE_list("rows", None, "rows of a table config to run (default: every row)",
                    flag_values=fv)
  flags.DEFINE_list("runs", None, "only these runs of the sweep, by name (ROW-sI; a grid point's "
                    "as the sweep names it): its other runs are neither trained nor taken (a GPU "
                    "queue's job, experiments/gpu_queue.py)", flag_values=fv)
  flags.DEFINE_multi_string("grid", [], "SECTION.KEY=V1,V2,...: runs for every value (several "
                            "--grid flags: every combination)", flag_values=fv)
  flags.DEFINE_integer("seeds", 1, "runs per row and grid point, with seeds 0..N-1 (train.seed "
                       "and data.shuffle_seed)", lower_bound=1, flag_values=fv)
  flags.DEFINE_enum("order", "rows", ["rows", "seeds"], "rows: each row's seeds one after the "
                    "other; seeds: every row's seed 0, then every row's seed 1, ... (a sweep cut "
                    "short has every row once)", flag_values=fv)
  flags.DEFINE_integer("parallel", 1, "runs (with --stack: stacks) at once, each on its share of "
                       "the devices", lower_bound=1, flag_values=fv)
  flags.DEFINE_boolean("stack", False, "train the unfinished runs that differ only in seeds, "
                       "dropout rates, label smoothing and learning rate as one stack (tfm train "
                       "--seeds or --members: one step for all, each run in its own workdir)",
                       flag_values=fv)
  flags.DEFINE_integer("stack_most", 0, "with --stack: at most this many runs a stack (a stack "
                       "of K holds about K runs' memory); 0: all the runs that may stack",
                       lower_bound=0, flag_values=fv)
  flags.DEFINE_integer("runs_per_gpu", 1, "with GPUs: up to this many runs on each GPU at once, "
                       "each with its part of the GPU's memory (small models; docs/table3.md)",
                       lower_bound=1, flag_values=fv)
  flags.DEFINE_integer("eval_limit", None, "dev pairs decoded for BLEU (default eval.bleu_examples; "
                       "0 = all)", lower_bound=0, flag_values=fv)
  flags.DEFINE_string("publish", None, "also keep each finished run's result, evaluation and log, "
                      "the vocabulary and the report in this directory (e.g. one committed under "
                      "experiments/results/); a run whose published result matches its config is "
                      "taken from there instead of trained (tfm/sweep/publish.py)", flag_values=fv)
  flags.DEFINE_boolean("report", False, "only rebuild the results from finished runs in --root",
                       flag_values=fv)
  flags.DEFINE_boolean("dry_run", False, "print the runs' commands instead of running them",
                       flag_values=fv)
  flags.DEFINE_boolean("slurm", False, "submit the unfinished runs as one SLURM job array (one "
                       "task per run; --parallel K: K tasks at once) and return", flag_values=fv)
  flags.DEFINE_string("sbatch_args", "", "with --slurm: sbatch options for every task, e.g. "
                      "\"--partition=gpu --gpus-per-task=1 --time=8:00:00\"", flag_values=fv)
  flags.DEFINE_boolean("status", False, "each run of the --slurm sweep in --root: done, running, "
                       "queued or failed", flag_values=fv)
  flags.DEFINE_integer("run_index", None, "run only the sweep's run of this index (what each "
                       "task of a --slurm array runs)", lower_bound=0, flag_values=fv)


def _command_overrides(fv: flags.FlagValues) -> list[str]:
  return [f"{k}={v}" for k, v in config_flags.get_override_values(fv["config"]).items()]


def _runs(fv: flags.FlagValues, config: config_lib.Config) -> list[Run]:
  path = config_lib.config_file(fv)
  if config.rows is None:
    if fv.rows:
      raise UsageError(f"--rows: {path} is not a table config (it has no rows)")
    rows = [None]
    if config.row is not None:  # FILE:ROW, one row of a table: the run is named after it
      path, rows = path.rpartition(":")[0], [config.row]
  else:
    try:
      config_lib.check_rows(fv.rows or (), config.rows, path)
    except ValueError as e:
      raise UsageError(f"--rows: {e}") from None
    rows = list(fv.rows or config.rows)
  try:
    grid = parse_grid(fv.grid)
  except ValueError as e:
    raise UsageError(str(e)) from None
  runs = expand(path, rows, grid, fv.seeds, _command_overrides(fv))
  if fv.runs is not None:
    unknown = sorted(set(fv.runs) - {r.name for r in runs})
    if unknown:
      raise UsageError(f"--runs: {', '.join(unknown)} not among this sweep's runs "
                       f"({', '.join(r.name for r in runs)})")
    runs = [r for r in runs if r.name in fv.runs]
  return sorted(runs, key=lambda r: r.seed) if fv.order == "seeds" else runs


def _prepare_data(configs) -> None:
  """Every distinct dataset and vocabulary, once, before any run starts."""
  from tfm.data import sources, vocabulary  # pylint: disable=import-outside-toplevel
  for data, task in {(c.data, c.task) for c in configs}:  # an mlm vocabulary holds <mask>
    source = sources.DataSource.of(data)
    sources.prepare(source)
    tok = vocabulary.get_tokenizer(data, source=source, task=tasks.get(task))
    for c in configs:
      if (c.data, c.task) == (data, task):
        vocabulary.check_size(c.data, tok.vocab_size, c.model.vocab_size, tok.sentinels)


def _root(fv: flags.FlagValues) -> str:
  if not fv.root:
    raise UsageError("--root is required (one workdir per run and the results go there)")
  if storage.is_remote(fv.root):
    raise UsageError(f"--root {fv.root}: expected a local directory (the sweep runs its rows as "
                     "local processes that log there); copy run directories from elsewhere into "
                     "one local root and use --report to join them")
  return os.path.abspath(fv.root)


def _sbatch_args(fv: flags.FlagValues) -> list[str]:
  if fv.sbatch_args and not fv.slurm:
    raise UsageError("--sbatch_args goes with --slurm (the options of the sweep's SLURM job array)")
  try:
    return shlex.split(fv.sbatch_args)
  except ValueError as e:
    raise UsageError(f"--sbatch_args {fv.sbatch_args!r}: {e}") from None


def run(fv: flags.FlagValues, config: config_lib.Config | None):
  root = _root(fv)
  sbatch_args = _sbatch_args(fv)
  if fv.status:
    return _status(root)
  if fv.report:
    return _report(fv, root)
  if config is None:
    raise UsageError("--config=FILE[:ARG] is required (or --report, --status)")
  if fv.slurm and fv.publish:
    raise UsageError("--publish goes with a local sweep: a --slurm array's tasks run elsewhere; "
                     "publish their finished runs with a local sweep of the same flags later")
  if fv.stack_most and not fv.stack:
    raise UsageError("--stack_most goes with --stack (the most runs a stack trains at once)")
  if fv.slurm and fv.stack:
    raise UsageError("--stack goes with a local sweep: a --slurm array runs one run a task")
  if fv.slurm and shutil.which("sbatch") is None:
    raise UsageError("--slurm: no sbatch on PATH; run it on a SLURM cluster's login node (Debian "
                     "packages slurm-client or slurm-wlm)")
  import jax  # pylint: disable=import-outside-toplevel
  jax.config.update("jax_platforms", "cpu")  # the runs own the accelerators; this process counts

  runs = _runs(fv, config)
  if fv.run_index is not None and fv.run_index >= len(runs):
    raise UsageError(f"--run_index={fv.run_index}: this sweep has runs 0..{len(runs) - 1}")
  vocab_dir = os.path.join(root, "vocab") if config.data.vocab_dir is None else None
  configs = {r: r.load(vocab_dir) for r in runs}  # every config validated before anything runs
  # Dev pairs BLEU decodes (0: all); None for lm and mlm runs, which have no BLEU.
  eval_limit = lambda r: (None if not configs[r].translates else configs[r].eval.bleu_examples
                          if fv.eval_limit is None else fv.eval_limit)
  from tfm.train.stack import stack_class  # pylint: disable=import-outside-toplevel
  stack_key = lambda r: stack_class(configs[r])  # runs that may train as one stack
  if fv.dry_run and not fv.slurm:
    for group in stacking.groups(runs, fv.stack, fv.stack_most, stack_key):
      workdirs = [os.path.join(root, r.name) for r in group]
      train = stack_train_argv(group, root, vocab_dir, write=False)  # one run: its own
      print(f"# {', '.join(r.name for r in group)}\ntfm {' '.join(train)}")
      for r, workdir in zip(group, workdirs):
        print(f"tfm {' '.join(execute.eval_argv(workdir, eval_limit(r)))}")
    return None
  results = SweepResults(runs, configs, config_lib.load_config(config_lib.config_file(fv)), eval_limit)
  if fv.slurm:
    return _submit(fv, root, sbatch_args, runs, configs, results)
  run_all = functools.partial(execute.run_all, root=root, vocab_dir=vocab_dir,
                              eval_limit_of=eval_limit, steps_of=lambda r: configs[r].train.steps,
                              describe=results.describe)
  record_end = _recorder(results, root, runs, configs)
  if fv.run_index is not None:  # one task of a --slurm array: data and command are the submitter's
    done = run_all([runs[fv.run_index]], shares=device_shares(1), on_result=record_end)
    return 1 if any(not r.ok for r in done) else None  # no report: tasks run at once
  shares = device_shares(fv.parallel, fv.runs_per_gpu)
  os.makedirs(root, exist_ok=True)
  with open(os.path.join(root, COMMAND), "w", encoding="utf-8") as f:
    f.write(_command() + "\n")
  published = os.path.abspath(fv.publish) if fv.publish else None
  vocab_dirs = sorted({c.data.vocab_dir for c in configs.values()})
  if published:
    for d in vocab_dirs:
      publish.restore_vocab(published, d)
  _prepare_data(list(configs.values()))
  on_result = record_end
  if published:
    publish_run = _publisher(runs, configs, results, root, published, vocab_dirs)
    on_result = lambda result: (record_end(result), publish_run(result))
  try:
    run_all(runs, shares=shares, on_result=on_result, stack=fv.stack, stack_most=fv.stack_most,
            stack_key=stack_key)
  finally:
    gathered = execute.collect(root)
    if gathered:
      _write(gathered, root)
    if published and execute.collect(published):
      _write(execute.collect(published), published, quiet=True)
  names = {r.name for r in runs}
  failed = [r.name for r in gathered if r.name in names and not r.ok]
  if failed:
    print(f"tfm sweep: {len(failed)} of {len(runs)} runs failed ({', '.join(failed)}); their errors "
          f"are in {os.path.join(root, 'table.md')}; rerun the command to retry them",
          file=sys.stderr)
    return 1
  return None


def _recorder(results: SweepResults, root: str, runs: list[Run], configs: dict):
  """What records a run's end (its HParams records for TensorBoard, its final figures in its
  MLflow / W&B run). The trackers of train.trackers are checked now, and each run that has MLflow
  or W&B is told the sweep's name (ROOT's) and its row, group and seed (tfm/train/trackers/__init__.py)."""
  from tfm.train import trackers  # pylint: disable=import-outside-toplevel
  checked = set()
  for r in runs:
    train = configs[r].train
    if not any(n != "tensorboard" for n in train.trackers):
      continue
    if train not in checked:
      trackers.check(train, os.path.join(root, r.name))
      checked.add(train)
    trackers.write_sweep_tags(os.path.join(root, r.name), os.path.basename(os.path.normpath(root)),
                              r.row, r.group, r.seed)
  records, figures = results.to_tensorboard(root, runs), results.to_trackers(root)
  return lambda result: (records(result), figures(result))


def _publisher(runs: list[Run], configs: dict, results: SweepResults, root: str, published: str,
               vocab_dirs: list[str]):
  """--publish: takes the published runs that match into root, publishes the vocabulary and the
  command; returns what publishes each run that finishes, with the report."""
  taken = publish.take_published(
      [(r.name, results.fingerprint(r), configs[r].train.steps) for r in runs], root, published)
  if taken:
    print(f"[sweep] {len(taken)} finished runs taken from {published}: {', '.join(taken)}")
  for d in vocab_dirs:
    publish.publish_vocab(d, published)
  storage.write_atomically(os.path.join(published, COMMAND), _command() + "\n")

  def on_result(result: RunResult) -> None:
    if result.ok:
      publish.publish_run(os.path.join(root, result.name), published)
      _write(execute.collect(published), published, quiet=True)
  return on_result


def _report(fv: flags.FlagValues, root: str) -> None:
  """--report: results.jsonl, table.md and the figure from the finished and failed runs."""
  if glob.glob(os.path.join(root, slurm.RECORDS, "*.json")) and shutil.which("squeue"):
    slurm.states(root)  # records the failures of array tasks that ended without a result
  results = execute.collect(root)
  if not results:
    raise ValueError(f"--root {fv.root}: no run results found (expected */{execute.RESULT})")
  _write(results, root)


def _task_argv(fv: flags.FlagValues, root: str) -> list[str]:
  """This sweep's flags, as each array task repeats them (without --slurm)."""
  argv = ["sweep", f"--config={config_lib.config_file(fv)}"]
  argv += [f"--config.{o}" for o in _command_overrides(fv)] + [f"--root={root}"]
  argv += [f"--rows={','.join(fv.rows)}"] if fv.rows else []
  argv += [f"--grid={g}" for g in fv.grid] + [f"--seeds={fv.seeds}"]
  argv += [f"--runs={','.join(fv.runs)}"] if fv.runs is not None else []  # --run_index counts these
  argv += [f"--order={fv.order}"] if fv.order != "rows" else []  # --run_index counts in this order
  return argv + ([f"--eval_limit={fv.eval_limit}"] if fv.eval_limit is not None else [])


def _submit(fv: flags.FlagValues, root: str, user_args: list[str], runs: list[Run], configs: dict,
            results: SweepResults) -> None:
  """--slurm: the unfinished runs as one held job array, released once the data is ready."""
  steps = {r: configs[r].train.steps for r in runs}
  unfinished = [i for i, r in enumerate(runs)
                if not execute.is_finished(os.path.join(root, r.name), steps[r])]
  queued = slurm.in_queue(root)  # an earlier submission's tasks, still queued or running
  pending = [i for i in unfinished if runs[i].name not in queued]
  if not pending:
    print(f"[sweep] nothing to submit: of the {len(runs)} runs under {root}, "
          f"{len(runs) - len(unfinished)} are finished and {len(unfinished)} queued or running; "
          f"tfm sweep --status --root={root} shows them")
    return
  throttle = fv.parallel if fv["parallel"].present else None
  array = slurm.array_spec(pending, throttle)
  argv = slurm.sbatch_argv(root, array, user_args, os.getcwd())
  script = slurm.task_script(sys.executable, _task_argv(fv, root))
  if fv.dry_run:
    print(f"{shlex.join(argv)} <<'EOF'\n{script}EOF")
    return
  job = slurm.submit_held(argv, script, user_args)
  try:  # the array waits, held, for its data; a failure here leaves no job behind
    _prepare_data(list(configs.values()))
    slurm.write_record(root, job, [
        dict(index=i, name=r.name, steps=steps[r], submitted=i in pending,
             description=results.static(r, 0.0).to_json()) for i, r in enumerate(runs)])
    with open(os.path.join(root, COMMAND), "w", encoding="utf-8") as f:
      f.write(_command() + "\n")
  except BaseException:
    slurm.cancel(job)
    raise
  held = any(a in ("-H", "--hold") for a in user_args)  # the user's own hold: theirs to release
  if not held:
    slurm.release(job)
  print(f"[sweep] submitted {len(pending)} of {len(runs)} runs as SLURM job {job} (array {array}"
        + (f", held: scontrol release {job} starts it" if held else "") + "); task output: "
        f"{slurm.task_log(root, job, 'I')} for run I, each run's own log: "
        f"{os.path.join(root, 'NAME', execute.LOG)}")
  for i in pending:
    print(f"[sweep]   task {job}_{i}: {runs[i].name}")
  print(f"[sweep] tfm sweep --status --root={root} shows where each run stands; tfm sweep --report "
        f"--root={root} gathers the results")


def _status(root: str) -> None:
  """--status: one line per run of the --slurm sweep in root, then the counts."""
  found = slurm.states(root)
  width = max(len(s.name) for s in found)
  for s in found:
    print(f"{s.name:<{width}}  {s.state:<7}  {s.detail}")
  counts = {k: sum(s.state == k for s in found) for k in ("done", "running", "queued", "failed")}
  print(", ".join(f"{n} {k}" for k, n in counts.items()) + f" of {len(found)} runs")


def _command() -> str:
  """This command line, as a user would type it again."""
  return " ".join(["tfm"] + sys.argv[1:])


def _write(results, root: str, quiet: bool = False) -> None:
  path = os.path.join(root, COMMAND)
  command = open(path, encoding="utf-8").read().strip() if os.path.exists(path) else None
  paths = report.write_report(results, root, command)
  if not quiet:
    print(open(paths[1], encoding="utf-8").read())
  print("written: " + ", ".join(paths))
