"""experiments/gpu_table.py as on the GPU node (docs/gpu.md), on the CPU: a clean virtualenv with
only the node's preinstalled packages (experiments/gpu/node-image.txt: no TensorFlow, TFDS,
pysword, sacremoses, tensorboardX, grain or ml_collections), the rest from a bundle that
experiments/gpu/make_bundle.py builds here from the fake Bible corpus.

.ci/run builds that virtualenv as .venv-node, with the carried wheels for its Python in
.venv-node/wheels; outside CI the test is skipped where it is absent.
"""

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration import node

pytestmark = pytest.mark.long  # outside the README's fast command; CI runs it after

ROOT = Path(__file__).resolve().parents[2]
LOOP_STEPS, LOOP_PROFILE = 24, 4  # gpu_table.py's --quick loop job (its flags: not imported)
# The variants job's runs and the choice each asks benchmark_step.py for (None: the platform's).
VARIANTS = {"default": {}, "rbg": {"prng": "rbg"}, "select_guard": {"guard": "select"},
            "layer_norm_autodiff": {"layer_norm_grad": "autodiff"}, "default_again": {}}


def _table(node_python, bundle, out, *flags):
  return subprocess.run([node_python, str(ROOT / "experiments" / "gpu_table.py"), f"--out={out}",
                         f"--bundle={bundle}", *flags], cwd="/", env=node.clean_env(), capture_output=True,
                        text=True, check=False, timeout=600)


def test_without_a_gpu_the_table_stops_at_the_preflight_in_one_line(node_python, node_bundle, tmp_path):
  done = _table(node_python, node_bundle, tmp_path)
  assert done.returncode == 3, done.stdout + done.stderr
  (line,) = done.stdout.splitlines()
  assert line.startswith("[gpu_table] preflight failed (exit 3): preflight: no GPU: "), line
  assert sorted(p.name for p in tmp_path.iterdir()) == ["preflight.txt", "rows.json", "table.md"]


@pytest.mark.slow
def test_quick_table_from_the_bundle_in_the_nodes_python(node_python, node_bundle, tmp_path):
  """Preflight, then the variants (each of the step's choices switched, against the default), the
  stacks (the solo step and stacks of 1 and 2), step_xla forced past its timeout, then the Bible
  run: its row has its figures all the same, and every file the table writes is in OUT, none
  deeper."""
  done = _table(node_python, node_bundle, tmp_path, "--quick",
                "--jobs=step_xla,variants,stacks,bible",
                "--timeouts=step_xla=2", "--deadline=8")
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  files = sorted(p.name for p in tmp_path.iterdir())
  assert files == ["bible.txt", "preflight.txt", "rows.json", "step_cudnn.txt", "step_xla.txt",
                   "table.md"]
  assert all((tmp_path / name).is_file() for name in files)
  table = (tmp_path / "table.md").read_text()
  versions = next(line for line in table.splitlines() if line.startswith("Versions: "))
  assert "ml-collections 1.1.0 (bundle)" in versions and "grain 0.2.18 (bundle)" in versions
  rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()
          if line.startswith("| ") and not line.startswith("| job")}
  assert list(rows) == ["preflight", *(f"variants_base_{name}" for name in VARIANTS),
                        "stacks_table3_v3_base", "step_base_xla", "bible_base"], table
  saved = json.loads((tmp_path / "rows.json").read_text())
  _check_variants(saved, rows)
  stacks = saved["numbers"]["stacks"]
  assert stacks["solo"]["step_ms"] > 0 and list(stacks["stacks"]) == ["1", "2"]
  for k, s in stacks["stacks"].items():
    assert s["runs_per_s"] == pytest.approx(int(k) * 1e3 / s["step_ms"])
    assert s["per_run"] == pytest.approx(s["runs_per_s"] / stacks["solo"]["runs_per_s"])
  assert "model.matmul_precision=tensorfloat32" in (tmp_path / "step_cudnn.txt").read_text()
  assert rows["preflight"].startswith("| preflight | preflight ok in ")
  assert "timed out after 2 s" in rows["step_base_xla"]
  bible = rows["bible_base"]
  assert " steps of " in bible and "dev BLEU " in bible and "none logged" not in bible, bible
  assert "last 5 checkpoints averaged: sacreBLEU " in bible and "perplexity nan" not in bible
  log = (tmp_path / "bible.txt").read_text()
  assert "tensorboardX is not installed" not in log  # carried in the bundle: event files
  assert "building the token cache" not in log  # the bundle's cache, as built by make_bundle.py
  step = (tmp_path / "step_xla.txt").read_text()
  assert step.startswith("$ ") and "benchmark_step.py" in step.splitlines()[0]
  assert "# step_base_xla: timed out, stopped" in step


def _check_variants(saved, rows):
  """rows.json's variants: each run's step time, the choices benchmark_step.py says it compiled
  (the CPU's threefry and branch by default), and its change against the default's step time."""
  numbers = saved["numbers"]["variants"]
  assert list(numbers) == list(VARIANTS)
  default = numbers["default"]["step_ms"]
  for name, asked in VARIANTS.items():
    figures = numbers[name]
    want = {"prng": "threefry", "guard": "branch", "layer_norm_grad": "auto (written)", **asked}
    assert {key: figures[key] for key in want} == want, (name, figures)
    assert figures["step_ms"] > 0 and figures["batch"] == "4 rows x 16 tokens"
    if name == "default":
      assert "change_ms" not in figures and "against" not in rows["variants_base_default"]
      continue
    assert figures["change_ms"] == pytest.approx(figures["step_ms"] - default)
    assert figures["change_percent"] == pytest.approx(100 * figures["change_ms"] / default)
    assert f"{figures['change_ms']:+.2f} ms" in rows[f"variants_base_{name}"]


@pytest.mark.slow
def test_quick_default_run_times_the_loop_against_the_step(node_python, node_bundle, tmp_path):
  """The default jobs (step_cudnn, loop) as --quick on the CPU: the cuDNN rows fail there, the
  loop row has its figures, and rows.json holds them as numbers: the loop's and the step alone's
  time a step over the same timed steps, the difference between them, and the trace's summary."""
  done = _table(node_python, node_bundle, tmp_path, "--quick", "--deadline=6")
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  files = sorted(p.name for p in tmp_path.iterdir())
  assert files == ["bible.txt", "preflight.txt", "rows.json", "step_cudnn.txt", "table.md"]
  saved = json.loads((tmp_path / "rows.json").read_text())
  assert list(saved["rows"]) == ["preflight", "step_cudnn", "loop"]
  (row,) = saved["rows"]["loop"]
  assert row.startswith("| loop_bible_base | 14 steps of the real loop"), row
  loop = saved["numbers"]["loop"]
  steps = LOOP_STEPS - LOOP_PROFILE - 5 - 1  # less the traced steps, the margin, the compiling one
  assert loop["steps_timed"] == steps
  assert loop["added_ms_per_step"] == pytest.approx(loop["loop_step_ms"] - loop["alone_step_ms"])
  assert loop["added_percent"] == pytest.approx(
      100 * loop["added_ms_per_step"] / loop["alone_step_ms"])
  profile = loop["profile"]
  assert profile["trace"] and profile["device_ops"]
  # LOOP_PROFILE steps traced: their dispatches, one interval fewer (the CPU has no device plane).
  assert profile["host_step_interval"]["count"] == LOOP_PROFILE - 1
  assert "top device ops" in (tmp_path / "bible.txt").read_text()
