"""The GPU queue's table of measured seconds (experiments/gpu/seconds.json), the job costs it
predicts (experiments/gpu/plan.py's Cost), and its refinement by every imported call.

Each entry is seconds with `n`, how many measurements its value is the mean of (0: an estimate,
which the first measurement replaces), and `source`, where they came from. Keys:

  queue_start            the queue's own start before its first job (wheels, MPS, versions, plan)
  stop                   from the stop's SIGTERM to OUT written (the runs save, the files packed)
  process_start          a job's `tfm sweep` and `tfm train` start, data, checkpoints and exit:
                         a train process's wall less its compile, steps and dev evaluations
  train_compile          the train step's compilation (or its load from the compilation cache)
  step_s/CONFIG          one step of the config's first row, alone on the GPU; a row's step is it
                         times the row's training FLOPs over the first row's (at least 1: a small
                         model's step is set by its kernels' latency, not its FLOPs)
  concurrency/N          a step's seconds with N jobs at once on the GPU over its seconds alone
                         (between two Ns: linear; past the largest: that slope on)
  stack/K                the step of a stack of K runs (tfm/train/stack.py) over one run's; a K
                         without an entry: K (a stack no faster than its runs one after the other)
  dev_eval/CONFIG        one dev evaluation during training, one run
  eval_compile/CONFIG    a run's `tfm eval`: the beam search's compilation
  eval_rest/CONFIG       a run's `tfm eval`: the rest (its start, restore, the dev pass, the beam
                         search; an lm run's context lengths)
  job/NAME               a timing job's wall (stacks, forms, speed_step, speed_loop)

The figures behind each are in its source; `calls` lists the imported calls (by their record's
sha256) that refined the table, each once.
"""

from __future__ import annotations

import json
from pathlib import Path

from experiments.gpu.plan import Cost

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "experiments" / "gpu" / "seconds.json"


class Seconds:
  """The table: seconds[key], concurrency(n), stack(k), cost predictions, refine()."""

  def __init__(self, data: dict):
    self.data = data
    self.entries: dict[str, dict] = data["entries"]

  @classmethod
  def load(cls, path: Path = TABLE) -> "Seconds":
    try:
      data = json.loads(Path(path).read_text())
      if not isinstance(data.get("entries"), dict):
        raise ValueError("no 'entries' object")
    except (OSError, ValueError) as e:
      raise ValueError(f"--seconds {path}: expected the table of measured seconds "
                       f"(experiments/gpu/seconds.json's form): {e}") from None
    return cls(data)

  def __getitem__(self, key: str) -> float:
    if key not in self.entries:
      raise KeyError(f"the table of measured seconds has no {key!r}")
    return float(self.entries[key]["seconds"])

  def _series(self, prefix: str) -> list[tuple[int, float]]:
    return sorted((int(k.split("/")[1]), float(e["seconds"])) for k, e in self.entries.items()
                  if k.startswith(prefix + "/"))

  def concurrency(self, n: int) -> float:
    """concurrency/N, linear between the measured Ns, that slope on past the last (1 at N=1)."""
    points = [(1, 1.0)] + [p for p in self._series("concurrency") if p[0] > 1]
    for (n0, v0), (n1, v1) in zip(points, points[1:]):
      if n <= n1:
        return v0 + (v1 - v0) * (n - n0) / (n1 - n0)
    if len(points) == 1:
      return 1.0
    (n0, v0), (n1, v1) = points[-2], points[-1]
    return v1 + (v1 - v0) * (n - n1) / (n1 - n0)

  def stack(self, k: int) -> float:
    """stack/K where measured, else K (no faster than the runs one after the other); 1 for one run
    (which trains alone, no stack)."""
    return 1.0 if k == 1 else dict(self._series("stack")).get(k, float(k))

  def train_cost(self, config: str, steps: int, eval_every: int, flops_ratio: float,
                 members: int, evaluates: bool = True) -> Cost:
    """A job that trains `members` runs of `config` as one stack for `steps` steps (from where they
    resume), with a dev evaluation every `eval_every`, then (evaluates) each run's `tfm eval`."""
    before = self["process_start"] + self["train_compile"]
    work = steps * self[f"step_s/{config}"] * max(1.0, flops_ratio) * self.stack(members)
    dev = (steps // eval_every if eval_every else 0) * self[f"dev_eval/{config}"] * members
    evaluation = members * (self[f"eval_compile/{config}"] + self[f"eval_rest/{config}"])
    return Cost(before, work, dev + (evaluation if evaluates else 0.0))

  def refine(self, measured: dict[str, list[float]], call: str, source: str) -> bool:
    """Each key's mean with the call's measurements (an estimate replaced); False, and nothing
    changed, where this call refined the table before."""
    if call in self.data.setdefault("calls", []):
      return False
    for key, values in sorted(measured.items()):
      values = [float(v) for v in values]
      if not values:
        continue
      entry = self.entries.setdefault(key, {"seconds": 0.0, "n": 0, "source": ""})
      n = int(entry.get("n", 0))
      entry["seconds"] = round((entry["seconds"] * n + sum(values)) / (n + len(values)), 6)
      entry["n"] = n + len(values)
      entry["source"] = (f"{entry['source']}; " if n else "") + f"{len(values)} from {source}"
    self.data["calls"].append(call)
    return True

  def save(self, path: Path = TABLE) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(self.data, indent=1) + "\n")
    tmp.replace(path)
