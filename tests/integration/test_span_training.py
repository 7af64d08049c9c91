"""Task span through the loop on the fake Bible corpus's English side: a tiny encoder-decoder
trains on span-corrupted rows and is evaluated on the dev spans (perplexity over their target
pieces, no BLEU); in the long tier a stopped run resumes bit-exact and `tfm eval` scores what
training's last evaluation did."""

import json
import math

import numpy as np
import pytest

from tests.integration.conftest import run_train
from tests.integration.test_language_models import _dev, _same
from tfm import cli, tasks
from tfm.data import pipeline, sources, vocabulary

SPAN = ["task=span", "data.text_key=en"]  # the quickstart's encoder-decoder, inputs of 32
CADENCE = ("train.steps=4", "train.log_every=2", "train.eval_every=2", "train.checkpoint_every=2")


def test_a_span_run_trains_and_scores_the_dev_span_targets(experiment_module, tmp_path):
  config = experiment_module(*SPAN, *CADENCE)
  state, log = run_train(config, tmp_path)
  assert int(state.step) == 4 and "bleu" not in log.lower()
  ppl, tokens = _dev(log, "perplexity"), _dev(log, "tokens")
  assert sorted(ppl) == [2, 4] and all(math.isfinite(p) and p > 1 for p in ppl.values())
  assert max(ppl.values()) < config.model.vocab_size  # below a uniform guess's: it learned
  # The dev figures are over the target pieces of the dev spans, sentinels and EOS included:
  # counted here from the pipeline's dev batches (inputs of 32, targets of 8).
  tok = vocabulary.get_tokenizer(config.data, str(tmp_path), task=tasks.get("span"))
  assert tok.sentinels == 2 and tok.vocab_size == config.model.vocab_size
  batches = pipeline.eval_batches(config.data, sources.DataSource.of(config.data), tok, "dev",
                                  task=tasks.get("span"))
  assert batches[0]["inputs"].shape[1] == 32 and batches[0]["targets"].shape[1] == 8
  assert tokens[4] == sum(int(np.count_nonzero(b["targets_segmentation"])) for b in batches)


@pytest.mark.long
def test_a_stopped_span_run_resumes_bit_exact_and_eval_agrees(experiment_module, tmp_path, capsys):
  whole, log = run_train(experiment_module(*SPAN, *CADENCE), tmp_path / "a")
  run_train(experiment_module(*SPAN, *CADENCE[1:], "train.steps=2"), tmp_path / "b")
  resumed, again = run_train(experiment_module(*SPAN, *CADENCE), tmp_path / "b")
  assert "resumed from step 2" in again and _same(whole, resumed)  # the spans' counter restored
  assert _dev(again, "perplexity")[4] == _dev(log, "perplexity")[4]
  assert cli.main(["tfm", "eval", f"--workdir={tmp_path / 'a'}", "--average=1"]) == 0
  result = json.load(open(tmp_path / "a" / "eval_dev_4_avg1.json"))
  assert result["task"] == "span" and "bleu" not in result and "words" not in result
  assert math.isclose(result["perplexity"], _dev(log, "perplexity")[4], rel_tol=1e-4)
  assert result["target_tokens"] == _dev(log, "tokens")[4]
  capsys.readouterr()
