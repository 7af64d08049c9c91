"""The 'mlflow' tracker: a tfm run as an MLflow run (through MlflowClient: no global active run).

  server      train.mlflow_tracking_uri, else $MLFLOW_TRACKING_URI (http://host:5000 for a tracking
              server, or a database URI: sqlite:///runs.db); none set stops the run at its start
  experiment  train.tracker_experiment, the sweep's, $MLFLOW_EXPERIMENT_NAME or 'tfm' (created if
              absent); the run named after its workdir, tagged with it (and a sweep's row, group,
              seed)
  params      the config, flattened ('model.num_layers': '6', 'model.dtype': 'bfloat16'; lists
              and mappings as JSON)
  metrics     each figure at its step (MLflow's metric history); files as artifacts

The run's id is kept in WORKDIR/trackers/mlflow.json with the URI: a resumed run (or its `tfm
eval`) continues that run, and a metric is logged only at steps beyond the last step its history
held on the server when it resumed (MLflow keeps every value logged, duplicates included). A
resume whose config changed a loop key (train.steps, say) keeps the param's first value (MLflow
params are immutable) and says which.

Requests: the start's check makes one attempt with a 10 s timeout, so an unreachable server stops
the run at once; later requests retry (MLflow's retries, 2 by default here, a 30 s timeout each)
and a figure that still fails is kept and sent with the next log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import Any, Mapping

from tfm.train.trackers import common as tracker_common

# MLflow's request settings (environment variables it reads at each request), unless set already.
RETRIES, TIMEOUT_S = "2", "30"
BATCH = 1000  # metrics per log_batch request (MLflow's limit); params go 100 a request
PARAM_LENGTH = 6000  # MLflow's longest param value


def tracking_uri(train) -> str:
  """train.mlflow_tracking_uri or $MLFLOW_TRACKING_URI; raises the one-line error without one."""
  uri = train.mlflow_tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
  if not uri:
    raise ValueError("config key train.mlflow_tracking_uri: expected the MLflow tracking server's "
                     "URI (http://HOST:PORT, or sqlite:///FILE) since train.trackers names mlflow: "
                     "set it or $MLFLOW_TRACKING_URI, got None")
  return uri


def _client_class():
  """MlflowClient; ValueError in one line without the mlflow package."""
  return tracker_common.client_package("mlflow", "mlflow.tracking").MlflowClient


def _client(uri: str):
  MlflowClient = _client_class()  # pylint: disable=invalid-name
  os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", RETRIES)
  os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", TIMEOUT_S)
  # Its run's URL printed to stdout at the end would cut into the progress line: ours, at the
  # start, names the run.
  os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
  return MlflowClient(tracking_uri=uri)


@contextlib.contextmanager
def _one_attempt(timeout_s: int = 10):
  """MLflow's requests in the block: one attempt each, timeout_s at most."""
  keys = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(timeout_s)}
  saved = {k: os.environ.get(k) for k in keys}
  os.environ.update(keys)
  try:
    yield
  finally:
    for k, v in saved.items():
      if v is None:
        os.environ.pop(k, None)
      else:
        os.environ[k] = v


@contextlib.contextmanager
def _quiet_retries():
  """urllib3's 'Retrying (Retry(total=...)) after connection broken' warnings off in the block."""
  logger = logging.getLogger("urllib3.connectionpool")
  level = logger.level
  logger.setLevel(logging.ERROR)
  try:
    yield
  finally:
    logger.setLevel(level)


def check(train) -> None:
  """The URI is set, the package installed and the server answers; else ValueError in one line."""
  uri = tracking_uri(train)
  _client_class()  # the package is installed
  try:
    # The client itself refuses some URIs (MLflow 3 a file store's, file:///...: "maintenance
    # mode"), so it is made inside the one-line error too.
    client = _client(uri)
    with _one_attempt():
      client.search_experiments(max_results=1)
  except Exception as e:  # pylint: disable=broad-except
    reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    raise ValueError(f"train.trackers: mlflow: the tracking server or store at {uri} cannot be "
                     f"used ({reason[:200]}); start it, or set train.mlflow_tracking_uri (or "
                     "$MLFLOW_TRACKING_URI) to one that does, or drop mlflow from train.trackers"
                     ) from None


def _experiment_id(client, name: str) -> str:
  """The id of experiment `name`, created if absent (a sweep's parallel runs may race to it)."""
  found = client.get_experiment_by_name(name)
  if found is not None:
    return found.experiment_id
  try:
    return client.create_experiment(name)
  except Exception:  # pylint: disable=broad-except
    found = client.get_experiment_by_name(name)  # another run of the sweep created it first
    if found is None:
      raise
    return found.experiment_id


