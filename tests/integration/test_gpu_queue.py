"""experiments/gpu_queue.py as on the GPU machine, on the CPU (--quick) in the node's clean
virtualenv (tests/integration/node.py), with a table of seconds that predicts the runs far too
short: a first call starts a stack its deadline then stops (the runs save their steps, and OUT
carries them), the import here brings that back, twice to no further change, --prepare prints a
next call that fits what may travel, and a second call on a fresh machine resumes the stack from
its saved step and publishes both runs."""

import hashlib
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.gpu import carry
from tests.integration import node
from tests.integration.conftest import command_lines

pytestmark = pytest.mark.long  # two calls of the queue on tiny runs, imports, a prepare

QUEUE = node.ROOT / "experiments" / "gpu_queue.py"
TABLE = node.ROOT / "experiments" / "gpu" / "seconds.json"
STEPS = 600  # the stack's steps: a call of 2 minutes stops it in training on this CPU


def _queue(python, *flags):
  return subprocess.run([python, str(QUEUE), *flags], cwd="/", env=node.clean_env(),
                        capture_output=True, text=True, check=False, timeout=900)


def _snapshot(*paths: Path) -> dict:
  """Every file under `paths` by its path, as its sha256."""
  out = {}
  for path in paths:
    for f in sorted(p for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file()):
      out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
  return out


@pytest.fixture
def setup(tmp_path, node_bundle):
  """The folders of a checkout here (results, carry, the seconds table, platform_choices.py),
  the bundles' folder, and a table of seconds whose predictions are a few seconds a job."""
  bundles = tmp_path / "bundles"
  bundles.mkdir()
  (bundles / "bundle_table3").symlink_to(node_bundle)
  table = json.loads(TABLE.read_text())
  table.update(device="CPU (--quick)", calls=[])
  for key, entry in table["entries"].items():
    if not key.startswith("concurrency"):
      entry["seconds"] = 1e-4 if key.startswith("step_s") else (
          0.01 if key.startswith("dev_eval") else 1.0)
  (tmp_path / "seconds.json").write_text(json.dumps(table))
  shutil.copy(node.ROOT / "tfm" / "train" / "platform_choices.py", tmp_path / "choices.py")
  (tmp_path / "results").mkdir()
  return tmp_path


def _call(python, here: Path, name: str, deadline: float):
  """One call on a fresh machine: the checkout's results and carry as they travel, a new root."""
  machine = here / name
  shutil.copytree(here / "results", machine / "results")
  if (here / "carry").exists():
    shutil.copytree(here / "carry", machine / "carry")
  ran = _queue(python, "--quick", "--jobs=table3_v3", "--rows=C1", "--slots=1",
               f"--set=train.steps={STEPS}", f"--bundles={here / 'bundles'}",
               f"--seconds={here / 'seconds.json'}", f"--results={machine / 'results'}",
               f"--carry_dir={machine / 'carry'}", f"--root={machine / 'root'}",
               f"--out={machine / 'out'}", f"--deadline={deadline}")
  assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
  out = machine / "out"
  files = sorted(p.name for p in out.iterdir())
  assert len(files) <= 8 and all(re.fullmatch(r"[A-Za-z0-9._-]+", f) for f in files), files
  assert all(p.stat().st_size <= 16 * 2**20 for p in out.iterdir())
  return out, json.loads((out / "record.json").read_text()), machine


def _import(here: Path, out: Path):
  done = subprocess.run([sys.executable, str(QUEUE), f"--import_from={out}",
                         f"--results={here / 'results'}", f"--carry_dir={here / 'carry'}",
                         f"--seconds={here / 'seconds.json'}",
                         f"--platform_choices={here / 'choices.py'}"],
                        cwd=node.ROOT, capture_output=True, text=True, check=False, timeout=600)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  return done.stdout


