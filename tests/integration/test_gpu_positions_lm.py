"""The GPU call of configs/positions.py's lm form on the CPU (--quick: its 2 cheapest rows x 2
seeds of 12 steps) in the node's clean virtualenv: make_bundle.py builds the bundle of the lm form
(the WEB English side's vocabulary and token cache), table3.py trains, evaluates at every context
length of eval.context_lengths and publishes, and --import_from brings the runs back with a report
whose ppl@N columns are the seeds' mean and sample std of the runs' own figures."""

import json
import statistics
import subprocess
import sys

import pytest

from configs import positions
from tests.integration import node
from tests.integration.conftest import make_bundle

pytestmark = pytest.mark.long  # a bundle, a quick sweep of 4 runs and an import

DRIVER = node.ROOT / "experiments" / "gpu" / "table3.py"
LM = "configs/positions.py:lm"


def _driver(python, *flags):
  return subprocess.run([python, str(DRIVER), *flags], cwd="/", env=node.clean_env(),
                        capture_output=True, text=True, check=False, timeout=900)


@pytest.fixture(scope="module")
def lm_bundle(node_python, tmp_path_factory):
  """make_bundle.py of the lm form's first row on the fake Bible corpus (a 300-piece vocabulary)."""
  return make_bundle(node_python, tmp_path_factory.mktemp("lm_bundle"),
                     f"--config={LM}:{positions.LM_ROWS[0]}")


def test_the_bundle_holds_the_english_sides_vocabulary_and_cache(lm_bundle):
  manifest = json.loads((lm_bundle / "manifest.json").read_text())
  assert manifest["data"]["text_key"] == "en" and manifest["data"]["max_length"] == positions.LM_L
  [vocab] = (lm_bundle / "data" / "vocab").iterdir()
  assert vocab.name == "spm_bible-translate-web-sparv_en_300.model"  # the text_key's, no pair
  [cache] = (lm_bundle / "data" / "tfm_cache").iterdir()
  assert cache.name.startswith("bible-translate-web-sparv_en_")


def test_the_translation_table_refuses_the_lm_bundle(node_python, lm_bundle, tmp_path):
  ran = _driver(node_python, "--config=configs/positions.py", "--quick", f"--bundle={lm_bundle}",
                f"--publish={tmp_path / 'p'}", f"--out={tmp_path / 'out'}", "--pilot_steps=0")
  assert ran.returncode != 0
  assert "its data.text_key is 'en', configs/positions.py's None" in ran.stderr, ran.stderr[-2000:]


def test_quick_lm_table_scores_every_context_length_and_imports(node_python, lm_bundle, tmp_path):
  published, here, out = tmp_path / "published", tmp_path / "here", tmp_path / "out"
  ran = _driver(node_python, f"--config={LM}", "--quick", f"--bundle={lm_bundle}",
                f"--publish={published}", f"--out={out}", f"--root={tmp_path / 'root'}",
                "--pilot_steps=0", "--deadline=14")
  assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
  summary = json.loads((out / "summary.json").read_text())
  assert summary["runs_in_root"] == {"ok": 4} and summary["config"] == LM
  results = {r["name"]: r for r in map(json.loads,
                                        (published / "results.jsonl").read_text().splitlines())}
  assert sorted(results) == sorted(f"{row}-s{s}" for row in ("lm_alibi", "lm_none") for s in (0, 1))
  for r in results.values():
    assert r["status"] == "ok" and r["task"] == "lm" and r["bleu"] is None
    scored = r["context_lengths"]
    assert [x["context_length"] for x in scored] == list(positions.LM_CONTEXTS)
    assert len({x["tokens"] for x in scored}) == 1  # the same pieces at each length, once each
    assert scored[0]["perplexity"] == r["dev_ppl"]  # at data.max_length: the dev figures
  # Back here: the runs and their report, each ppl@N the seeds' mean ± sample std.
  done = _driver(sys.executable, f"--config={LM}", f"--import_from={out}", f"--publish={here}")
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  table = (here / "table.md").read_text().splitlines()
  head = next(line for line in table if line.startswith("| row")).split(" | ")
  for row in ("lm_alibi", "lm_none"):
    cells = next(line for line in table if line.startswith(f"| {row} |")).split(" | ")
    for k, n in enumerate(positions.LM_CONTEXTS):
      values = [results[f"{row}-s{s}"]["context_lengths"][k]["perplexity"] for s in (0, 1)]
      assert cells[head.index(f"ppl@{n}")] == (f"{statistics.mean(values):.2f} ± "
                                               f"{statistics.stdev(values):.2f}")
