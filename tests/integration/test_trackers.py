"""train.trackers against a real MLflow tracking server (started here, SQLite store) and W&B's
offline files: a run, its resume after a kill and its `tfm eval` give one MLflow run and one W&B run
holding TensorBoard's figures, figure for figure, each step once; a sweep's runs (a stack's
members) are one experiment, tagged by row and seed; a server that does not answer stops the run
before anything is written."""

import json
import os
import shutil

import pytest

from tests.integration import trackers_testlib as lib
from tests.integration.conftest import run_train, sweep_overrides, tiny_overrides
from tfm import cli
from tfm.config import flatten, load_config
from tfm.train.trackers.events import read_scalars

pytestmark = pytest.mark.long  # a server, tfm processes: CI runs them after the README's command

TIMINGS = ("train/step_s", "train/target_tokens_per_s", "train/mfu", "dev/eval_s")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
  lib.require("mlflow", "wandb", "flask", "sqlalchemy")
  with lib.mlflow_server(str(tmp_path_factory.mktemp("mlflow"))) as uri:
    yield uri


def _client(uri):
  from mlflow.tracking import MlflowClient  # pylint: disable=import-outside-toplevel
  return MlflowClient(uri)


def _histories(client, run_id) -> dict:
  run = client.get_run(run_id)
  return {key: [(m.step, m.value) for m in sorted(client.get_metric_history(run_id, key),
                                                  key=lambda m: (m.step, m.timestamp))]
          for key in run.data.metrics}


def _same_figures(tensorboard: dict, tracker: dict):
  """Every TensorBoard tag in the tracker at the same steps, each once, with its value (timings:
  the steps only). TensorBoard keeps the value a step was given last, the trackers the first: a
  resume that logs a step again (the killed run's steps, an owed evaluation) must log the same
  figures, the pipeline's `data/` counts included."""
  assert sorted(tracker) == sorted(tensorboard)
  for tag, points in tensorboard.items():
    steps = [s for s, _ in tracker[tag]]
    assert steps == [s for s, _ in points], tag  # each step once, none missing
    if tag in TIMINGS:
      continue
    for (step, want), (_, got) in zip(points, tracker[tag]):
      assert got == pytest.approx(want, rel=1e-6, abs=1e-6), (tag, step)


