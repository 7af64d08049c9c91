"""`tfm sweep`: train and evaluate every (row, grid point, seed), then our table beside the paper's.

  tfm sweep --config=configs/table3_mini.py --root=DIR [--rows=base,A1] [--seeds=2] [--parallel=2]
  tfm sweep --config=configs/quickstart.py --grid model.num_heads=1,4,8 \\
      --grid train.label_smoothing=0,0.1 --root=DIR [--config.train.steps=300]
  tfm sweep --report --root=DIR        # rebuild results.jsonl, table.md and the figure
  tfm sweep ... --dry_run              # print each run's commands (e.g. one per TPU slice)

Rerunning a command skips finished runs and resumes interrupted ones; a failed run is recorded
with its error and the others go on (tfm/sweep/execute.py). Results: DIR/results.jsonl (one line
per run), DIR/table.md and DIR/table3.png (tfm/sweep/report.py).
"""

from __future__ import annotations

import json
import os
import sys

from absl import flags
from ml_collections import config_flags

from tfm import config as config_lib
from tfm import storage
from tfm.commands import UsageError
from tfm.commands import eval as eval_command
from tfm.sweep import execute, publish, report
from tfm.sweep.runs import Run, expand, parse_grid

COMMAND = "sweep_command.txt"  # the command that ran the sweep, for the table's header


