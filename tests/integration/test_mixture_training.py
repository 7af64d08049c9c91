"""A weighted mixture (data.mixture) through the training loop on the fake Bible corpus: the
per-source counts in the [data] line, a source's own evaluation set, a bit-exact resume."""

import re

import jax
import numpy as np
import pytest

from tests.integration.conftest import run_train

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
