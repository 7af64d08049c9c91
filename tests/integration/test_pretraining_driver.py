"""experiments/pretraining.py, the pretraining experiment's driver: its plan at full size (the
runs, seeds paired, the span run's sentinels kept, the scratch arm's steps from the FLOP ratio),
and in the long tier a pilot on the fake Bible corpus end to end (span runs, fine-tuning from
them, scratch runs, tfm eval, the published table, results and figure)."""

import json

import pytest

from experiments import pretraining
from tests.integration.conftest import tiny_overrides
from tfm import tasks
from tfm.config import load_config
from tfm.train.flops import train_flops


def test_the_full_plan_pairs_the_seeds_and_equalises_model_flops(tmp_path):
  runs, figures = pretraining.plan(str(tmp_path), 2, 1500, 1500, [])
  assert [r.name for r in runs] == ["span-s0", "span-s1", "pretrained-s0", "pretrained-s1",
                                    "scratch-s0", "scratch-s1"]
  span = load_config("configs/span_quickstart.py")
  assert figures["sentinels"] == tasks.get("span").sentinels(span.data) == 7  # above 1993 pieces
  # 32 rows a step in both; a span row's decoder reads 29 targets, a translation row's 128.
  ratio = train_flops(span.model, 128, 29) / train_flops(span.model, 128, 128)
  assert figures["step_ratio"] == pytest.approx(ratio) and 0.4 < ratio < 0.6
  assert figures["scratch_steps"] == 1500 + round(1500 * ratio)
  for seed in (0, 1):
    pretrained = runs[2 + seed].train_argv
    assert f"--init_from={tmp_path}/span-s{seed}" in pretrained
    assert "--config.data.sentinels=7" in pretrained and f"--config.train.seed={seed}" in pretrained
    assert f"--config.train.steps={figures['scratch_steps']}" in runs[4 + seed].train_argv


def test_a_span_only_override_sets_the_span_runs_alone(tmp_path):
  """data.noise_density is the span runs' (a translation run refuses it, tfm/tasks/task.py);
  the fine-tuning runs keep the sentinels it gives."""
  runs, figures = pretraining.plan(str(tmp_path), 1, 1500, 1500, ["data.noise_density=0.3"])
  span = load_config("configs/span_quickstart.py", ["data.noise_density=0.3"])
  assert figures["sentinels"] == tasks.get("span").sentinels(span.data) != 7
  assert "--config.data.noise_density=0.3" in runs[0].train_argv
  assert not any("noise_density" in a for r in runs[1:] for a in r.train_argv)
  assert f"--config.data.sentinels={figures['sentinels']}" in runs[1].train_argv


@pytest.mark.long
def test_a_pilot_of_the_experiment_runs_end_to_end(corpus, tmp_path, capsys):
  overrides = [o for o in tiny_overrides(corpus) if not o.startswith("data.vocab_dir=")]
  out = tmp_path / "published"
  assert pretraining.main([f"--root={tmp_path / 'root'}", f"--publish={out}", "--seeds=1",
                           "--span_steps=4", "--finetune_steps=3",
                           *[f"--override={o}" for o in overrides]]) == 0
  capsys.readouterr()
  lines = [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()]
  assert [(l["run"], l["steps"]) for l in lines] == [("pretrained-s0", 3), ("scratch-s0", 3 + 2)]
  assert all(l["perplexity"] > 1 and l["bleu"] is not None for l in lines)
  assert lines[0]["compute_steps"] == lines[1]["compute_steps"] == 5  # 3 + round(4 x ratio)
  assert "| pretrained | 1 | 3 (5) |" in (out / "table.md").read_text()
  assert (out / "pretraining.png").read_bytes()[:4] == b"\x89PNG"
  init = json.loads((tmp_path / "root" / "pretrained-s0" / "init_from.json").read_text())
  assert init["workdir"] == str(tmp_path / "root" / "span-s0") and init["step"] == 4
