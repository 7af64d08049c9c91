"""A sweep of lm / mlm runs (config.task): its results read from `tfm eval`'s lm result, its table
without BLEU, its eval command without --limit."""

import statistics

from tfm.sweep import execute, report
from tfm.sweep.result import RunResult


def _lm(group, seed, ppl, words, accuracy, task="lm"):
  run = RunResult(name=f"{group}-s{seed}", group=group, row=None, seed=seed, index=seed,
                  steps=10, status="ok", params=2_500_000, wall_s=30.0, task=task)
  evaluation = dict(split="dev", task=task, checkpoints=[10], averaged=1, perplexity=ppl, nll=1.0,
                    loss=1.1, accuracy=accuracy, target_tokens=100, context_length=64,
                    train_target_tokens=640, **({"word_perplexity": words, "words": 40}
                                                if task == "lm" else {}))
  return run.with_eval(evaluation)


def test_an_lm_result_reads_without_bleu():
  r = _lm("a", 0, 30.0, 90.0, 0.25)
  assert (r.dev_ppl, r.word_ppl, r.dev_accuracy, r.bleu, r.tokenized_bleu) == (
      30.0, 90.0, 0.25, None, None)
  assert (r.trained_steps, r.tokens_seen) == (10, 640)
  assert RunResult.from_json(r.to_json()) == r


def test_the_table_of_language_models_has_no_bleu_and_the_seeds_statistics():
  results = [_lm("a", 0, 30.0, 90.0, 0.25), _lm("a", 1, 34.0, 100.0, 0.35),
             _lm("b", 0, 20.0, 60.0, 0.40)]
  table = report.table_markdown(results)
  assert "BLEU |" not in table.split("\n\n")[0] and "chrF" not in table
  head = next(line for line in table.splitlines() if line.startswith("| row"))
  assert head == ("| row | task | changes | seeds | dev PPL | last fifth | word PPL | accuracy "
                  "| params (M) |")
  row_a = next(line for line in table.splitlines() if line.startswith("| a |"))
  std = statistics.stdev([30.0, 34.0])
  assert f"{32.0:.2f} ± {std:.2f}" in row_a
  assert f"{95.0:.2f} ± {statistics.stdev([90.0, 100.0]):.2f}" in row_a
  assert f"{30.0:.1f} ± {100 * statistics.stdev([0.25, 0.35]):.1f}" in row_a  # percent
  assert "No BLEU" in table


def test_mlm_rows_have_no_word_perplexity():
  table = report.table_markdown([_lm("m", 0, 5.0, None, 0.5, task="mlm")])
  assert "word PPL" not in table and "| m | mlm |" in table


def test_a_language_models_eval_decodes_nothing():
  assert execute.eval_argv("/w", None) == ["eval", "--workdir=/w", "--split=dev"]
  assert execute.eval_argv("/w", 0) == ["eval", "--workdir=/w", "--split=dev", "--limit=0"]