class MLflow:
  """The MLflow run of the tfm run in `workdir` (created, or continued from its mlflow.json)."""
  name = "mlflow"

  def __init__(self, train, workdir: str, experiment: str, run_name: str, tags: Mapping[str, str],
               stream):
    from mlflow.entities import RunStatus  # pylint: disable=import-outside-toplevel
    self.uri = tracking_uri(train)
    self.client = _client(self.uri)
    self.stream = stream
    self.floor: dict[str, int] = {}  # tag -> the last step its history held when the run resumed
    self._pending: list = []  # metrics that a request failed to send
    self._failing = False
    state = tracker_common.read_state(workdir, self.name)
    run = None
    if state.get("run_id") and state.get("tracking_uri") == self.uri:
      try:
        run = self.client.get_run(state["run_id"])
      except Exception:  # pylint: disable=broad-except
        print(f"[mlflow] the run {state['run_id']} of {workdir}/trackers/mlflow.json is not on "
              f"{self.uri}: a new run", file=stream, flush=True)
    elif state.get("run_id"):
      print(f"[mlflow] the run {state['run_id']} of {workdir}/trackers/mlflow.json is at "
            f"{state.get('tracking_uri')}, train.mlflow_tracking_uri now {self.uri}: a new run "
            "there, with this run's figures from now on", file=stream, flush=True)
    if run is None:
      run = self.client.create_run(_experiment_id(self.client, experiment), run_name=run_name,
                                   tags=dict(tags))
      tracker_common.write_state(workdir, self.name, {"run_id": run.info.run_id,
                                                      "experiment_id": run.info.experiment_id,
                                                      "tracking_uri": self.uri})
    else:
      self.client.update_run(run.info.run_id, status=RunStatus.to_string(RunStatus.RUNNING))
      for key in run.data.metrics:
        steps = [m.step for m in self.client.get_metric_history(run.info.run_id, key)]
        if steps:
          self.floor[key] = max(steps)
    self.run_id = run.info.run_id
    self.logged_params = dict(run.data.params)
    print(f"[mlflow] run {self.run_id} ({run_name}) of experiment {experiment!r} at {self.uri}",
          file=stream, flush=True)

  def params(self, values: Mapping[str, Any]) -> None:
    from mlflow.entities import Param  # pylint: disable=import-outside-toplevel
    values = {k: tracker_common.param_text(v)[:PARAM_LENGTH] for k, v in values.items()}
    changed = sorted(k for k, v in values.items()
                     if k in self.logged_params and self.logged_params[k] != v)
    if changed:
      print(f"[mlflow] run {self.run_id} keeps the first value of {', '.join(changed)} (MLflow "
            "params do not change)", file=self.stream, flush=True)
    new = [Param(k, v) for k, v in values.items() if k not in self.logged_params]
    for i in range(0, len(new), 100):
      self.client.log_batch(self.run_id, params=new[i:i + 100])
    self.logged_params.update({p.key: p.value for p in new})

  def tags(self, values: Mapping[str, str]) -> None:
    for key, value in values.items():
      self.client.set_tag(self.run_id, key, str(value))

  def metrics(self, step: int, values: Mapping[str, float]) -> None:
    from mlflow.entities import Metric  # pylint: disable=import-outside-toplevel
    now = int(time.time() * 1000)
    for key, value in values.items():
      if step > self.floor.get(key, -1):  # twice at a step in one process: both kept, as TB does
        self._pending.append(Metric(key, float(value), now, int(step)))
    self._send()

  def _send(self) -> bool:
    """Sends the pending metrics; on a failure keeps them (said once an outage). True: all sent.
    urllib3's warning at each retry of a request is held back: an outage is said in one line."""
    try:
      with _quiet_retries():
        while self._pending:
          self.client.log_batch(self.run_id, metrics=self._pending[:BATCH])
          del self._pending[:BATCH]
    except Exception as e:  # pylint: disable=broad-except
      if not self._failing:
        reason = str(e).splitlines()[0][:200] if str(e) else repr(e)
        print(f"[mlflow] could not log to {self.uri} ({reason}); {len(self._pending)} figures "
              "kept for the next try: training goes on",
              file=self.stream, flush=True)
      self._failing = True
      return False
    if self._failing:
      print(f"[mlflow] logging to {self.uri} again", file=self.stream, flush=True)
    self._failing = False
    return True

  def artifact(self, path: str, folder: str = "") -> None:
    try:
      self.client.log_artifact(self.run_id, path, folder or None)
    except Exception as e:  # pylint: disable=broad-except
      print(f"[mlflow] could not keep {path} with run {self.run_id} ({str(e)[:200]})",
            file=self.stream, flush=True)

  def sync(self) -> None:
    self._send()

  def close(self, ok: bool = True) -> None:
    sent = self._send()
    if not sent:
      print(f"[mlflow] {len(self._pending)} figures could not be sent to {self.uri}",
            file=self.stream, flush=True)
    try:
      self.client.set_terminated(self.run_id, "FINISHED" if ok else "FAILED")
    except Exception:  # pylint: disable=broad-except
      pass
