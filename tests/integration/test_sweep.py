"""`tfm sweep` end to end on the fake corpus: a grid of tiny runs, one failing, then a rerun."""

import json
import os

import pytest

from tests.integration.conftest import command_lines, sweep_overrides
from tfm import cli
from tfm.config import load_config
from tfm.model.params import count_params


def _tensorboard_hparams(workdir):
  """What TensorBoard's HParams dashboard reads of a run: {'experiment': HParamsPluginData's
  experiment, 'start' / 'end': its session infos, 'scalars': {tag: value}}, read with TensorFlow's
  own event reader and the hparams plugin's protos, not with tfm's code."""
  import glob  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData  # pylint: disable=import-outside-toplevel
  found = {"scalars": {}}
  for path in glob.glob(os.path.join(workdir, "tensorboard", "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.metadata.plugin_data.plugin_name == "hparams":
          data = HParamsPluginData.FromString(value.metadata.plugin_data.content)
          found[data.WhichOneof("data")] = getattr(data, data.WhichOneof("data"))
        elif value.tag.startswith("sweep/"):
          found["scalars"][value.tag] = (event.step, value.simple_value)
  return found


@pytest.mark.long  # a sweep of runs, each a `tfm train` and a `tfm eval` process: CI runs it after the README's command
def test_grid_sweep_records_failures_and_skips_finished_runs(corpus, tmp_path, capsys):
  root = tmp_path / "sweep"
  overrides = sweep_overrides(corpus, 3)
  # mesh.data=3 cannot be built on this 1-device machine: those runs fail when they start.
  argv = (["tfm", "sweep", "--config=configs/quickstart.py", f"--root={root}", "--parallel=2",
           "--eval_limit=4", "--grid=model.num_heads=1,2", "--grid=mesh.data=1,3"]
          + [f"--config.{o}" for o in overrides])
  assert cli.main(argv) == 1  # the sweep finished, with failed runs
  err = capsys.readouterr().err
  assert "2 of 4 runs failed" in err
  lines = [json.loads(line) for line in (root / "results.jsonl").read_text().splitlines()]
  assert sorted(r["name"] for r in lines) == [
      "model.num_heads=1,mesh.data=1-s0", "model.num_heads=1,mesh.data=3-s0",
      "model.num_heads=2,mesh.data=1-s0", "model.num_heads=2,mesh.data=3-s0"]
  ok = [r for r in lines if r["status"] == "ok"]
  failed = [r for r in lines if r["status"] == "failed"]
  assert [r["name"].split(",")[1] for r in ok] == ["mesh.data=1-s0"] * 2
  assert all("mesh.data" in r["error"] and "number of devices" in r["error"] for r in failed)
  for r in ok:
    heads = int(r["name"].split(",")[0].split("=")[1])
    config = load_config("configs/quickstart.py", overrides + [f"model.num_heads={heads}"])
    assert r["params"] == count_params(config.model)
    assert r["changes"]["model.num_heads"] == heads and r["changes"]["train.steps"] == 3
    assert r["dev_ppl"] > 1 and 0 <= r["bleu"] <= 100 and r["steps"] == r["trained_steps"] == 3
    assert 0 < r["tokens_seen"] <= 3 * 256  # real target tokens of 3 steps of 256 slots
    # Training's own dev evaluation at its last step (TensorBoard) scores the same checkpoint on
    # the same examples as `tfm eval`.
    assert [s for s, _ in r["dev_curve"]] == [3]
    assert r["dev_curve"][0][1] == pytest.approx(r["dev_ppl"], rel=1e-5)
    # TensorBoard's HParams dashboard: the keys the grid varies, this run's values, its figures.
    board = _tensorboard_hparams(root / r["name"])
    hp = board["session_start_info"].hparams
    assert (hp["model.num_heads"].number_value, hp["mesh.data"].number_value) == (heads, 1)
    assert hp["group"].string_value == r["group"] and hp["seed"].number_value == 0
    assert board["session_end_info"].status == 1  # STATUS_SUCCESS
    assert {h.name for h in board["experiment"].hparam_infos} >= {"model.num_heads", "mesh.data",
                                                                  "train.steps", "seed"}
    assert {m.name.tag for m in board["experiment"].metric_infos} == {
        "sweep/dev_ppl", "sweep/bleu", "sweep/tokenized_bleu", "sweep/chrf", "sweep/ter",
        "sweep/wall_s"}
    assert board["scalars"]["sweep/dev_ppl"] == (3, pytest.approx(r["dev_ppl"], rel=1e-6))
    assert board["scalars"]["sweep/bleu"] == (3, pytest.approx(r["bleu"], rel=1e-6, abs=1e-6))
  for r in failed:  # no figures to compare
    assert "session_start_info" not in _tensorboard_hparams(root / r["name"])
  table = (root / "table.md").read_text()
  assert "| model.num_heads=1,mesh.data=1 | num_heads=1, data=1 | 1/1 |" in table
  assert "Failed runs:" in table and (root / "sweep.png").exists()
  assert ("both BLEUs over the first 4 dev sentences (dev PPL over the whole split, or its first "
          "data.eval_max_examples where set)") in table
  finished = {r["name"]: os.path.getmtime(root / r["name"] / "sweep_result.json") for r in ok}

  # The same command again: finished runs are skipped, the failed ones retried (and fail again).
  assert cli.main(argv) == 1
  out = capsys.readouterr().out
  assert "4 runs under" in out and "2 finished before, 2 to run" in out
  assert {n: os.path.getmtime(root / n / "sweep_result.json") for n in finished} == finished


def _term_eval_children(root, stop):
  """Sends SIGTERM to every `tfm eval` child of a sweep under `root` as soon as one appears (a
  TERM to the process group reaches the eval child as well), until `stop` is set."""
  import signal  # pylint: disable=import-outside-toplevel
  import time  # pylint: disable=import-outside-toplevel
  while not stop.is_set():
    for pid, words in command_lines():
      if b"eval" in words and any(w.startswith(f"--workdir={root}".encode()) for w in words):
        os.kill(pid, signal.SIGTERM)
        return
    time.sleep(0.05)


@pytest.mark.long  # sweeps of runs, each a `tfm train` and a `tfm eval` process: CI runs it after the README's command
def test_a_run_without_dev_figures_on_disk_or_a_stopped_eval_is_not_finished(corpus, tmp_path,
                                                                               capsys):
  """`tfm eval` prints its figures and exits 0 where it cannot save them, and a TERM to the
  group kills it: either way the run is left unfinished ("stopped", one line saying why), is
  neither published nor taken, and the next sweep evaluates it."""
  import threading  # pylint: disable=import-outside-toplevel
  root, published = tmp_path / "sweep", tmp_path / "published"
  argv = (["tfm", "sweep", "--config=configs/quickstart.py", f"--root={root}", "--eval_limit=4",
           f"--publish={published}"] + [f"--config.{o}" for o in sweep_overrides(corpus, 3)])
  blocked = root / "run-s0" / "eval_dev_3_avg1_first4.json"
  blocked.mkdir(parents=True)  # where tfm eval writes its figures: it cannot
  assert cli.main(argv) == 1
  result = json.loads((root / "run-s0" / "sweep_result.json").read_text())
  assert result["status"] == "stopped" and result["dev_ppl"] is None, result
  assert result["error"].startswith("tfm eval saved no dev figures in"), result
  assert not (published / "run-s0").exists()
  blocked.rmdir()

  stop = threading.Event()
  watcher = threading.Thread(target=_term_eval_children, args=(root, stop), daemon=True)
  watcher.start()
  try:
    assert cli.main(argv) == 1
  finally:
    stop.set()
    watcher.join()
  result = json.loads((root / "run-s0" / "sweep_result.json").read_text())
  assert result["status"] == "stopped", result
  assert result["error"] == "tfm eval was stopped by SIGTERM; run the sweep again to resume it"

  capsys.readouterr()
  assert cli.main(argv) == 0  # trained already: only the evaluation runs
  result = json.loads((root / "run-s0" / "sweep_result.json").read_text())
  assert result["status"] == "ok" and result["dev_ppl"] > 1
  assert json.loads((published / "run-s0" / "sweep_result.json").read_text())["dev_ppl"] == (
      result["dev_ppl"])
