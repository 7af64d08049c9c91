"""Perplexity per piece against context length, one line per group (a positional encoding in
configs/positions.py:lm), the seeds' range shaded: a line that rises past the shortest length (the
training context, dashed) marks a model that does not extrapolate; one that falls reads the longer
context. Both axes are logarithmic, so a doubling of the context reads as a doubling.
"""

from __future__ import annotations

from tfm.sweep.by_context import Table


def plot(t: Table, path: str) -> str:
  """Writes the figure of `t` (tfm/sweep/by_context.py) to `path`; returns it."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  from matplotlib import ticker  # pylint: disable=import-outside-toplevel
  fig, ax = plt.subplots(figsize=(6.4, 4.4))
  for name in t.groups:
    values = [t.values(name, n) for n in t.contexts]
    line, = ax.plot(t.contexts, [sum(v) / len(v) for v in values], marker="o", label=name)
    ax.fill_between(t.contexts, [min(v) for v in values], [max(v) for v in values],
                    color=line.get_color(), alpha=0.18, linewidth=0)
  ax.axvline(t.contexts[0], color="grey", linestyle="--", linewidth=1)
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xticks(t.contexts, [str(n) for n in t.contexts])
  ax.xaxis.set_minor_locator(ticker.NullLocator())
  for axis_formatter in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
    axis_formatter(ticker.FormatStrFormatter("%g"))  # perplexities as numbers, not powers of 10
  ax.set_xlabel("context length at evaluation (pieces a row)")
  ax.set_ylabel("dev perplexity per piece")
  ax.legend(fontsize=8)
  ax.set_title(f"By context length; dashed: the training context ({t.contexts[0]} pieces); "
               "shaded: the seeds' range", fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path