def test_a_run_resumed_after_a_kill_and_its_eval_are_one_mlflow_and_one_wandb_run(
    server, corpus, tmp_path, capsys):
  workdir = tmp_path / "run"
  trackers = ["train.trackers=tensorboard,mlflow,wandb", f"train.mlflow_tracking_uri={server}",
              "train.tracker_experiment=resumed", "train.eval_every=3", "train.curves=True"]
  config = load_config("configs/quickstart.py", tiny_overrides(corpus, *trackers))
  run_train(config, workdir)
  first = json.loads((workdir / "trackers" / "mlflow.json").read_text())
  # Killed after step 6 was logged but before its checkpoint: the resume repeats steps 4..6.
  shutil.rmtree(workdir / "checkpoints" / "6")
  resumed = load_config("configs/quickstart.py",
                        tiny_overrides(corpus, *trackers, "train.steps=9"))
  _, out = run_train(resumed, workdir)
  assert "resumed from step 3" in out
  assert "keeps the first value of train.steps" in out  # MLflow params do not change
  assert cli.main(["tfm", "eval", f"--workdir={workdir}", "--split=dev", "--limit=4"]) == 0
  capsys.readouterr()
  (eval_file,) = workdir.glob("eval_dev_9_avg*_first4.json")

  tensorboard = read_scalars(workdir / "tensorboard")
  assert [s for s, _ in tensorboard["dev/perplexity"]] == [3, 6, 9]
  client = _client(server)
  state = json.loads((workdir / "trackers" / "mlflow.json").read_text())
  assert state == first  # the resume and the eval continued the run
  run = client.get_run(state["run_id"])
  assert run.info.status == "FINISHED" and run.info.run_name == "run"
  assert client.get_experiment(run.info.experiment_id).name == "resumed"
  assert run.data.tags["workdir"] == str(workdir)
  want = flatten(config.to_dict())
  assert set(run.data.params) == set(want)
  assert run.data.params["model.d_model"] == "16" and run.data.params["train.steps"] == "6"
  assert run.data.params["train.trackers"] == json.dumps(["tensorboard", "mlflow", "wandb"])
  _same_figures(tensorboard, _histories(client, state["run_id"]))
  artifacts = {f.path for f in client.list_artifacts(state["run_id"])}
  assert artifacts == {"curves.png", "eval"}
  assert [f.path for f in client.list_artifacts(state["run_id"], "eval")] == [
      f"eval/{eval_file.name}"]
  local = client.download_artifacts(state["run_id"], f"eval/{eval_file.name}", str(tmp_path))
  assert open(local, "rb").read() == eval_file.read_bytes()
  local = client.download_artifacts(state["run_id"], "curves.png", str(tmp_path))
  assert open(local, "rb").read() == (workdir / "curves.png").read_bytes()  # the last drawing

  runs = lib.wandb_runs(str(workdir / "trackers" / "wandb"))
  assert len(runs) == 3  # the training, its resume, the eval: parts of one run
  assert {r["id"] for r in runs} == {json.loads(
      (workdir / "trackers" / "wandb.json").read_text())["run_id"]}
  assert all(r["name"] == "run" for r in runs)
  assert runs[0]["config"]["model.d_model"] == 16
  assert set(want) <= set(runs[0]["config"])
  history = {}
  for r in runs:
    for step, row in r["history"]:
      for tag, value in row.items():
        history.setdefault(tag, []).append((step, value))
  _same_figures(tensorboard, history)
  files = [f for r in runs for f in r["files"]]
  assert "curves.png" in files and f"eval/{eval_file.name}" in files
  kept = os.path.join(runs[2]["dir"], "files", "eval", eval_file.name)
  assert open(kept, "rb").read() == eval_file.read_bytes()


def test_a_sweeps_stacked_rows_are_one_experiment_tagged_by_row_and_seed(server, corpus, tmp_path,
                                                                        capsys):
  """Table 3 v3's base and D1 trained as one stack (two members, two workdirs): two MLflow runs
  of the experiment named after the sweep's root, each tagged with its row, group and seed, with
  its final figures (sweep/*) as TensorBoard's HParams records have them."""
  root = tmp_path / "rows"
  tiny = [o for o in sweep_overrides(corpus, 4) if not o.startswith("model.dropout_rate")]
  argv = (["tfm", "sweep", "--config=configs/table3_v3.py", f"--root={root}", "--eval_limit=4",
           "--rows=base,D1", "--stack"] + [f"--config.{o}" for o in tiny]
          + ["--config.train.trackers=tensorboard,mlflow,wandb",
             f"--config.train.mlflow_tracking_uri={server}"])
  assert cli.main(argv) == 0
  assert "[sweep] start base-s0, D1-s0 on" in capsys.readouterr().out
  client = _client(server)
  experiment = client.get_experiment_by_name("rows")
  runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
  assert sorted(runs) == ["D1-s0", "base-s0"]
  results = {r["name"]: r
             for r in map(json.loads, (root / "results.jsonl").read_text().splitlines())}
  for name, run in runs.items():
    row = name.split("-")[0]
    assert {k: run.data.tags[k] for k in ("sweep", "row", "group", "seed")} == {
        "sweep": "rows", "row": row, "group": row, "seed": "0"}
    tensorboard = read_scalars(root / name / "tensorboard")
    histories = _histories(client, run.info.run_id)
    _same_figures(tensorboard, histories)
    assert histories["sweep/dev_ppl"] == [(4, pytest.approx(results[name]["dev_ppl"], rel=1e-6))]
    assert histories["sweep/bleu"] == [(4, pytest.approx(results[name]["bleu"], rel=1e-6))]
    assert run.data.params["model.dropout_rate"] == ("0.0" if row == "D1" else "0.1")
    (wandb,) = {r["id"] for r in lib.wandb_runs(str(root / name / "trackers" / "wandb"))}
    parts = lib.wandb_runs(str(root / name / "trackers" / "wandb"))
    assert parts[0]["group"] == row and f"row={row}" in parts[0]["tags"]
    assert "seed=0" in parts[0]["tags"] and "sweep=rows" in parts[0]["tags"]
    assert wandb == json.loads((root / name / "trackers" / "wandb.json").read_text())["run_id"]


