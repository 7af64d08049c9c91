"""The forms a GPU run may take, timed against each other in one process: which `auto` a GPU gets.

  python experiments/gpu/forms.py --spec=configs/table3_v3.py:base [--set=KEY=VALUE ...]

Three choices change how a run computes, not what (tfm/train/platform_choices.py): train.guard
(branch or select), train.dropout_prng (threefry or rbg) and train.input (inline or process). A
GPU's `auto` is the CPU's forms (branch, threefry, inline) until its figures say otherwise. This
trains the config (Table 3 v3's base by the queue: the table's own model, its kernels, its data)
with the real loop (tfm.loop.train) for STEPS steps under each form: the GPU's auto now, each
other form of one key, and the auto again last (how far two runs of one program differ), one after
the other in this process, and prints a JSON line a form as it ends (so that a process stopped at
its limit keeps the forms it timed): {"form", "overrides", "step_ms"}, step_ms the median of the
logged windows after the first (the compile and the first steps).

The rule (choose, applied where the figures are imported): a key takes its other form where that
form's step is faster than the auto's by more than the two auto runs differ, and by more than 1%.
"""

from __future__ import annotations

import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from absl import app, flags

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments.gpu.kernels import figures  # noqa: E402  pylint: disable=wrong-import-position
from tfm import config as config_lib  # noqa: E402  pylint: disable=wrong-import-position
from tfm.train import platform_choices  # noqa: E402  pylint: disable=wrong-import-position

# the GPU's auto forms of the three keys timed (the CPU's, until GPU_MEASURED holds others)
AUTO = {k: platform_choices.AUTO["gpu"][k] for k in ("guard", "dropout_prng", "input")}
FORMS = (("auto", {}), ("select", {"guard": "select"}), ("rbg", {"dropout_prng": "rbg"}),
         ("process", {"input": "process"}), ("auto_again", {}))
STEPS, EVERY = 300, 100  # --quick: QUICK_STEPS, QUICK_EVERY
QUICK_STEPS, QUICK_EVERY = 6, 2
LIMIT_S = 90  # the queue stops the process here; the forms it timed stay

FLAGS = flags.FLAGS


def define_flags() -> None:
  """This script's flags (defined when it runs, so that importing choose() defines none)."""
  flags.DEFINE_bool("quick", False, "a few steps a form (the plumbing, on the CPU)")
  flags.DEFINE_string("spec", "configs/table3_v3.py:base", "the config timed (FILE:ROW)")
  flags.DEFINE_multi_string("set", [], "KEY=VALUE overrides of it (the bundle's data, the "
                            "kernels' precision)")


def time_form(config: config_lib.Config) -> float | None:
  """The config trained with the real loop in a fresh workdir: its step's median ms over the
  logged windows after the first, None where fewer than two were logged."""
  from tfm import loop  # pylint: disable=import-outside-toplevel
  out = io.StringIO()
  with tempfile.TemporaryDirectory(prefix="tfm_forms_") as workdir:
    loop.train(config, workdir, stream=out)
  windows = sorted(figures(out.getvalue())["step_s"].items())[1:]
  return 1e3 * statistics.median(s for _, s in windows) if windows else None


def choose(numbers: dict[str, float | None]) -> dict:
  """{"chosen": {key: form}, "spread_ms": ..., "why": {key: words}} from {form: step_ms}; {} where
  the auto runs did not both end."""
  auto, again = numbers.get("auto"), numbers.get("auto_again")
  if auto is None or again is None:
    return {}
  spread = abs(again - auto)
  chosen, why = dict(AUTO), {}
  for name, overrides in FORMS[1:-1]:
    (key, form), = overrides.items()
    ms = numbers.get(name)
    if ms is None:
      why[key] = f"{form}: not timed"
      continue
    gain = auto - ms
    if gain > max(spread, 0.01 * auto):
      chosen[key] = form
    why[key] = (f"{form} {ms:.3f} ms against {AUTO[key]} {auto:.3f} ms ({gain:+.3f} faster; the "
                f"auto runs differ by {spread:.3f})")
  return {"chosen": chosen, "spread_ms": spread, "why": why}


def main(argv):
  del argv
  steps, every = (QUICK_STEPS, QUICK_EVERY) if FLAGS.quick else (STEPS, EVERY)
  start = time.perf_counter()
  for name, overrides in FORMS:
    settings = {**AUTO, **overrides}
    config = config_lib.load_config(FLAGS.spec, FLAGS.set + [
        *(f"train.{k}={v}" for k, v in settings.items()), f"train.steps={steps}",
        f"train.log_every={every}", f"train.eval_every={10 * steps}",
        f"train.checkpoint_every={10 * steps}", "train.curves=False", "eval.bleu_every=0"])
    print(json.dumps({"form": name, "overrides": settings, "step_ms": time_form(config),
                      "seconds": round(time.perf_counter() - start, 1)}), flush=True)


if __name__ == "__main__":
  define_flags()
  app.run(main)
