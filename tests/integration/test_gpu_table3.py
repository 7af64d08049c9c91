"""experiments/gpu/table3.py as on the GPU node, on the CPU (--quick: 2 rows x 2 seeds of 12 steps)
in the node's clean virtualenv (see test_gpu_table.py): a first call trains and publishes every
run, a second call on a fresh root (a fresh machine) takes them all and trains none, and
--import_from brings the first call's files back into a results folder with its report."""

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.integration import node

pytestmark = pytest.mark.long  # outside the README's fast command; CI runs it after

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "experiments" / "gpu" / "table3.py"


def _driver(python, *flags):
  return subprocess.run([python, str(DRIVER), *flags], cwd="/", env=node.clean_env(),
                        capture_output=True, text=True, check=False, timeout=900)


def _results(path: Path) -> dict:
  lines = (path / "results.jsonl").read_text().splitlines()
  return {r["name"]: r for r in map(json.loads, lines)}


@pytest.mark.slow
def test_quick_sweep_publishes_resumes_elsewhere_and_imports(node_python, node_bundle, tmp_path):
  node_published, here = tmp_path / "node_published", tmp_path / "here"
  common = ["--quick", f"--bundle={node_bundle}", f"--publish={node_published}", "--pilot_steps=0",
            "--deadline=14"]
  first = _driver(node_python, *common, f"--out={tmp_path / 'out1'}", f"--root={tmp_path / 'r1'}",
                  "--probe_minutes=3")
  assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
  out = tmp_path / "out1"
  assert sorted(p.name for p in out.iterdir()) == ["logs.tar.gz", "probe.txt", "runs.tar.gz",
                                                   "summary.json", "sweep.txt", "table.md"]
  summary = json.loads((out / "summary.json").read_text())
  # The kernel probe: every candidate trained its steps and was measured; the rule chose one, and
  # every run of the sweep computed under it.
  probe = summary["probe"]
  assert [r["candidate"] for r in probe] == ["a", "b", "c"]
  assert all(r["ok"] and r["process"] == "ok" and sorted(r["loss"]) == ["12", "6"]
             and r["step_s"]["12"] > 0 for r in probe), probe
  chosen = summary["kernels"]
  fastest = min((r for r in probe if r["candidate"] == "a" or r["verdict"] == "kept"),
                key=lambda r: r["step_s"]["12"])
  assert chosen["candidate"] == fastest["candidate"]
  for log in (tmp_path / "r1").glob("C*-s*/config.json"):
    assert json.loads(log.read_text())["model"]["matmul_precision"] == chosen["matmul_precision"]
  assert (summary["published_before"], summary["published_after"]) == (0, 4), summary
  assert summary["runs_in_root"] == {"ok": 4} and summary["sweep"] == 0
  sweep = (out / "sweep.txt").read_text()
  started = [line.split(" on ")[0].removeprefix("[sweep] start ")
             for line in sweep.splitlines() if line.startswith("[sweep] start ")]
  # each row's seeds as one stack; the larger row first (the driver starts the longest first)
  assert started == ["C4-s0, C4-s1", "C1-s0, C1-s1"]
  published = _results(node_published)
  assert sorted(published) == ["C1-s0", "C1-s1", "C4-s0", "C4-s1"]
  for r in published.values():
    assert r["status"] == "ok" and r["trained_steps"] == 12 and r["dev_curve"][-1][0] == 12
    assert r["tokenized_bleu"] is not None and r["tokenized_bleu"] == r["tokenized_bleu"]  # sacremoses carried
  with tarfile.open(out / "logs.tar.gz") as tar:
    assert sorted(tar.getnames()) == sorted(f"{n}/sweep.log" for n in published)

  # A fresh machine: an empty root, the published runs there as the checkout carries them.
  second = _driver(node_python, *common, f"--out={tmp_path / 'out2'}", f"--root={tmp_path / 'r2'}",
                   f"--kernels={chosen['candidate']}")
  assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
  again = (tmp_path / "out2" / "sweep.txt").read_text()
  assert "4 finished runs taken from" in again and "4 finished before, 0 to run" in again, again
  assert "[sweep] start " not in again

  # Back here, in tfm's own environment.
  done = _driver(sys.executable, f"--import_from={out}", f"--publish={here}")
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  imported = _results(here)
  assert {n: r["fingerprint"] for n, r in imported.items()} == {
      n: r["fingerprint"] for n, r in published.items()}
  assert {n: r["dev_ppl"] for n, r in imported.items()} == {
      n: r["dev_ppl"] for n, r in published.items()}
  table = (here / "table.md").read_text()
  assert "C1" in table and "C4" in table
  calls = [json.loads(line) for line in (here / "gpu_calls.jsonl").read_text().splitlines()]
  assert [c["published_after"] for c in calls] == [4]
  assert sorted(p.name for p in (here / "vocab").iterdir()) == sorted(
      p.name for p in (node_published / "vocab").iterdir())


