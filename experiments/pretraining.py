"""Does span-corruption pretraining help the CPU quickstart translate? T5's recipe at the
quickstart's size, against the quickstart from scratch at equal total compute.

  python3 experiments/pretraining.py --root=runs/pretraining      # the experiment, 2 seeds
  python3 experiments/pretraining.py --root=R --seeds=1 --span_steps=4 --finetune_steps=4 \\
      --override=data.manual_dir=... ...                         # a pilot (tests/integration)

The arms, each with train.seed = data.shuffle_seed = s for s in 0..seeds-1:
  * pretrained: configs/span_quickstart.py (T5's span corruption of the Bible's English and
    Spanish verses, the quickstart's model, its schedule and batch) for --span_steps (1500, the
    quickstart's), then configs/quickstart.py for --finetune_steps (1500) started from its
    parameters (train.init_from: a fresh Adam and learning-rate schedule, the span run's
    vocabulary, its 7 sentinels kept above the 1993 pieces as data.sentinels and never in the
    translation data).
  * scratch: configs/quickstart.py alone for finetune_steps + the span steps' equivalent.
Equal total compute is equal model FLOPs (tfm/train/flops.py, the matmuls and attention products
of forward and backward): both configs step on 32 rows of 128 input tokens, but a span step's
decoder reads 29 targets a row where translation's reads 128, so a span step costs
`step_ratio` = train_flops(S=128, T=29) / train_flops(S=128, T=128) of a translation step (0.514
for the quickstart's model: the decoder's layers and the output layer work per target token) and
the scratch arm trains finetune_steps + round(span_steps x step_ratio) = 1500 + 771 = 2271 steps.
Input tokens seen are then unequal (the scratch arm reads fewer, 2271 x 4096 against 3000 x
4096), model FLOPs equal; wall time follows the FLOPs here (measured: a span step about half a
translation step). The scratch run's checkpoint at step 1500 is the quickstart itself (its
schedule does not depend on train.steps), so its curve also shows the quickstart at equal steps.

Figures: each translation run's final dev BLEU (sacreBLEU, first 200 dev verses, beam 4, as the
quickstart's) and dev perplexity from `tfm eval` (the sweep's own command), mean and spread over
the seeds in table.md, a line per run in results.jsonl; pretraining.png draws the dev perplexity
of every run against translation-equivalent steps (the fine-tuning runs start at the span steps'
equivalent, the span runs' own perplexity is over their span targets and is left out) with the
final BLEU beside it. Published into --publish (experiments/results/pretraining/) with each
translation run's eval_dev_*.json.

Time on the 2-core CPU (Intel Xeon, nice -n 10 beside other jobs at load ~6; 40-step runs of
each config, steps 21-40): a span step 0.64-0.80 s, a translation step 1.28-1.68 s (MEASURED_STEP_S,
the lower figures). A seed is 1500 x 0.7 + (1500 + 2271) x 1.3 s = 1.7 hours, so 2 seeds take
about 3.4 hours of training, plus the vocabulary and token cache, compiles and 4 `tfm eval`s
(beam search over 200 verses, a few minutes each): about 3.5 hours in all, the runs one after
another. A rerun resumes: finished runs are skipped, interrupted ones continue.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=wrong-import-position
from tfm import cli, storage, tasks
from tfm.config import load_config
from tfm.data.batching import global_rows
from tfm.sweep import execute
from tfm.train import checkpoint as ckpt_lib
from tfm.train.flops import train_flops

SPAN_CONFIG, TRANSLATE_CONFIG = "configs/span_quickstart.py", "configs/quickstart.py"
BLEU_VERSES = 200  # the quickstart's eval.bleu_examples
MEASURED_STEP_S = {"span": 0.7, "translate": 1.3}  # s a step, 2-core CPU at nice -n 10, see above


@dataclasses.dataclass(frozen=True)
class Run:
  name: str  # the workdir's name under --root
  arm: str  # 'pretrained' or 'scratch'; the span runs' 'span'
  seed: int
  train_argv: list
  steps: int
  offset: float = 0.0  # translation-equivalent steps before its own (the span run's)


def step_ratio(span, translate) -> float:
  """Model FLOPs of a span step over a translation step (configs as built): rows x
  train_flops(inputs, targets) each, targets the task's length (span: T5's shorter ones)."""
  def per_step(c):
    rows = global_rows(c.data, 1, 1)
    return rows * train_flops(c.model, c.data.max_length,
                              tasks.get(c.task).target_length(c.data))
  return per_step(span) / per_step(translate)


def plan(root: str, seeds: int, span_steps: int, finetune_steps: int,
         overrides: list[str]) -> tuple[list[Run], dict]:
  """The runs in order (every span run, then the fine-tuning runs, then the scratch runs) and the
  figures that fix them (step ratio, scratch steps, sentinels)."""
  # the span task's own keys (data.noise_density, ...) set the span runs alone: a translation run
  # refuses them (tfm/tasks/task.py: data_keys)
  own = {f"data.{k}" for k in tasks.get("span").data_keys}
  mine = lambda o: o.split("=", 1)[0].strip() in own
  flags = [f"--config.{o}" for o in overrides if not mine(o)]
  span_flags = [f"--config.{o}" for o in overrides]
  span = load_config(SPAN_CONFIG, list(overrides) + [f"train.steps={span_steps}"])
  translate = load_config(TRANSLATE_CONFIG, [o for o in overrides if not mine(o)])
  ratio = step_ratio(span, translate)
  equivalent = round(span_steps * ratio)
  sentinels = tasks.get(span.task).sentinels(span.data)
  runs = []
  seeded = lambda s: [f"--config.train.seed={s}", f"--config.data.shuffle_seed={s}"]
  for s in range(seeds):
    runs.append(Run(f"span-s{s}", "span", s, [
        "train", f"--config={SPAN_CONFIG}", *span_flags, *seeded(s),
        f"--config.train.steps={span_steps}"], span_steps))
  for s in range(seeds):
    runs.append(Run(f"pretrained-s{s}", "pretrained", s, [
        "train", f"--config={TRANSLATE_CONFIG}", *flags, *seeded(s),
        f"--config.train.steps={finetune_steps}", f"--config.data.sentinels={sentinels}",
        f"--init_from={os.path.join(root, f'span-s{s}')}"], finetune_steps, equivalent))
  for s in range(seeds):
    runs.append(Run(f"scratch-s{s}", "scratch", s, [
        "train", f"--config={TRANSLATE_CONFIG}", *flags, *seeded(s),
        f"--config.train.steps={finetune_steps + equivalent}"], finetune_steps + equivalent))
  return runs, {"step_ratio": ratio, "span_steps": span_steps, "finetune_steps": finetune_steps,
                "scratch_steps": finetune_steps + equivalent, "sentinels": sentinels}


def _tfm(argv: list[str]) -> None:
  code = cli.main(["tfm", *argv])
  if code != 0:
    raise SystemExit(f"experiments/pretraining.py: `tfm {' '.join(argv)}` exited {code}")


def _eval_result(workdir: str) -> dict:
  """The newest dev evaluation `tfm eval` wrote in the workdir (eval_dev_<step>_*.json)."""
  found = sorted(glob.glob(os.path.join(workdir, "eval_dev_*.json")), key=os.path.getmtime)
  return storage.read_json(storage.path(found[-1])) if found else {}


def _trained(workdir: str, steps: int) -> bool:
  """Whether the run's checkpoint of its last step is there."""
  return (os.path.isdir(os.path.join(workdir, "checkpoints"))
          and steps in ckpt_lib.available_steps(workdir))


