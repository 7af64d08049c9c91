"""Training curves of one or more workdirs, from their TensorBoard scalars (tfm/train/trackers/events.py).

Panels, each workdir a line with its name: train and dev loss against steps, dev perplexity, dev
BLEU (sacreBLEU), the learning rate, and train loss against target tokens seen. The train loss is
label-smoothed (the objective); dev loss and perplexity are the unsmoothed NLL per word-piece.
A run's other evaluation sets (data.eval_sets: tags `<name>/perplexity`) are dotted lines named
'<run> <set>' in the perplexity and BLEU panels.
"""

from __future__ import annotations

import io
import os
from typing import Sequence

import numpy as np
from etils import epath

from tfm import storage
from tfm.train.trackers.events import Scalars, read_scalars


def workdir_scalars(workdir: str | epath.Path) -> Scalars:
  return read_scalars(epath.Path(workdir) / "tensorboard")


def tokens_seen(scalars: Scalars) -> list[tuple[int, float]]:
  """(step, target tokens seen by that step): the running sum of each window's train/tokens."""
  windows = scalars.get("train/tokens", [])
  return list(zip([s for s, _ in windows], np.cumsum([t for _, t in windows]).tolist()))


def eval_sets(scalars: Scalars) -> list[str]:
  """The evaluation sets besides 'dev' that a run's scalars hold (`<name>/perplexity`)."""
  return sorted({tag.split("/")[0] for tag in scalars if tag.endswith("/perplexity")}
                - {"dev", "train"})


def _series(ax, points, label, **kwargs) -> bool:
  if not points:
    return False
  x, y = zip(*points)
  ax.plot(x, y, label=label, **kwargs)
  return True


def draw(runs: dict[str, Scalars]):
  """A matplotlib figure of the runs' curves ({name: scalars})."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  import matplotlib.ticker  # pylint: disable=import-outside-toplevel

  fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
  (loss, ppl, bleu), (lr, by_tokens, _) = axes
  _.axis("off")
  colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  for i, (name, s) in enumerate(runs.items()):
    color = colors[i % len(colors)]
    _series(loss, s.get("train/loss"), f"{name} train", color=color)
    _series(loss, s.get("dev/nll"), f"{name} dev", color=color, linestyle="--", marker="o", ms=3)
    _series(ppl, s.get("dev/perplexity"), name, color=color, marker="o", ms=3)
    _series(bleu, s.get("dev/bleu"), name, color=color, marker="o", ms=3)
    for other in eval_sets(s):
      _series(ppl, s.get(f"{other}/perplexity"), f"{name} {other}", color=color, linestyle=":",
              marker="s", ms=3)
      _series(bleu, s.get(f"{other}/bleu"), f"{name} {other}", color=color, linestyle=":",
              marker="s", ms=3)
    _series(lr, s.get("train/learning_rate"), name, color=color)
    steps_to_tokens = dict(tokens_seen(s))
    _series(by_tokens, [(steps_to_tokens[step], v) for step, v in s.get("train/loss", [])
                        if step in steps_to_tokens], name, color=color)
  titles = [(loss, "loss (train: label-smoothed; dev: NLL)", "step"),
            (ppl, "dev perplexity (per word-piece)", "step"), (bleu, "dev BLEU (sacreBLEU)", "step"),
            (lr, "learning rate", "step"), (by_tokens, "train loss", "target tokens seen")]
  for ax, title, xlabel in titles:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    if ax.lines:
      ax.legend(fontsize=8)
    else:
      ax.text(0.5, 0.5, "nothing logged yet", ha="center", va="center", transform=ax.transAxes,
              color="gray")
  if ppl.lines:  # perplexity falls by orders of magnitude
    ppl.set_yscale("log")
    ppl.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
  # Fixed margins that fit these titles and tick labels (tight_layout measured every label: ~1/3
  # of a drawing, which the training loop repeats at each evaluation).
  fig.subplots_adjust(left=0.05, right=0.985, bottom=0.07, top=0.96, wspace=0.18, hspace=0.3)
  return fig


def legend_names(workdirs: Sequence[str | epath.Path]) -> list[str]:
  """The shortest trailing paths that tell the workdirs apart: their directory names
  ('quickstart', 'base'), or more of each path where those repeat ('a/quickstart', 'b/quickstart')."""
  parts = [os.fspath(w).rstrip("/").split("/") for w in workdirs]
  for depth in range(1, max(len(p) for p in parts) + 1):
    names = ["/".join(p[-depth:]) for p in parts]
    if len(set(names)) == len(names):
      return names
  return [os.fspath(w) for w in workdirs]


def png(workdirs: Sequence[str | epath.Path], names: Sequence[str] | None = None) -> bytes:
  """The workdirs' curves drawn as a PNG (legend: `names`, default legend_names)."""
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  names = list(names or legend_names(workdirs))
  fig = draw({name: workdir_scalars(w) for name, w in zip(names, workdirs)})
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=100)
  plt.close(fig)
  return buffer.getvalue()


def write_png(workdirs: Sequence[str | epath.Path], out: str | epath.Path,
              names: Sequence[str] | None = None) -> epath.Path:
  """Draws the workdirs' curves into the PNG `out` (any storage); returns its path."""
  return storage.write_atomically(out, png(workdirs, names))
