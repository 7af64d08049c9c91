"""BLEU and dev perplexity against source length, one line per group (a positional encoding in
configs/positions.py), the seeds' range shaded: where a line falls away past the training length
(a dashed line at the first bucket's edge), the model does not extrapolate.

x is each bucket's mean source length, from its (lo, hi] edges: the buckets are drawn at their
lengths, so a doubling reads as a doubling (log scale).
"""

from __future__ import annotations

from tfm.sweep.by_length import Table


def plot(t: Table, path: str) -> str | None:
  """Writes the figure of `t` (tfm/sweep/by_length.py) to `path`; None where no cell has a BLEU."""
  if not any(c.bleu_values for row in t.cells.values() for c in row):
    return None
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  xs = [(lo + 1 + hi) / 2 for lo, hi in t.edges]
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
  for name in t.groups:
    row = t.cells[name]
    for ax, values in ((axes[0], [c.bleu_values for c in row]), (axes[1], [c.ppl_values for c in row])):
      points = [(x, v) for x, v in zip(xs, values) if v]
      if not points:
        continue
      x = [p[0] for p in points]
      line, = ax.plot(x, [sum(v) / len(v) for _, v in points], marker="o", label=name)
      ax.fill_between(x, [min(v) for _, v in points], [max(v) for _, v in points],
                      color=line.get_color(), alpha=0.18, linewidth=0)
  trained = t.edges[0][1]
  for ax, label in ((axes[0], "dev BLEU (sacreBLEU)"), (axes[1], "dev perplexity")):
    ax.axvline(trained, color="grey", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_xticks(xs, [f"{b}" for b in t.buckets])
    ax.minorticks_off()
    ax.set_xlabel("source length (pieces)")
    ax.set_ylabel(label)
  axes[1].set_yscale("log")
  axes[0].legend(fontsize=8)
  fig.suptitle(f"By source length; dashed: the first bucket's edge ({trained} pieces); "
               "shaded: the seeds' range", fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path