def define_flags(fv: flags.FlagValues):
  flags.DEFINE_string("root", None, "one workdir per run under this directory, and the results",
                      flag_values=fv)
  flags.DEFINE_list("rows", None, "rows of a table config to run (default: every row)",
                    flag_values=fv)
  flags.DEFINE_multi_string("grid", [], "SECTION.KEY=V1,V2,...: runs for every value (several "
                            "--grid flags: every combination)", flag_values=fv)
  flags.DEFINE_integer("seeds", 1, "runs per row and grid point, with seeds 0..N-1 (train.seed "
                       "and data.shuffle_seed)", lower_bound=1, flag_values=fv)
  flags.DEFINE_integer("parallel", 1, "runs at once, each on its share of the devices",
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
    unknown = [r for r in fv.rows or () if r not in config.rows]
    if unknown:
      raise UsageError(f"--rows: unknown row(s) {unknown} of {path}; expected some of "
                       f"{', '.join(config.rows)}")
    rows = list(fv.rows or config.rows)
  try:
    grid = parse_grid(fv.grid)
  except ValueError as e:
    raise UsageError(str(e)) from None
  return expand(path, rows, grid, fv.seeds, _command_overrides(fv))


def _prepare_data(configs) -> dict:
  """Every distinct dataset and vocabulary, once, before any run starts; {data config: the
  vocabulary model's sha256}."""
  from tfm.data import sources, tokenizer  # pylint: disable=import-outside-toplevel
  vocab_sha256 = {}
  for data in {c.data for c in configs}:
    sources.prepare(data)
    tok = tokenizer.get_tokenizer(data)
    vocab_sha256[data] = tok.model_sha256
    for c in configs:
      if c.data == data and tok.vocab_size != c.model.vocab_size:
        raise ValueError(f"the vocabulary of {data.dataset} has {tok.vocab_size} pieces but "
                         f"model.vocab_size is {c.model.vocab_size}; set model.vocab_size and "
                         f"data.vocab_size to {tok.vocab_size}")
  return vocab_sha256


def run(fv: flags.FlagValues, config: config_lib.Config | None):
  if not fv.root:
    raise UsageError("--root is required (one workdir per run and the results go there)")
  if storage.is_remote(fv.root):
    raise UsageError(f"--root {fv.root}: expected a local directory (the sweep runs its rows as "
                     "local processes that log there); copy run directories from elsewhere into "
                     "one local root and use --report to join them")
  root = os.path.abspath(fv.root)
  if fv.report:
    results = execute.collect(root)
    if not results:
      raise ValueError(f"--root {fv.root}: no run results found (expected */{execute.RESULT})")
    _write(results, root)
    return
  if config is None:
    raise UsageError("--config=FILE[:ARG] is required (or --report)")
  import jax  # pylint: disable=import-outside-toplevel
  jax.config.update("jax_platforms", "cpu")  # the runs own the accelerators; this process counts
  from tfm.model.params import count_params  # pylint: disable=import-outside-toplevel

  runs = _runs(fv, config)
  vocab_dir = os.path.join(root, "vocab") if config.data.vocab_dir is None else None
  configs = {r: r.load(vocab_dir) for r in runs}  # every config validated before anything runs
  eval_limit = lambda r: configs[r].eval.bleu_examples if fv.eval_limit is None else fv.eval_limit
  if fv.dry_run:
    for r in runs:
      workdir = os.path.join(root, r.name)
      print(f"# {r.name}\ntfm {' '.join(r.train_argv(workdir, vocab_dir))}\n"
            f"tfm eval --workdir={workdir} --split=dev --limit={eval_limit(r)}")
    return
  reference = config_lib.load_config(config_lib.config_file(fv))
  index = {r: i for i, r in enumerate(runs)}
  params = {r: count_params(c.model) for r, c in configs.items()}
  shares = execute.device_shares(fv.parallel)
  os.makedirs(root, exist_ok=True)
  with open(os.path.join(root, COMMAND), "w", encoding="utf-8") as f:
    f.write(_command() + "\n")
  published = os.path.abspath(fv.publish) if fv.publish else None
  vocab_dirs = sorted({c.data.vocab_dir for c in configs.values()})
  if published:
    for d in vocab_dirs:
      publish.restore_vocab(published, d)
  vocab_sha256 = _prepare_data(list(configs.values()))
  fingerprints = {r: publish.fingerprint(c, vocab_sha256[c.data], eval_limit(r))
                  for r, c in configs.items()}
  on_result = None
  if published:
    taken = publish.take_published(
        [(r.name, fingerprints[r], configs[r].train.steps) for r in runs], root, published)
    if taken:
      print(f"[sweep] {len(taken)} finished runs taken from {fv.publish}: {', '.join(taken)}")
    for d in vocab_dirs:
      publish.publish_vocab(d, published)
    storage.write_atomically(os.path.join(published, COMMAND), _command() + "\n")

    def on_result(result: dict) -> None:
      if result["status"] == "ok":
        publish.publish_run(os.path.join(root, result["name"]), published)
        _write(execute.collect(published), published, quiet=True)

  def describe(r: Run, workdir: str, wall_s: float) -> dict:
    c = configs[r]
    out = dict(name=r.name, group=r.group, row=r.row, seed=r.seed, index=index[r],
               fingerprint=fingerprints[r],
               changes=execute.changed_keys(c, reference), params=params[r], steps=c.train.steps,
               paper=c.paper, wall_s=wall_s, dev_ppl=None, bleu=None, tokenized_bleu=None,
               tokens_seen=None)
    evals = [(int(m["step"]), int(m["limit"] or 0) == eval_limit(r),
              os.path.getmtime(os.path.join(workdir, name)), name)
             for name in os.listdir(workdir)
             if (m := eval_command.RESULT.fullmatch(name)) and m["split"] == "dev"]
    if evals:  # the last step's, scored as this sweep scores it (a hand-run eval may sit beside it)
      with open(os.path.join(workdir, max(evals)[-1]), encoding="utf-8") as f:
        e = json.load(f)
      out.update(dev_ppl=e["perplexity"], bleu=e["bleu"], tokenized_bleu=e["tokenized_bleu"],
                 bleu_sentences=e.get("sentences"),
                 compounds=e.get("compounds"), tokens_seen=e.get("train_target_tokens"),
                 trained_steps=e["checkpoints"][-1])
    return out

  try:
    execute.run_all(runs, root, shares=shares, vocab_dir=vocab_dir, eval_limit_of=eval_limit,
                    steps_of=lambda r: configs[r].train.steps, describe=describe,
                    on_result=on_result)
  finally:
    results = execute.collect(root)
    if results:
      _write(results, root)
    if published and execute.collect(published):
      _write(execute.collect(published), published, quiet=True)
  names = {r.name for r in runs}
  failed = [r["name"] for r in results if r["name"] in names and r["status"] != "ok"]
  if failed:
    print(f"tfm sweep: {len(failed)} of {len(runs)} runs failed ({', '.join(failed)}); their errors "
          f"are in {os.path.join(root, 'table.md')}; rerun the command to retry them",
          file=sys.stderr)
    return 1


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
