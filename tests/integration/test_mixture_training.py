"""A weighted mixture (data.mixture) through the training loop on the fake Bible corpus: the
per-source counts in the [data] line, a source's own evaluation set, a bit-exact resume, and a
sweep grid over its weights."""

import json
import re

import jax
import numpy as np
import pytest

from tests.integration.conftest import run_train, sweep_overrides
from tfm import cli

MIXTURE = ("data.mixture=({'name': 'web', 'weight': 7}, {'name': 'kjv', 'dataset': "
           "'bible_translate/kjv-sparv', 'weight': 3})")
EVAL_SETS = "data.eval_sets={'dev': 'dev', 'kjv': {'source': 'kjv'}}"


@pytest.mark.long  # three `tfm train` runs of a mixture: CI runs it after the README's command
def test_a_mixture_trains_counts_its_sources_and_resumes_exactly(experiment, tmp_path):
  steps = ["train.eval_every=6", "train.checkpoint_every=3"]
  straight, log = run_train(experiment(MIXTURE, EVAL_SETS, "train.steps=6", *steps),
                            tmp_path / "a")
  data = re.search(r"\[data\] step 6 \|.* examples_kept (\d+) \|.* from_web (\d+) \| "
                   r"from_kjv (\d+)", log)
  assert data, log
  kept, web, kjv = map(int, data.groups())
  assert web + kjv == kept and web > 0 and kjv > 0
  assert "[dev] step 6 | loss" in log and "[kjv] step 6 | loss" in log
  run_train(experiment(MIXTURE, EVAL_SETS, "train.steps=3", *steps), tmp_path / "b")
  resumed, log = run_train(experiment(MIXTURE, EVAL_SETS, "train.steps=6", *steps),
                           tmp_path / "b")
  assert "resumed from step 3" in log and f"from_web {web} | from_kjv {kjv}" in log, log
  assert all(np.array_equal(x, y) for x, y in zip(
      jax.tree.leaves(jax.device_get(straight.params)),
      jax.tree.leaves(jax.device_get(resumed.params))))


@pytest.mark.long  # a sweep of two `tfm train` and two `tfm eval` processes
def test_an_ablation_of_the_weights_is_a_sweep_grid(corpus, tmp_path):
  """`tfm sweep --grid data.mixture_weights=1:1,4:1` runs both weightings; each run's results and
  config.json carry its weights."""
  root = tmp_path / "sweep"
  argv = (["tfm", "sweep", "--config=configs/quickstart.py", f"--root={root}", "--parallel=1",
           "--eval_limit=4", "--grid=data.mixture_weights=1:1,4:1"]
          + [f"--config.{o}" for o in sweep_overrides(corpus, 3, MIXTURE)])
  assert cli.main(argv) == 0
  lines = [json.loads(line) for line in (root / "results.jsonl").read_text().splitlines()]
  assert sorted(r["name"] for r in lines) == ["data.mixture_weights=1_1-s0",
                                              "data.mixture_weights=4_1-s0"]
  for r in lines:
    assert r["status"] == "ok" and r["steps"] == 3
    ratio = r["changes"]["data.mixture_weights"]
    config = json.loads((root / r["name"] / "config.json").read_text())
    assert config["data"]["mixture_weights"] == ratio and ratio in ("1:1", "4:1")