def test_a_server_that_does_not_answer_stops_the_run_before_anything_is_written(corpus, tmp_path):
  lib.require("mlflow")
  uri = f"http://127.0.0.1:{lib.free_port()}"  # nothing listens there
  config = load_config("configs/quickstart.py", tiny_overrides(
      corpus, "train.trackers=tensorboard,mlflow", f"train.mlflow_tracking_uri={uri}"))
  with pytest.raises(ValueError) as e:
    run_train(config, tmp_path / "run")
  message = str(e.value)
  assert "\n" not in message and uri in message and "train.mlflow_tracking_uri" in message
  assert "MLFLOW_TRACKING_URI" in message
  assert not (tmp_path / "run").exists()  # nothing half written


def test_wandb_online_without_a_server_that_answers_stops_the_run_before_anything_is_written(
    corpus, tmp_path, monkeypatch):
  lib.require("wandb")
  base = f"http://127.0.0.1:{lib.free_port()}"  # nothing listens there
  monkeypatch.setenv("WANDB_BASE_URL", base)
  monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
  config = load_config("configs/quickstart.py", tiny_overrides(
      corpus, "train.trackers=tensorboard,wandb", "train.wandb_mode=online"))
  with pytest.raises(ValueError) as e:
    run_train(config, tmp_path / "run")
  message = str(e.value)
  assert "\n" not in message and base in message and "train.wandb_mode=offline" in message
  assert "WANDB_API_KEY" in message
  assert not (tmp_path / "run").exists()


def test_a_server_that_fails_during_the_run_gets_the_figures_later(server, tmp_path):
  """Mid-run, a failed request never stops the run: one line says so, the figures are kept and
  sent with the next log, each step once."""
  import io  # pylint: disable=import-outside-toplevel
  from tfm.train import trackers  # pylint: disable=import-outside-toplevel
  from tfm.train.config import TrainConfig  # pylint: disable=import-outside-toplevel
  console = io.StringIO()
  train = TrainConfig(trackers=("mlflow",), mlflow_tracking_uri=server,
                      tracker_experiment="outage")
  run = trackers.open_run(train, str(tmp_path / "run"), {"train.steps": 9}, console)
  (mlflow,) = run.all
  send = mlflow.client.log_batch
  run.metrics(1, {"train/loss": 3.0})

  def down(*args, **kwargs):
    raise ConnectionError("connection refused")

  mlflow.client.log_batch = down
  run.metrics(2, {"train/loss": 2.0})
  run.metrics(3, {"train/loss": 1.5, "dev/perplexity": 9.0})
  mlflow.client.log_batch = send
  run.metrics(4, {"train/loss": 1.0})
  run.close()
  lines = console.getvalue().splitlines()
  assert sum("could not log to" in line for line in lines) == 1  # said once an outage
  assert "training goes on" in lines[1] and lines[-1] == f"[mlflow] logging to {server} again"
  histories = _histories(_client(server), mlflow.run_id)
  assert histories == {"train/loss": [(1, 3.0), (2, 2.0), (3, 1.5), (4, 1.0)],
                       "dev/perplexity": [(3, 9.0)]}


WANDB_PART = """
import os, signal, sys, time
from tfm.train import trackers
from tfm.train.config import TrainConfig
workdir, first, last, kill = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "kill"
run = trackers.open_run(TrainConfig(trackers=("wandb",)), workdir)
for step in range(first, last + 1):
  run.metrics(step, {"train/loss": 10.0 - step})
if sys.argv[5:]:
  run.tags({"row": "", "group": "run", "seed": "0"})
if kill:
  time.sleep(4)  # beyond W&B's flush of the rows to disk (tracker_wandb.FLUSH_S)
  os.kill(os.getpid(), signal.SIGKILL)
run.close()
"""


