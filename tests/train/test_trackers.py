"""train.trackers without a tracker's server (those tests: tests/integration/test_trackers.py):
the keys' validation, where a run goes (experiment, name, tags), the one-line errors before
anything starts, TensorBoard left out, and the trackers changing no sweep run's identity."""

import io
import json
import sys

import pytest

from tfm.config import Config, load_config
from tfm.sweep import execute, publish
from tfm.train import trackers
from tfm.train.trackers import common as tracker_common
from tfm.train.config import LOOP_FIELDS, TrainConfig, step_fields, train_from_mapping
from tfm.train.metrics_writer import MetricsWriter


@pytest.mark.parametrize("given, names", [
    ("tensorboard,mlflow", ("tensorboard", "mlflow")), (" wandb ", ("wandb",)),
    (["mlflow", "wandb"], ("mlflow", "wandb")), (("tensorboard,wandb",), ("tensorboard", "wandb")),
    ("", ())])
def test_trackers_are_read_from_the_command_line_and_json(given, names):
  assert train_from_mapping({"trackers": given}).trackers == names


@pytest.mark.parametrize("values, key", [
    ({"trackers": ("tensorboard", "neptune")}, "train.trackers"),
    ({"trackers": ("mlflow", "mlflow")}, "train.trackers"),
    ({"trackers": "tensorboard"}, "train.trackers"),  # a string, not built through the mapping
    ({"wandb_mode": "disabled"}, "train.wandb_mode"),
    ({"mlflow_tracking_uri": ""}, "train.mlflow_tracking_uri"),
    ({"tracker_experiment": 3}, "train.tracker_experiment")])
def test_bad_tracker_keys_name_the_key(values, key):
  with pytest.raises(ValueError, match=rf"^config key {key}: expected "):
    TrainConfig(**values)


def test_the_command_line_override_and_the_loop_only_keys():
  """Runs that differ only in their trackers compile the same steps (LOOP_FIELDS)."""
  config = load_config("configs/quickstart.py", ["train.trackers=tensorboard,mlflow,wandb",
                                                 "train.mlflow_tracking_uri=http://h:5000"])
  assert config.train.trackers == ("tensorboard", "mlflow", "wandb")
  assert {"trackers", "mlflow_tracking_uri", "tracker_experiment", "wandb_mode",
          "wandb_entity"} <= set(LOOP_FIELDS)
  assert step_fields(config.train) == step_fields(load_config("configs/quickstart.py").train)


def test_mlflow_without_a_uri_stops_in_one_line_naming_the_key_and_the_variable(monkeypatch,
                                                                              tmp_path):
  monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
  with pytest.raises(ValueError) as e:
    trackers.check(TrainConfig(trackers=("tensorboard", "mlflow")), str(tmp_path))
  assert str(e.value).startswith("config key train.mlflow_tracking_uri: expected ")
  assert "$MLFLOW_TRACKING_URI" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("tracker, package", [("mlflow", "mlflow.tracking"), ("wandb", "wandb")])
def test_a_tracker_whose_package_is_missing_says_which_extra_installs_it(tracker, package,
                                                                        monkeypatch, tmp_path):
  monkeypatch.setitem(sys.modules, package.split(".")[0], None)  # importing it raises
  monkeypatch.setitem(sys.modules, package, None)
  with pytest.raises(ValueError, match=rf"names {tracker}, but the {tracker} package is not "
                     rf"installed: pip install 'tfm\[{tracker}\]'"):
    trackers.check(TrainConfig(trackers=(tracker,), mlflow_tracking_uri="http://h:1"),
                   str(tmp_path))


def test_a_runs_experiment_name_and_tags(tmp_path, monkeypatch):
  """The experiment: the key, else the sweep's, else the environment's, else 'tfm'; the run is
  named after its workdir and tagged with it and the sweep's row, group and seed."""
  workdir = str(tmp_path / "base-s1")
  monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
  assert trackers.run_identity(TrainConfig(), workdir, "mlflow") == (
      "tfm", "base-s1", {"workdir": workdir})
  monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "from-env")
  monkeypatch.setenv("WANDB_PROJECT", "project-env")
  assert trackers.run_identity(TrainConfig(), workdir, "mlflow")[0] == "from-env"
  assert trackers.run_identity(TrainConfig(), workdir, "wandb")[0] == "project-env"
  trackers.write_sweep_tags(workdir, "table3", "base", "base", 1)
  assert json.loads((tmp_path / "base-s1" / "trackers" / "sweep.json").read_text()) == {
      "sweep": "table3", "row": "base", "group": "base", "seed": "1"}
  assert trackers.run_identity(TrainConfig(), workdir, "wandb") == (
      "table3", "base-s1", {"workdir": workdir, "sweep": "table3", "row": "base", "group": "base",
                            "seed": "1"})
  assert trackers.run_identity(TrainConfig(tracker_experiment="mine"), workdir,
                               "mlflow")[0] == "mine"


