"""A small sweep written to an MLflow tracking server, read back through MlflowClient beside
TensorBoard's figures (docs/commands.md, "MLflow and Weights & Biases beside TensorBoard").

  python experiments/trackers_readback.py --root /tmp/trackers_sweep [--uri http://HOST:PORT] \
      [--json FILE] -- [tfm sweep flags ...]

Without --uri it starts `mlflow server` on 127.0.0.1 (a free port, an SQLite store and the
artifacts in ROOT/mlflow) for the sweep's time. It runs `tfm sweep --root=ROOT ...` (the flags
after `--`) with train.trackers=tensorboard,mlflow and the server's URI, then reads the sweep's
experiment (named after ROOT) back: each run's tags (row, seed), params, metric histories and
artifacts, against its TensorBoard events (tfm/train/trackers/events.py): every tag at the same steps with
the same values (TensorBoard stores float32: compared to 1e-6 relative), and the final figures
against the HParams records' `sweep/*`. Prints one table, and writes it as JSON with --json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tfm.train.trackers.events import read_scalars  # pylint: disable=wrong-import-position


@contextlib.contextmanager
def local_server(directory: str):
  """`mlflow server` on 127.0.0.1 until the block ends; yields its URI."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  os.makedirs(directory, exist_ok=True)
  log = open(os.path.join(directory, "server.log"), "wb")  # pylint: disable=consider-using-with
  process = subprocess.Popen(
      [os.path.join(os.path.dirname(sys.executable), "mlflow"), "server", "--backend-store-uri",
       f"sqlite:///{os.path.abspath(directory)}/mlflow.db", "--artifacts-destination",
       os.path.join(os.path.abspath(directory), "artifacts"), "--host", "127.0.0.1", "--port",
       str(port), "--workers", "1"], stdout=log, stderr=subprocess.STDOUT,
      env=dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"), start_new_session=True)
  uri = f"http://127.0.0.1:{port}"
  try:
    for _ in range(360):
      with contextlib.suppress(OSError):
        with urllib.request.urlopen(f"{uri}/health", timeout=2):
          break
      if process.poll() is not None:
        raise RuntimeError(f"mlflow server exited; see {log.name}")
      time.sleep(0.5)
    yield uri
  finally:
    with contextlib.suppress(ProcessLookupError):
      os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=30)
    log.close()


def read_back(uri: str, root: str) -> list[dict]:
  """Each run of ROOT's experiment: MLflow's figures against TensorBoard's."""
  from mlflow.tracking import MlflowClient  # pylint: disable=import-outside-toplevel
  client = MlflowClient(uri)
  experiment = client.get_experiment_by_name(os.path.basename(os.path.normpath(root)))
  rows = []
  for run in sorted(client.search_runs([experiment.experiment_id]),
                    key=lambda r: r.info.run_name):
    name, run_id = run.info.run_name, run.info.run_id
    tensorboard = read_scalars(os.path.join(root, name, "tensorboard"))
    histories = {k: sorted((m.step, m.value) for m in client.get_metric_history(run_id, k))
                 for k in run.data.metrics}
    points = sum(len(v) for v in tensorboard.values())
    same_steps = sorted(histories) == sorted(tensorboard) and all(
        [s for s, _ in histories[t]] == [s for s, _ in tensorboard[t]] for t in tensorboard)
    worst = max((abs(a - b) / max(abs(b), 1e-12) for t in tensorboard if t in histories
                 for (_, a), (_, b) in zip(histories[t], tensorboard[t])), default=0.0)
    final = lambda h, tag: h[tag][-1][1] if tag in h else None
    rows.append(dict(
        run=name, row=run.data.tags.get("row"), seed=run.data.tags.get("seed"),
        group=run.data.tags.get("group"), experiment=experiment.name, status=run.info.status,
        params=len(run.data.params), tags=len(tensorboard), points=points,
        same_tags_and_steps=same_steps, max_relative_difference=worst,
        last_step=max(s for v in histories.values() for s, _ in v),
        train_loss=(final(histories, "train/loss"), final(tensorboard, "train/loss")),
        dev_ppl=(final(histories, "dev/perplexity"), final(tensorboard, "dev/perplexity")),
        sweep_dev_ppl=(final(histories, "sweep/dev_ppl"), final(tensorboard, "sweep/dev_ppl")),
        sweep_bleu=(final(histories, "sweep/bleu"), final(tensorboard, "sweep/bleu")),
        artifacts=sorted(f.path for f in client.list_artifacts(run_id))
        + sorted(f.path for f in client.list_artifacts(run_id, "eval"))))
  return rows


def table(rows: list[dict]) -> str:
  head = ("run", "row", "seed", "params", "tags", "points", "same steps", "max rel. diff",
          "train/loss MLflow / TB", "dev/perplexity MLflow / TB", "sweep/dev_ppl MLflow / TB",
          "sweep/bleu MLflow / TB", "artifacts")
  pair = lambda p: "-" if p[0] is None else f"{p[0]:.4f} / {p[1]:.4f}"
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    lines.append("| " + " | ".join([
        r["run"], r["row"] or "", r["seed"] or "", str(r["params"]), str(r["tags"]),
        str(r["points"]), "yes" if r["same_tags_and_steps"] else "NO",
        f"{r['max_relative_difference']:.1e}", pair(r["train_loss"]), pair(r["dev_ppl"]),
        pair(r["sweep_dev_ppl"]), pair(r["sweep_bleu"]),
        ", ".join(a for a in r["artifacts"] if a != "eval")]) + " |")
  return "\n".join(lines)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--root", required=True)
  parser.add_argument("--uri", help="a tracking server that runs already (default: start one)")
  parser.add_argument("--json")
  parser.add_argument("sweep", nargs="*", help="tfm sweep's flags (after --)")
  args = parser.parse_args(argv)
  with contextlib.ExitStack() as stack:
    uri = args.uri or stack.enter_context(local_server(os.path.join(args.root + "_mlflow")))
    command = [sys.executable, "-m", "tfm.cli", "sweep", f"--root={args.root}", *args.sweep,
               "--config.train.trackers=tensorboard,mlflow",
               f"--config.train.mlflow_tracking_uri={uri}"]
    print("$ " + " ".join(command), flush=True)
    started = time.monotonic()
    subprocess.run(command, check=True)
    print(f"tfm sweep: {time.monotonic() - started:.0f} s", flush=True)
    rows = read_back(uri, args.root)
  print(table(rows))
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump(rows, f, indent=1)
      f.write("\n")
  return 0 if all(r["same_tags_and_steps"] and r["max_relative_difference"] < 1e-6
                  for r in rows) else 1


if __name__ == "__main__":
  sys.exit(main())