def _wandb_part(workdir, first: int, last: int, kill: bool = False, tags: bool = False) -> int:
  """A tfm process's part of a W&B run: steps first..last of 'train/loss', then killed with
  SIGKILL or closed; its exit status. A process of its own: W&B's finish returns before its
  service has written a second run of a process to disk, and a service started by an earlier test
  of this process would outlive a kill."""
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
  argv = [sys.executable, "-c", WANDB_PART, str(workdir), str(first), str(last),
          "kill" if kill else "close"] + (["tags"] if tags else [])
  return subprocess.run(argv, check=False, env=dict(env, PYTHONPATH=os.getcwd())).returncode


def test_a_wandb_run_killed_with_sigkill_and_resumed_has_each_step_once(tmp_path):
  """A process killed with SIGKILL after logging steps 1..6 (W&B had written 1..5 to disk, step
  6's row still open), resumed from a checkpoint at step 3: steps 4 and 5 are not logged again,
  6 is, and the run's offline parts hold each step once."""
  lib.require("wandb")
  assert _wandb_part(tmp_path / "run", 1, 6, kill=True) == -9
  assert _wandb_part(tmp_path / "run", 4, 8) == 0  # the resume from step 3 repeats 4..6
  parts = lib.wandb_runs(str(tmp_path / "run" / "trackers" / "wandb"))
  assert len({p["id"] for p in parts}) == 1 and len(parts) == 2
  history = [(step, row["train/loss"]) for p in parts for step, row in p["history"]]
  assert history == [(s, 10.0 - s) for s in range(1, 9)]  # each step once, none missing


def test_a_wandb_run_continued_from_a_copied_workdir_keeps_its_name_and_tags_no_empty_row(
    tmp_path):
  """The sweep's final tags of a run without a row add no 'row=' (nor 'group=', W&B's group);
  `tfm eval` on a copy of the workdir continues the run under its name, not the copy's."""
  lib.require("wandb")
  assert _wandb_part(tmp_path / "run-s0", 1, 1, tags=True) == 0
  shutil.copytree(tmp_path / "run-s0", tmp_path / "copy")
  assert _wandb_part(tmp_path / "copy", 2, 2) == 0
  parts = lib.wandb_runs(str(tmp_path / "copy" / "trackers" / "wandb"))
  assert len(parts) == 2 and len({p["id"] for p in parts}) == 1
  assert [p["name"] for p in parts] == ["run-s0", "run-s0"]
  assert parts[0]["tags"] == ["seed=0"]


def test_a_resume_at_another_tracking_uri_says_its_run_is_a_new_one(server, tmp_path):
  import io  # pylint: disable=import-outside-toplevel
  from tfm.train import trackers  # pylint: disable=import-outside-toplevel
  from tfm.train.config import TrainConfig  # pylint: disable=import-outside-toplevel
  first = f"sqlite:///{tmp_path}/first.db"
  workdir = str(tmp_path / "run")
  run = trackers.open_run(TrainConfig(trackers=("mlflow",), mlflow_tracking_uri=first), workdir)
  (old,) = [t.run_id for t in run.all]
  run.close()
  console = io.StringIO()
  run = trackers.open_run(TrainConfig(trackers=("mlflow",), mlflow_tracking_uri=server), workdir,
                          stream=console)
  (new,) = [t.run_id for t in run.all]
  run.close()
  assert new != old
  assert console.getvalue().splitlines()[0] == (
      f"[mlflow] the run {old} of {workdir}/trackers/mlflow.json is at {first}, "
      f"train.mlflow_tracking_uri now {server}: a new run there, with this run's figures from "
      "now on")
  assert json.loads((tmp_path / "run" / "trackers" / "mlflow.json").read_text())["run_id"] == new
