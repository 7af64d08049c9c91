"""What a researcher sees of a run: progress lines with ETA, MFU where the devices have a peak,
a profiler trace of chosen steps, WORKDIR/curves.png at each evaluation (train.curves) and tfm plot."""

import re

import pytest

from tests.integration.conftest import run_train
from tfm import cli
from tfm.train import flops as flops_lib
from tfm.train.trackers.events import read_scalars

PEAK = 1e12  # a pretend accelerator's FLOP/s, so the CPU run reports an MFU


@pytest.fixture(scope="module")
def runs(experiment_module, tmp_path_factory):
  monkeypatch = pytest.MonkeyPatch()
  monkeypatch.setattr(flops_lib, "peak_flops", lambda device_kind=None: PEAK)
  root = tmp_path_factory.mktemp("runs")
  logs = {}
  # Two runs of one model (its steps compiled once), on two data orders: two curves to overlay.
  # The profiler traces the drawn run alone (the tests read its trace only).
  for name, curves, order, profile in (("drawn", True, 0, "(2,4)"), ("undrawn", False, 1, "()")):
    _, logs[name] = run_train(experiment_module(
        "train.steps=8", "train.log_every=2", "train.eval_every=4", "train.checkpoint_every=4",
        f"train.profile_steps={profile}", f"train.curves={curves}", f"data.shuffle_seed={order}"),
        root / name)
  monkeypatch.undo()
  return root, logs


@pytest.mark.slow
def test_progress_mfu_and_timings_in_the_log(runs, experiment_module):
  root, logs = runs
  log = logs["drawn"]
  assert re.search(r"tfm: train step compiled \(or loaded from the compilation cache\) in "
                   r"[0-9.]+ s", log)
  lines = re.findall(r"\[train\] step (\d+)/8 \((\d+)%\) \|.* \| mfu ([0-9.e-]+) \| eta (\S+)", log)
  assert [(int(s), int(p)) for s, p, _, _ in lines] == [(2, 25), (4, 50), (6, 75), (8, 100)]
  # MFU = model FLOPs of a step / seconds a step / (devices x peak): check it against the logged
  # step time (TensorBoard's, unrounded), the batch geometry and tfm/train/flops.py independently.
  config = experiment_module("train.steps=8")
  rows, length = config.data.tokens_per_batch // config.data.max_length, config.data.max_length
  step_flops = rows * flops_lib.train_flops(config.model, length, length)
  scalars = read_scalars(root / "drawn" / "tensorboard")
  assert [s for s, _ in scalars["train/step_s"]] == [2, 4, 6, 8]
  for (step, step_s), (_, mfu) in zip(scalars["train/step_s"], scalars["train/mfu"]):
    assert mfu == pytest.approx(step_flops / step_s / PEAK, rel=1e-5), step
  for (_, _, shown, _), (_, mfu) in zip(lines, scalars["train/mfu"]):  # the console's, rounded
    assert float(shown) == pytest.approx(mfu, rel=5e-3)
  assert re.search(r"\[dev\] step 4 \|.* \| eval_s [0-9.]+", log)
  assert "tfm: profiler trace of steps 3-4 in" in log


def test_profile_trace_and_curves_in_the_workdir(runs):
  root, _ = runs
  assert list((root / "drawn" / "tensorboard" / "plugins" / "profile").glob("*/*.xplane.pb"))
  scalars = read_scalars(root / "drawn" / "tensorboard")
  assert [s for s, _ in scalars["dev/nll"]] == [4, 8]
  assert len(scalars["train/tokens"]) == 4 and all(t > 0 for _, t in scalars["train/tokens"])
  png = (root / "drawn" / "curves.png").read_bytes()
  assert png.startswith(b"\x89PNG") and len(png) > 20_000
  assert not (root / "undrawn" / "curves.png").exists()  # train.curves=False: tfm plot draws it


def test_tfm_plot_overlays_workdirs(runs, capsys):
  root, _ = runs
  out = root / "both.png"
  assert cli.main(["tfm", "plot", "--workdir", str(root / "drawn"), str(root / "undrawn"),
                   f"--out={out}", "--names=drawn,undrawn"]) == 0
  assert out.read_bytes().startswith(b"\x89PNG") and f"written: {out}" in capsys.readouterr().out
  assert cli.main(["tfm", "plot", f"--workdir={root}"]) == 1  # not a workdir
  assert "no tensorboard/ events" in capsys.readouterr().err
  assert cli.main(["tfm", "plot", f"--workdir={root / 'undrawn'}", "--names=a,b"]) == 2
  assert "--names: expected 1 names" in capsys.readouterr().err


def test_legend_names_tell_workdirs_apart():
  from tfm.figures.curves import legend_names  # pylint: disable=import-outside-toplevel
  assert legend_names(["runs/base", "runs/big/"]) == ["base", "big"]
  assert legend_names(["a/x/quickstart", "b/x/quickstart", "c/y/base"]) == [
      "a/x/quickstart", "b/x/quickstart", "c/y/base"]
  assert legend_names(["/r/a/quickstart", "/r/b/quickstart"]) == ["a/quickstart", "b/quickstart"]
  assert legend_names(["gs://bucket/a/run", "gs://bucket/b/run"]) == ["a/run", "b/run"]