@pytest.mark.slow
def test_quick_sweep_stops_inside_its_deadline_and_resumes_on_the_same_root(node_python, node_bundle,
                                                                            tmp_path):
  """Runs too long for the time box: at the deadline the sweep and the pilot get their SIGTERM,
  the runs save their steps, and the call ends inside its deadline; a second call on the same
  root (the same machine) resumes each stopped run from its saved step."""
  common = ["--quick", f"--bundle={node_bundle}", f"--publish={tmp_path / 'published'}",
            f"--root={tmp_path / 'root'}", "--set=train.steps=100000"]
  first = _driver(node_python, *common, "--deadline=2", "--pilot_steps=12",
                  f"--out={tmp_path / 'out1'}")
  assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-3000:]
  summary = json.loads((tmp_path / "out1" / "summary.json").read_text())
  assert summary["sweep"] == "stopped at the deadline" and summary["seconds"] <= 120, summary
  assert summary["published_after"] == 0 and summary["pilot"] == "ended (exit 0)", summary
  pilot = (tmp_path / "out1" / "pilot.txt").read_text()
  assert "[train] step 12/12" in pilot and "learning_rate=1.0" in pilot
  saved = {}
  for log in (tmp_path / "root").glob("*/sweep.log"):
    text = log.read_text()
    if "SIGTERM: saved step" in text:
      saved[log.parent.name] = int(text.split("SIGTERM: saved step ")[1].split(",")[0])
  assert saved and all(step > 0 for step in saved.values()), saved

  second = _driver(node_python, *common, "--deadline=1.5", "--pilot_steps=0",
                   f"--out={tmp_path / 'out2'}")
  assert second.returncode == 1, second.stdout[-3000:] + second.stderr[-3000:]
  for name, step in saved.items():
    log = (tmp_path / "root" / name / "sweep.log").read_text()
    assert f"tfm: resumed from step {step} " in log, (name, log[-2000:])


@pytest.mark.slow
def test_quick_positions_table_runs_by_length_and_imports(node_python, node_bundle, tmp_path):
  """--config=configs/positions.py: the driver runs that table's two cheapest rows, every run is
  evaluated by source length on the node, and the import here gives the report by length."""
  published, here = tmp_path / "published", tmp_path / "here"
  ran = _driver(node_python, "--config=configs/positions.py", "--quick", f"--bundle={node_bundle}",
                f"--publish={published}", f"--root={tmp_path / 'root'}", "--deadline=10",
                f"--out={tmp_path / 'out'}")
  assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
  summary = json.loads((tmp_path / "out" / "summary.json").read_text())
  assert summary["config"] == "configs/positions.py" and summary["published_after"] == 4
  results = _results(published)
  assert len(results) == 4 and {n.rsplit("-", 1)[0] for n in results} <= {
      "sinusoidal", "learned", "relative", "rope", "alibi", "none"}
  for r in results.values():
    assert [b["bucket"] for b in r["by_length"]] == ["1-32", "33-48", "49-64", "65-128"]
  refused = _driver(node_python, "--config=configs/positions.py", "--quick",
                    f"--bundle={node_bundle}", f"--publish={published}", "--pilot_steps=12",
                    f"--out={tmp_path / 'out2'}")
  assert refused.returncode != 0 and "give --pilot_steps=0" in refused.stderr, refused.stderr[-500:]
  done = _driver(sys.executable, "--config=configs/positions.py",
                 f"--import_from={tmp_path / 'out'}", f"--publish={here}")
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  table = (here / "table.md").read_text()
  assert "## By source length" in table and (here / "by_length.png").exists()