def test_a_call_stopped_at_its_deadline_is_imported_and_the_next_call_finishes_it(node_python,
                                                                                    setup):
  here = setup
  out, record, machine = _call(node_python, here, "machine1", deadline=2.0)
  # The stack was predicted to fit, ran long, and was stopped at the stop time: its runs saved
  # their steps and travel back whole (they are worth more seconds than their bytes cost).
  [job] = record["jobs"]
  assert (job["name"], job["outcome"]) == ("table3_v3:C1-s0,C1-s1", "stopped"), record
  assert job["end"] <= 60 * 2.0 and record["wall_s"] <= 60 * 2.0, record
  assert record["published"] == [] and record["plan"][0]["job"] == job["name"]
  resumed = {r["run"]: r["step"] for r in record["carry"]["resumed"]}
  assert sorted(resumed) == ["table3_v3/C1-s0", "table3_v3/C1-s1"], record["carry"]
  assert len(set(resumed.values())) == 1 and 0 < next(iter(resumed.values())) < STEPS
  log = (machine / "root" / "table3_v3" / "C1-s0" / "sweep.log").read_text()
  assert f"SIGTERM: saved step {next(iter(resumed.values()))}" in log
  # Where its seconds went: the parts add up to the call's seconds.
  assert sum(record["seconds"].values()) == pytest.approx(record["total_s"], rel=0.05), record
  assert record["seconds"]["steps"] > 0 and record["published_share"] == 0.0

  _import(here, out)
  manifest = json.loads((here / "carry" / carry.MANIFEST).read_text())
  assert {f"{r['table']}/{r['name']}": r["step"] for r in manifest["runs"]} == resumed
  seconds = json.loads((here / "seconds.json").read_text())
  assert len(seconds["calls"]) == 1 and seconds["entries"]["process_start"]["n"] == 5
  before = _snapshot(here / "results", here / "carry", here / "seconds.json", here / "choices.py")
  again = _import(here, out)
  assert "not refined" not in again
  assert _snapshot(here / "results", here / "carry", here / "seconds.json",
                   here / "choices.py") == before  # importing twice changes nothing

  # --prepare here: the next call, its carry list (the bundle and the carry) within 64 MiB.
  prepared = _queue(sys.executable, "--prepare", "--quick", "--jobs=table3_v3", "--rows=C1",
                    "--slots=1", f"--set=train.steps={STEPS}", f"--bundles={here / 'bundles'}",
                    f"--seconds={here / 'seconds.json'}", f"--results={here / 'results'}",
                    f"--carry_dir={here / 'carry'}")
  assert prepared.returncode == 0, prepared.stdout[-3000:] + prepared.stderr[-3000:]
  call = re.search(r'^run\(command="python3 experiments/gpu_queue.py --out=\$OUT --slots=1 '
                   rf'--jobs=table3_v3 --rows=C1 --set=train.steps={STEPS} --quick", '
                   r"carry=(\[.*\]), timeout_s=600\)$", prepared.stdout, re.M)
  assert call, prepared.stdout
  assert json.loads(call.group(1)) == sorted([str(here / "bundles" / "bundle_table3"),
                                              str(here / "carry")])
  sizes = re.search(r"travels: the checkout ([\d.]+) MiB .* = ([\d.]+) MiB of 64 MiB",
                    prepared.stdout)
  assert sizes and float(sizes.group(2)) <= 64, prepared.stdout
  assert "table3_v3:C1-s0,C1-s1" in prepared.stdout  # the plan: the carried stack resumes

  out2, record2, machine2 = _call(node_python, here, "machine2", deadline=4.0)
  assert record2["resumed_from_carry"] == resumed, record2
  step = next(iter(resumed.values()))
  for name in ("C1-s0", "C1-s1"):
    log = (machine2 / "root" / "table3_v3" / name / "sweep.log").read_text()
    assert f"tfm: resumed from step {step} " in log
  assert record2["published"] == ["table3_v3/C1-s0", "table3_v3/C1-s1"], record2
  assert record2["published_share"] > 0

  _import(here, out2)
  results = {r["name"]: r for r in map(json.loads, (here / "results" / "table3_v3" /
                                                    "results.jsonl").read_text().splitlines())}
  assert sorted(results) == ["C1-s0", "C1-s1"]
  assert all(r["status"] == "ok" and r["trained_steps"] == STEPS for r in results.values())
  calls = (here / "results" / "table3_v3" / "gpu_calls.jsonl").read_text().splitlines()
  assert [json.loads(c)["published"] for c in calls] == [[], ["table3_v3/C1-s0", "table3_v3/C1-s1"]]
  assert not (here / "carry").exists()  # the second call took the carry and left nothing


def test_a_call_told_to_end_stops_its_jobs_and_returns_what_it_has(node_python, setup):
  """The node's timeout TERMs the command: its jobs are stopped as at the stop time (the runs save
  their steps), nothing of the call runs on, and OUT comes back with the record and the carry; an
  OUT that is not empty is refused (an earlier call's carry parts would join the next's)."""
  here = setup
  machine = here / "machine"
  flags = ["--quick", "--jobs=table3_v3", "--rows=C1", "--slots=1", f"--set=train.steps={STEPS}",
           f"--bundles={here / 'bundles'}", f"--seconds={here / 'seconds.json'}",
           f"--results={here / 'results'}", f"--carry_dir={machine / 'carry'}",
           f"--root={machine / 'root'}", f"--out={machine / 'out'}", "--deadline=4"]
  queue = subprocess.Popen([node_python, str(QUEUE), *flags], cwd="/", env=node.clean_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  log = machine / "root" / "table3_v3" / "C1-s0" / "sweep.log"
  deadline = time.monotonic() + 200
  while not (log.exists() and "[train C1-s0] step" in log.read_text()):
    assert queue.poll() is None and time.monotonic() < deadline, queue.communicate()[0][-3000:]
    time.sleep(1)
  told = time.monotonic()
  queue.send_signal(signal.SIGTERM)
  output = queue.communicate(timeout=120)[0]
  assert queue.returncode == 0, output[-3000:]
  assert time.monotonic() - told < 60, output[-3000:]  # well before its 4-minute deadline
  root = str(machine / "root").encode()
  assert not [argv for _, argv in command_lines() if any(root in a for a in argv)]
  record = json.loads((machine / "out" / "record.json").read_text())
  [job] = record["jobs"]
  assert job["outcome"] == "stopped" and any(n.startswith("SIGTERM at ") for n in record["notes"])
  resumed = {r["run"]: r["step"] for r in record["carry"]["resumed"]}
  assert sorted(resumed) == ["table3_v3/C1-s0", "table3_v3/C1-s1"], record["carry"]
  assert f"SIGTERM: saved step {resumed['table3_v3/C1-s0']}" in log.read_text()
  assert 0 <= record["measured"]["stop"][0] < 60, record["measured"]  # from the TERM, not the stop
  assert sum(record["seconds"].values()) == pytest.approx(record["total_s"], rel=0.05), record
  refused = _queue(node_python, *flags)
  assert refused.returncode != 0 and "not empty" in refused.stderr.splitlines()[-1], refused.stderr