def test_params_are_the_flattened_config():
  config = Config()
  params = trackers.flat_params(config.to_dict())
  assert params["model.d_model"] == 512 and params["train.trackers"] == ["tensorboard"]
  assert params["train.profile_steps"] == [] and len(params) == sum(
      len(section) if isinstance(section, dict) else 1 for section in config.to_dict().values())
  assert [tracker_common.param_text(params[k]) for k in ("model.d_model", "train.trackers",
                                                  "train.curves", "train.init_from")] == [
      "512", '["tensorboard"]', "True", "None"]


def test_without_the_tensorboard_tracker_nothing_goes_to_tensorboard(tmp_path):
  console = io.StringIO()
  config = Config(train=TrainConfig(trackers=()))
  with MetricsWriter(str(tmp_path), console, total_steps=10, config=config) as writer:
    writer.write(5, {"loss": 2.5})
  assert writer.tensorboard is None and not (tmp_path / "tensorboard").exists()
  assert console.getvalue() == "[train] step 5/10 (50%) | loss 2.5000\n"


def test_the_trackers_change_no_sweep_runs_identity():
  """A run's fingerprint (a published result taken for it) and the sweep's varied keys ignore
  where the figures also go."""
  plain = load_config("configs/quickstart.py")
  tracked = load_config("configs/quickstart.py", [
      "train.trackers=tensorboard,mlflow", "train.mlflow_tracking_uri=http://h:5000",
      "train.tracker_experiment=x", "train.wandb_mode=online", "train.wandb_entity=team"])
  assert publish.fingerprint(plain, "sha", 4) == publish.fingerprint(tracked, "sha", 4)
  assert execute.changed_keys(tracked, plain) == {}


def test_a_file_store_uri_stops_in_one_line_naming_the_uri(tmp_path):
  """MLflow 3's client refuses a file store (file:///..., 'maintenance mode') when it is made: that
  too is the start's one line, not a traceback."""
  pytest.importorskip("mlflow.tracking")
  uri = f"file://{tmp_path}/mlruns"
  with pytest.raises(ValueError) as e:
    trackers.check(TrainConfig(trackers=("mlflow",), mlflow_tracking_uri=uri), str(tmp_path))
  message = str(e.value)
  assert message.startswith(f"train.trackers: mlflow: the tracking server or store at {uri} "
                            "cannot be used (")
  assert "\n" not in message and "train.mlflow_tracking_uri" in message
  assert not (tmp_path / "mlruns").exists()


def test_an_mlflow_outage_is_said_in_one_line_without_urllib3s_retry_warnings(monkeypatch,
                                                                              caplog):
  """A server that went away mid-run: each log's request retries (MLflow's retries), and the
  console gets tfm's one line, not urllib3's warning at every retry."""
  pytest.importorskip("mlflow.tracking")
  from tfm.train.trackers import mlflow as tracker_mlflow  # pylint: disable=import-outside-toplevel
  import socket  # pylint: disable=import-outside-toplevel
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    uri = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there
  monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
  monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
  console = io.StringIO()
  mlflow = object.__new__(tracker_mlflow.MLflow)  # a run made while the server answered
  mlflow.__dict__.update(uri=uri, client=tracker_mlflow._client(uri), stream=console, floor={},
                         _pending=[], _failing=False, run_id="0" * 32)
  with caplog.at_level("WARNING"):
    mlflow.metrics(1, {"train/loss": 3.0})
    mlflow.metrics(2, {"train/loss": 2.0})
  assert [r.getMessage()[:40] for r in caplog.records if r.name.startswith("urllib3")] == []
  lines = console.getvalue().splitlines()
  assert len(lines) == 1 and lines[0].startswith(f"[mlflow] could not log to {uri} (")
  assert "1 figures kept for the next try: training goes on" in lines[0]
  assert len(mlflow._pending) == 2


def test_a_sweeps_runs_start_w_and_b_services_of_their_own(monkeypatch, tmp_path):
  """Once the sweep has recorded a run's final figures in W&B, $WANDB_SERVICE names the sweep's
  W&B service: the next runs' `tfm train` and `tfm eval` do not inherit it."""
  from tfm.sweep import execute  # pylint: disable=import-outside-toplevel
  launched = []
  monkeypatch.setattr(execute.subprocess, "Popen",
                      lambda argv, **kwargs: launched.append(kwargs["env"]))
  monkeypatch.setenv("WANDB_SERVICE", "3-1-unix-/tmp/wandb-1-2-3/socket")
  execute.Job([], [str(tmp_path / "run")], ["train"], execute.Share(env={"X": "1"}), 4,
              None, 4)
  (env,) = launched
  assert "WANDB_SERVICE" not in env and env["X"] == "1"
  assert env["PATH"] == execute.os.environ["PATH"]
