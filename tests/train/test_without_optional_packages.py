"""Where tensorboardX or sacremoses is not installed (a GPU node's preinstalled Python, docs/gpu.md),
metrics go to the console and BLEU is sacreBLEU alone, each said in one line."""

import io
import math
import sys

import pytest

from tfm.eval import bleu
from tfm.train.metrics_writer import MetricsWriter

TENSORBOARDX = ("tensorboardX", "tensorboardX.record_writer", "tensorboardX.proto",
                "tensorboardX.proto.event_pb2", "tensorboardX.proto.summary_pb2")


def test_metrics_without_tensorboardx_go_to_the_console(tmp_path, monkeypatch):
  for name in TENSORBOARDX:
    monkeypatch.setitem(sys.modules, name, None)  # importing it raises ModuleNotFoundError
  console = io.StringIO()
  writer = MetricsWriter(str(tmp_path), console, total_steps=10)
  writer.write(5, {"loss": 2.5, "eta": "1m"})
  writer.write(5, {"bleu": 12.25}, prefix="dev")
  writer.sync()
  writer.close()
  lines = console.getvalue().splitlines()
  assert lines == [
      "[metrics] tensorboardX is not installed: metrics go to the console only (no TensorBoard "
      "event files, no curves.png)",
      "[train] step 5/10 (50%) | loss 2.5000 | eta 1m", "[dev] step 5 | bleu 12.2500"]
  assert writer.tensorboard is None and not list((tmp_path / "tensorboard").glob("events.*"))


def test_bleu_without_sacremoses_is_sacrebleu_alone(monkeypatch, caplog):
  hyps = ["the cat sat on the mat .", "a dog barked"]
  refs = ["the cat sat on the mat .", "the dog barked loudly"]
  with_moses = bleu.score(hyps, refs, "en")
  bleu._moses_installed.cache_clear()  # pylint: disable=protected-access
  monkeypatch.setitem(sys.modules, "sacremoses", None)
  try:
    without = [bleu.score(hyps, refs, "en") for _ in range(2)]
  finally:
    bleu._moses_installed.cache_clear()  # pylint: disable=protected-access
  assert [r.message for r in caplog.records if "sacremoses" in r.message] == [
      "sacremoses is not installed: the paper's tokenized BLEU is NaN, sacreBLEU is computed"]
  for result in without:
    assert result["sacrebleu"] == pytest.approx(with_moses["sacrebleu"]) and result["sacrebleu"] > 0
    assert math.isnan(result["tokenized_bleu"]) and set(result) == set(with_moses)
  assert not math.isnan(with_moses["tokenized_bleu"])