def execute_runs(runs: list[Run], root: str) -> None:
  """Trains each run (a finished one is skipped by tfm train itself, an interrupted one resumes)
  and evaluates each translation run with the sweep's `tfm eval` arguments."""
  for run in runs:
    workdir = os.path.join(root, run.name)
    if not _trained(workdir, run.steps):
      _tfm([*run.train_argv, f"--workdir={workdir}"])
    if run.arm != "span" and not _eval_result(workdir):
      _tfm(execute.eval_argv(workdir, BLEU_VERSES))


def dev_curve(workdir: str, offset: float) -> list[tuple[float, float]]:
  """(translation-equivalent step, dev perplexity) of a run's evaluations during training."""
  from tfm.figures.curves import workdir_scalars  # pylint: disable=import-outside-toplevel
  return [(offset + step, value)
          for step, value in workdir_scalars(workdir).get("dev/perplexity", [])]


def results(runs: list[Run], root: str) -> list[dict]:
  """A line per translation run: its arm, seed, steps, compute in translation-equivalent steps,
  final dev BLEU and perplexity (tfm eval's)."""
  out = []
  for run in runs:
    if run.arm == "span":
      continue
    result = _eval_result(os.path.join(root, run.name))
    out.append({"run": run.name, "arm": run.arm, "seed": run.seed, "steps": run.steps,
                "compute_steps": round(run.offset + run.steps), "bleu": result.get("bleu"),
                "perplexity": result.get("perplexity")})
  return out


def _mean_spread(values) -> str:
  values = [v for v in values if v is not None]
  if not values:
    return "-"
  mean = sum(values) / len(values)
  spread = (max(values) - min(values)) / 2
  return f"{mean:.2f} ± {spread:.2f}" if len(values) > 1 else f"{mean:.2f}"


