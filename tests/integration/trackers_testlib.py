"""What the trackers' tests share: a local MLflow tracking server, and W&B's offline files read.

mlflow_server(directory) starts `mlflow server` on 127.0.0.1 at a free port with an SQLite backend
store and artifacts served from `directory` (the server's job runner off: it needs packages the
tracking does not). wandb_history reads the .wandb transaction logs of an offline run: a LevelDB
log (32 KiB blocks of records with a 7-byte header: CRC32C, length, type full/first/middle/last)
after W&B's 7-byte file header ':W&B', each record one `wandb.proto.wandb_internal_pb2.Record`;
written here from that format, not with W&B's code.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request

import pytest

BLOCK = 32768


def require(*modules):
  """Skips without the trackers' packages (pyproject's trackers-test extra), fails under TFM_CI."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  missing = [m for m in modules if importlib.util.find_spec(m) is None]
  if missing:
    if os.environ.get("TFM_CI"):
      pytest.fail(f"{', '.join(missing)} not installed: .ci/run installs tfm[trackers-test]")
    pytest.skip(f"{', '.join(missing)} not installed (pip install -e '.[trackers-test]')")


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@contextlib.contextmanager
def mlflow_server(directory: str, timeout_s: float = 180.0):
  """Yields the URI of a tracking server running until the block ends."""
  port = free_port()
  mlflow = os.path.join(os.path.dirname(sys.executable), "mlflow")
  log = open(os.path.join(directory, "server.log"), "wb")  # pylint: disable=consider-using-with
  env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
  process = subprocess.Popen(
      [mlflow, "server", "--backend-store-uri", f"sqlite:///{directory}/mlflow.db",
       "--artifacts-destination", os.path.join(directory, "artifacts"), "--host", "127.0.0.1",
       "--port", str(port), "--workers", "1"], stdout=log, stderr=subprocess.STDOUT, env=env,
      start_new_session=True)
  uri = f"http://127.0.0.1:{port}"
  try:
    deadline = time.monotonic() + timeout_s
    while True:
      try:
        with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
          if r.status == 200:
            break
      except OSError:
        pass
      if process.poll() is not None or time.monotonic() > deadline:
        raise RuntimeError(f"mlflow server did not start: {open(log.name).read()[-2000:]}")
      time.sleep(0.5)
    yield uri
  finally:
    with contextlib.suppress(ProcessLookupError):
      os.killpg(process.pid, signal.SIGTERM)  # the server and its worker: its own session
    try:
      process.wait(timeout=20)
    except subprocess.TimeoutExpired:
      os.killpg(process.pid, signal.SIGKILL)
      process.wait()
    log.close()


def wandb_records(path: str):
  """The Record protos of one .wandb file, in order."""
  from wandb.proto import wandb_internal_pb2  # pylint: disable=import-outside-toplevel
  data = open(path, "rb").read()
  assert data[:4] == b":W&B", f"{path}: not a W&B transaction log"
  pos, pieces = 7, b""
  while pos + 7 <= len(data):
    left = BLOCK - pos % BLOCK
    if left < 7:  # a block's tail too short for a header: zeros
      pos += left
      continue
    _, length, kind = struct.unpack_from("<IHB", data, pos)
    if kind == 0:  # the rest of the block is padding
      pos += left
      continue
    payload = data[pos + 7:pos + 7 + length]
    pos += 7 + length
    if kind in (1, 2):
      pieces = payload
    else:
      pieces += payload
    if kind in (1, 4):
      yield wandb_internal_pb2.Record.FromString(pieces)


def wandb_runs(directory: str) -> list[dict]:
  """Each offline run directory's content under `directory`, oldest first: {'id', 'history':
  [(step, {tag: value})], 'config': {key: value}, 'files': [paths], 'tags', 'group', 'name'}."""
  out = []
  for run_dir in sorted(glob.glob(os.path.join(directory, "offline-run-*"))):
    (log,) = glob.glob(os.path.join(run_dir, "run-*.wandb"))
    run = {"id": os.path.basename(log)[4:-6], "history": [], "config": {}, "files": [],
           "tags": [], "dir": run_dir}
    for record in wandb_records(log):
      kind = record.WhichOneof("record_type")
      if kind == "run":
        run.update(name=record.run.display_name, group=record.run.run_group,
                   tags=list(record.run.tags))
        run["config"].update({u.key: json.loads(u.value_json) for u in record.run.config.update})
      elif kind == "config":
        run["config"].update({u.key: json.loads(u.value_json) for u in record.config.update})
      elif kind == "history":
        row = {"/".join(i.nested_key) or i.key: json.loads(i.value_json)
               for i in record.history.item}
        run["history"].append((int(record.history.step.num),
                               {k: v for k, v in row.items() if not k.startswith("_")}))
      elif kind == "files":
        run["files"] += [f.path for f in record.files.files]
    out.append(run)
  return out
