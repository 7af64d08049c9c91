"""What the lead host shows while training: step / total, percent, ETA, tokens/s, loss, learning
rate, MFU, and what the time outside training steps went to.

On a terminal, one line at the bottom is redrawn as steps are dispatched (a progress bar), and the
periodic metrics lines scroll above it; elsewhere (logs, CI) only the periodic lines, each with
step / total, percent and ETA. Compilation and evaluations are timed apart ("compiled the train
step in 21.3 s", "eval_s" in the dev lines) and the ETA's step rate counts training steps alone:

  ETA = remaining steps x (seconds / step over the synced windows)
        + remaining evaluations x (mean seconds of the evaluations so far)

Progress is a text stream (write / flush): MetricsWriter prints through it, so a line printed while
the bar is shown clears the bar first and redraws it after.
"""

from __future__ import annotations

import contextlib
import time
from typing import TextIO

BAR = 24


def duration(seconds: float) -> str:
  """12s, 4m05s, 2h07m."""
  seconds = max(0, int(round(seconds)))
  if seconds < 60:
    return f"{seconds}s"
  if seconds < 3600:
    return f"{seconds // 60}m{seconds % 60:02d}s"
  return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
  """Progress of steps start..total on `stream` (a bar when tty, else nothing between lines)."""

  def __init__(self, total: int, start: int, stream: TextIO, *, evals_left: int = 0,
               tty: bool | None = None, redraw_s: float = 0.2):
    self.total, self.step, self.stream = total, start, stream
    self.tty = stream.isatty() if tty is None else tty
    self.redraw_s = redraw_s
    self.evals_left = evals_left
    self.train_s, self.train_steps = 0.0, 0
    self.eval_s: list[float] = []
    self.phase: str | None = None
    self.shown: dict[str, str] = {}
    self._drawn, self._bar_visible = 0.0, False

  # -- the stream MetricsWriter prints through
  def write(self, text: str) -> int:
    self._clear()
    n = self.stream.write(text)
    if text.endswith("\n"):
      self._draw(force=True)
    return n

  def flush(self) -> None:
    self.stream.flush()

  def isatty(self) -> bool:
    return self.tty

  # -- what the loop reports
  def dispatched(self, step: int) -> None:
    """A step was dispatched (no device sync); redraws the bar now and then."""
    self.step = step
    self._draw()

  def window(self, steps: int, seconds: float, shown: dict[str, str]) -> None:
    """A synced window of `steps` training steps that took `seconds`; `shown`: bar fields."""
    self.train_steps += steps
    self.train_s += seconds
    self.shown = shown

  @contextlib.contextmanager
  def timed(self, phase: str, evaluation: bool = False):
    """Times a phase outside the training steps (shown on the bar meanwhile); yields a dict whose
    'seconds' is set at the end."""
    self.phase, start, result = phase, time.perf_counter(), {}
    self._draw(force=True)
    try:
      yield result
    finally:
      result["seconds"] = time.perf_counter() - start
      self.phase = None
      if evaluation:
        self.eval_s.append(result["seconds"])
        self.evals_left = max(0, self.evals_left - 1)

  def eta_s(self) -> float | None:
    if not self.train_steps:
      return None
    evals = self.evals_left * (sum(self.eval_s) / len(self.eval_s)) if self.eval_s else 0.0
    return (self.total - self.step) * self.train_s / self.train_steps + evals

  def fraction(self, step: int) -> str:
    """'500/1500 (33%)'."""
    return f"{step}/{self.total} ({100 * step // max(self.total, 1)}%)"

  def eta_text(self) -> str:
    eta = self.eta_s()
    return "?" if eta is None else duration(eta)

  # -- the bar
  def _line(self) -> str:
    filled = BAR * self.step // max(self.total, 1)
    parts = [f"step {self.step}/{self.total} [{'#' * filled}{'.' * (BAR - filled)}] "
             f"{100 * self.step // max(self.total, 1)}%"]
    parts += [f"{k} {v}" for k, v in self.shown.items()]
    parts.append(f"{self.phase}..." if self.phase else f"ETA {self.eta_text()}")
    return " | ".join(parts)

  def _draw(self, force: bool = False) -> None:
    now = time.monotonic()
    if not self.tty or (not force and now - self._drawn < self.redraw_s):
      return
    self.stream.write("\r\x1b[K" + self._line())
    self.stream.flush()
    self._drawn, self._bar_visible = now, True

  def _clear(self) -> None:
    if self._bar_visible:
      self.stream.write("\r\x1b[K")
      self._bar_visible = False

  def close(self) -> None:
    self._clear()
    self.stream.flush()


class Counter:
  """Progress of `total` items of work outside training (sentences decoded by `tfm eval`):
  redrawn on a terminal; otherwise one line at each quarter, so a log shows it advance.

    [eval] decoding 96/200 sentences (48%) | 31.2 sentences/s | ETA 3s
  """

  def __init__(self, label: str, total: int, unit: str, stream: TextIO, *, tty: bool | None = None):
    self.label, self.total, self.unit, self.stream = label, total, unit, stream
    self.tty = stream.isatty() if tty is None else tty
    self._start = time.perf_counter()
    self._quarter = 0

  def line(self, done: int) -> str:
    seconds = time.perf_counter() - self._start
    rate = done / seconds if seconds > 0 else 0.0
    eta = duration((self.total - done) / rate) if rate > 0 else "?"
    return (f"{self.label} {done}/{self.total} {self.unit} ({100 * done // max(self.total, 1)}%) | "
            f"{rate:.1f} {self.unit}/s | ETA {eta}")

  def __call__(self, done: int) -> None:
    """`done` items of `total` are finished."""
    if self.tty:
      self.stream.write("\r\x1b[K" + self.line(done) + ("\n" if done >= self.total else ""))
    elif 4 * done // max(self.total, 1) > self._quarter or done >= self.total:
      self._quarter = 4 * done // max(self.total, 1)
      self.stream.write(self.line(done) + "\n")
    self.stream.flush()