def table(lines: list[dict], figures: dict) -> str:
  rows = ["| arm | seeds | steps (compute, translation steps) | dev BLEU | dev perplexity |",
          "|---|---|---|---|---|"]
  for arm in ("pretrained", "scratch"):
    mine = [r for r in lines if r["arm"] == arm]
    if mine:
      rows.append(f"| {arm} | {len(mine)} | {mine[0]['steps']} ({mine[0]['compute_steps']}) | "
                  f"{_mean_spread(r['bleu'] for r in mine)} | "
                  f"{_mean_spread(r['perplexity'] for r in mine)} |")
  note = (f"Pretrained: {figures['span_steps']} span-corruption steps (each "
          f"{figures['step_ratio']:.3f} of a translation step's model FLOPs), then "
          f"{figures['finetune_steps']} translation steps; scratch: {figures['scratch_steps']} "
          "translation steps. Mean ± half the range over the seeds; dev BLEU (sacreBLEU) on the "
          f"first {BLEU_VERSES} dev verses, dev perplexity per target piece.")
  return "\n".join(rows) + "\n\n" + note + "\n"


def figure(runs: list[Run], root: str, lines: list[dict], out: str) -> None:
  """Dev perplexity against translation-equivalent steps, a line per translation run, and the
  final dev BLEU of each, in one PNG."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, (ppl, bleu) = plt.subplots(1, 2, figsize=(12, 4.5))
  colors = {"pretrained": "tab:blue", "scratch": "tab:orange"}
  for run in runs:
    if run.arm == "span":
      continue
    points = dev_curve(os.path.join(root, run.name), run.offset)
    if points:
      ppl.plot(*zip(*points), marker="o", ms=3, color=colors[run.arm], label=run.name,
               linestyle="-" if run.seed == 0 else "--")
  for line in lines:
    if line["bleu"] is not None:
      bleu.scatter([line["compute_steps"]], [line["bleu"]], color=colors[line["arm"]],
                   label=line["run"])
  ppl.set(title="dev perplexity (per target piece)", xlabel="compute (translation steps)",
          yscale="log")
  bleu.set(title=f"final dev BLEU (first {BLEU_VERSES} verses)",
           xlabel="compute (translation steps)")
  for ax in (ppl, bleu):
    ax.grid(alpha=0.3)
    if ax.has_data():
      ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(out, dpi=100)
  plt.close(fig)


def publish(runs: list[Run], root: str, out: str, figures: dict) -> list[dict]:
  """results.jsonl, table.md, pretraining.png and each translation run's evaluation in `out`."""
  os.makedirs(out, exist_ok=True)
  lines = results(runs, root)
  with open(os.path.join(out, "results.jsonl"), "w", encoding="utf-8") as f:
    f.writelines(json.dumps(line) + "\n" for line in lines)
  with open(os.path.join(out, "table.md"), "w", encoding="utf-8") as f:
    f.write(table(lines, figures))
  figure(runs, root, lines, os.path.join(out, "pretraining.png"))
  for run in runs:
    for path in glob.glob(os.path.join(root, run.name, "eval_dev_*.json")):
      os.makedirs(os.path.join(out, run.name), exist_ok=True)
      shutil.copy(path, os.path.join(out, run.name, os.path.basename(path)))
  return lines


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--root", required=True, help="a workdir per run under this directory")
  p.add_argument("--publish", default="experiments/results/pretraining",
                 help="where results.jsonl, table.md and pretraining.png go")
  p.add_argument("--seeds", type=int, default=2)
  p.add_argument("--span_steps", type=int, default=1500)
  p.add_argument("--finetune_steps", type=int, default=1500)
  p.add_argument("--override", action="append", default=[],
                 help="KEY=VALUE for every run's config (e.g. data.manual_dir=...); the span "
                 "task's own keys (data.noise_density, data.mean_noise_span_length) for the span "
                 "runs alone")
  p.add_argument("--dry_run", action="store_true", help="print the runs and the step counts")
  a = p.parse_args(argv)
  runs, figures = plan(a.root, a.seeds, a.span_steps, a.finetune_steps, a.override)
  if a.dry_run:
    print(json.dumps(figures))
    for run in runs:
      print("tfm", " ".join(run.train_argv), f"--workdir={os.path.join(a.root, run.name)}")
    est = (a.seeds * (a.span_steps * MEASURED_STEP_S["span"] + (figures["finetune_steps"]
           + figures["scratch_steps"]) * MEASURED_STEP_S["translate"]))
    print(f"about {math.ceil(est / 60)} minutes of training on the 2-core CPU")
    return 0
  execute_runs(runs, a.root)
  for line in publish(runs, a.root, a.publish, figures):
    print(json.dumps(line))
  return 0


if __name__ == "__main__":
  sys.exit(main())
