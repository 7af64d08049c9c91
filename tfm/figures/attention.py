"""Attention weights as heat maps, one panel per head, one row of panels per kind of attention.

Each panel is one head's weights [q_length, kv_length] on a fixed 0..1 scale (white 0, dark 1):
rows are the queries, columns the keys, both labelled with their SentencePiece pieces ('▁' marks a
word start), as in the paper's figures 3-5 for the chosen layer.
"""

from __future__ import annotations

import dataclasses
import io
import textwrap
from typing import Sequence

import numpy as np
from etils import epath

from tfm import storage

CELL_INCHES = 0.2  # one token's row or column: room for a 7-point label
MAX_PANEL_INCHES = 10.0  # longer sentences get smaller cells (down to 10 in / tokens)
FONT_POINTS = 7


@dataclasses.dataclass
class Row:
  """One kind of attention: its title, weights [heads, q_length, kv_length] and labels."""
  title: str
  weights: np.ndarray
  queries: Sequence[str]
  keys: Sequence[str]


def cell_inches(rows: Sequence[Row]) -> float:
  """The side of one weight's square: CELL_INCHES, less when a panel would pass MAX_PANEL_INCHES."""
  longest = max(max(len(r.queries), len(r.keys)) for r in rows)
  return min(CELL_INCHES, MAX_PANEL_INCHES / longest)


def draw(rows: Sequence[Row], heads: Sequence[int], title: str):
  """A matplotlib figure: len(rows) x len(heads) panels, headed 'head N' (heads are 1-based), each
  row named beside its first panel and as high as its queries need, the columns as wide as the most
  keys need (cells about square when queries and keys are alike in number), tick labels on every
  panel's keys and on the first panel's queries of each row."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

  cell = cell_inches(rows)
  label = 0.07 * max(len(s) for r in rows for s in [*r.queries, *r.keys]) + 0.15  # tick labels
  width = len(heads) * (cell * max(len(r.keys) for r in rows) + 0.1) + label + 1.3  # + bar, names
  height = sum(cell * len(r.queries) + label + 0.35 for r in rows) + 0.6  # + row and figure titles
  fig = plt.figure(figsize=(width, height), layout="constrained")
  grid = fig.add_gridspec(len(rows), len(heads), height_ratios=[len(r.queries) for r in rows])
  axes, image = [], None
  for r, row in enumerate(rows):
    for c, head in enumerate(heads):
      ax = fig.add_subplot(grid[r, c])
      axes.append(ax)
      image = ax.imshow(row.weights[c], cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto",
                        interpolation="nearest")
      ax.set_xticks(range(len(row.keys)), row.keys, rotation=90, fontsize=FONT_POINTS)
      ax.set_yticks(range(len(row.queries)), row.queries if c == 0 else [], fontsize=FONT_POINTS)
      ax.tick_params(length=0)
      ax.set_title(f"head {head}", fontsize=9, loc="left")
      if c == 0:  # the row's kind beside its queries: a title this long would run into the next
        ax.set_ylabel(row.title, fontsize=9)
  fig.suptitle(textwrap.fill(title, max(40, int(width * 11))), fontsize=10)
  fig.colorbar(image, ax=axes, fraction=0.02, pad=0.01, label="attention weight")
  return fig


def png(rows: Sequence[Row], heads: Sequence[int], title: str) -> bytes:
  """The panels drawn as a PNG."""
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig = draw(rows, heads, title)
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=110)
  plt.close(fig)
  return buffer.getvalue()


def write_png(rows: Sequence[Row], heads: Sequence[int], title: str,
              out: str | epath.Path) -> epath.Path:
  """Draws the panels into the PNG `out` (any storage); returns its path."""
  return storage.write_atomically(out, png(rows, heads, title))
