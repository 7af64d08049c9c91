"""The training console: ETA from step time and evaluation time, a bar only on terminals."""

import io

import pytest

from tfm.train import progress
from tfm.train.progress import Progress, duration


class Terminal(io.StringIO):
  def isatty(self):
    return True


def test_eta_counts_training_steps_and_the_evaluations_left():
  progress = Progress(total=100, start=20, stream=io.StringIO(), evals_left=3)
  assert progress.eta_s() is None and progress.eta_text() == "?"
  progress.dispatched(30)
  progress.window(10, 5.0, {})  # 0.5 s a step
  assert progress.eta_s() == pytest.approx(70 * 0.5)  # no evaluation timed yet
  with progress.timed("evaluating dev loss", evaluation=True) as timed:
    pass
  assert progress.evals_left == 2 and timed["seconds"] >= 0
  progress.eval_s[-1] = 4.0  # an evaluation took 4 s: the 2 left add 8 s
  assert progress.eta_s() == pytest.approx(70 * 0.5 + 2 * 4.0)
  progress.window(30, 9.0, {})  # the rate over every synced window: 14 s / 40 steps
  assert progress.eta_s() == pytest.approx(70 * 14.0 / 40 + 8.0)
  assert progress.fraction(30) == "30/100 (30%)"


def test_duration_format():
  assert [duration(s) for s in (0, 59.4, 61, 3599, 3600, 7260)] == [
      "0s", "59s", "1m01s", "59m59s", "1h00m", "2h01m"]


def test_a_terminal_gets_one_redrawn_bar_and_lines_scroll_above_it():
  out = Terminal()
  progress = Progress(total=10, start=0, stream=out, redraw_s=0.0)
  progress.dispatched(5)
  assert out.getvalue().endswith("step 5/10 [############............] 50% | ETA ?")
  progress.write("[train] step 5/10 (50%) | loss 1.0\n")
  text = out.getvalue()
  # the bar is cleared, the line printed, the bar drawn again below it
  assert "\r\x1b[K[train] step 5/10 (50%) | loss 1.0\n\r\x1b[Kstep 5/10" in text
  with progress.timed("evaluating dev loss"):
    assert out.getvalue().endswith("| evaluating dev loss...")
  progress.close()
  assert out.getvalue().endswith("\r\x1b[K")


def test_a_log_file_gets_the_lines_only():
  out = io.StringIO()
  progress = Progress(total=10, start=0, stream=out, redraw_s=0.0)
  progress.dispatched(3)
  with progress.timed("compiling the train step"):
    pass
  progress.write("[train] step 3/10 (30%) | loss 2.0\n")
  progress.close()
  assert out.getvalue() == "[train] step 3/10 (30%) | loss 2.0\n"


def test_counter_prints_each_quarter_in_a_log_and_redraws_on_a_terminal():
  log = io.StringIO()
  counter = progress.Counter("[eval] dev: decoding", 8, "sentences", log, tty=False)
  for done in range(1, 9):
    counter(done)
  lines = log.getvalue().splitlines()
  assert [line.split(" | ")[0] for line in lines] == [
      f"[eval] dev: decoding {n}/8 sentences ({100 * n // 8}%)" for n in (2, 4, 6, 8)]
  assert lines[-1].endswith("ETA 0s")
  term = io.StringIO()
  counter = progress.Counter("[eval] dev: decoding", 3, "sentences", term, tty=True)
  for done in range(1, 4):
    counter(done)
  assert term.getvalue().count("\r\x1b[K") == 3 and "3/3 sentences (100%)" in term.getvalue()
  assert term.getvalue().endswith("\n") and term.getvalue().count("\n") == 1
