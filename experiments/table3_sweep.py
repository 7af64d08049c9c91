"""Trains and evaluates Table 3 rows, then prints our figures beside the paper's.

  python experiments/table3_sweep.py --root=workdirs/table3 --rows=base,A1,B1 \
      [--override=train.steps=20000 --override=mesh.data=8 ...]

Each row trains in ROOT/<row> with `tfm train --config=configs/table3.py:<row>` plus the overrides
(a preempted sweep resumes: finished rows are skipped, an interrupted one resumes from its
checkpoint), then `tfm eval --average=1` on the dev split (Table 3 uses no averaging). The table
shows dev perplexity per word-piece, sacreBLEU and the paper-style tokenized BLEU, and the parameter
count of the model as built, each beside the paper's figure.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

from absl import app, flags

from configs.table3 import ROWS
from tfm.config import load_config
from tfm.model.params import count_params

FLAGS = flags.FLAGS
flags.DEFINE_string("root", "workdirs/table3", "one workdir per row under this directory")
flags.DEFINE_list("rows", list(ROWS), "rows to run, e.g. base,A1,C5")
flags.DEFINE_multi_string("override", [], "config override applied to every row, e.g. train.steps=1000")
flags.DEFINE_integer("eval_limit", 0, "score only the first K dev pairs (0 = all)")


def _tfm(*args):
  subprocess.run([sys.executable, "-m", "tfm.cli", *args], check=True)


def _result(workdir):
  files = sorted(glob.glob(os.path.join(workdir, "eval_dev_*.json")), key=os.path.getmtime)
  return json.load(open(files[-1])) if files else None


def run_row(row: str) -> dict:
  spec = f"--config=configs/table3.py:{row}"
  overrides = [f"--config.{o}" for o in FLAGS.override]
  workdir = os.path.join(FLAGS.root, row)
  config = load_config(f"configs/table3.py:{row}", FLAGS.override)
  steps = config.train.steps
  if _result(workdir) is None or _result(workdir)["checkpoints"][-1] < steps:
    _tfm("train", spec, *overrides, f"--workdir={workdir}")
    _tfm("eval", f"--workdir={workdir}", "--average=1", f"--limit={FLAGS.eval_limit}")
  result = _result(workdir)
  return dict(row=row, ppl=result["perplexity"], bleu=result["bleu"], tok_bleu=result["tokenized_bleu"],
              params=count_params(config.model) / 1e6, paper=config.paper, steps=steps)


def print_table(results) -> None:
  print(f"{'row':<5} {'steps':>7} | {'PPL':>7} {'paper':>6} | {'BLEU':>6} {'tok.':>6} {'paper':>6} | "
        f"{'params M':>8} {'paper':>6}")
  for r in results:
    p = r["paper"]
    paper_params = "" if p["params_m"] is None else f"{p['params_m']:.0f}"
    print(f"{r['row']:<5} {r['steps']:>7} | {r['ppl']:>7.2f} {p['ppl']:>6.2f} | {r['bleu']:>6.1f} "
          f"{r['tok_bleu']:>6.1f} {p['bleu']:>6.1f} | {r['params']:>8.1f} {paper_params:>6}")


def main(argv):
  del argv
  unknown = [r for r in FLAGS.rows if r not in ROWS]
  if unknown:
    raise app.UsageError(f"--rows: unknown {unknown}; expected some of {', '.join(ROWS)}")
  print_table([run_row(row) for row in FLAGS.rows])


if __name__ == "__main__":
  app.run(main)
