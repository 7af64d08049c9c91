"""Tasks lm and mlm through the loop on the fake Bible corpus's English side (data.text_key='en'):
a stopped run resumes bit-exact, a stack's members are their solo runs, and `tfm eval` scores an
lm run per piece and per word, at several context lengths.

Long tier: each case trains tiny runs end to end (~5 s each on 2 cores), past the fast tier's
budget."""

import glob
import io
import json
import math
import re

import numpy as np
import pytest

from tests.integration.conftest import run_train
from tests.train import helpers
from tfm import cli, loop
from tfm.train import checkpoint as ckpt_lib

pytestmark = pytest.mark.long

TASKS = {"lm": ["task=lm", "model.architecture=decoder_only", "model.num_encoder_layers=0",
                "data.text_key=en"],
         "mlm": ["task=mlm", "model.architecture=encoder_only", "model.num_decoder_layers=0",
                 "data.text_key=en"]}
CADENCE = ("train.steps=6", "train.log_every=3", "train.eval_every=3", "train.checkpoint_every=3")


def _config(experiment, task, *extra):
  return experiment(*TASKS[task], *CADENCE, *extra)


def _same(a, b) -> bool:
  return helpers.max_diff(a, b) == 0.0


def _dev(log: str, name: str) -> dict[int, float]:
  return {int(m[1]): float(m[2]) for m in re.finditer(
      r"\[dev\S*\] step (\d+) .*?\| " + name + r" ([-\d.e+]+)", log)}


@pytest.mark.parametrize("task", ["lm", "mlm"])
def test_a_stopped_run_resumes_bit_exact(experiment_module, tmp_path, capsys, task):
  whole, log = run_train(_config(experiment_module, task), tmp_path / "a")
  run_train(_config(experiment_module, task, "train.steps=3"), tmp_path / "b")
  resumed, again = run_train(_config(experiment_module, task), tmp_path / "b")
  assert "resumed from step 3" in again and int(resumed.step) == 6
  assert _same(whole, resumed)  # the stream's cursor, offset and (mlm) mask counter restored
  assert ckpt_lib.available_steps(tmp_path / "b") == [3, 6]
  assert _dev(again, "perplexity")[6] == _dev(log, "perplexity")[6]
  if task == "lm":  # per-word perplexity: exp(NLL sum / words), the sum being nll x tokens
    tokens, words = _dev(log, "tokens")[6], _dev(log, "words")[6]
    assert words > 0 and tokens > words  # every piece and each text's EOS, against its words
    assert math.isclose(_dev(log, "word_perplexity")[6],
                        math.exp(_dev(log, "nll")[6] * tokens / words), rel_tol=1e-3)
  else:
    assert not _dev(log, "word_perplexity")
  assert "bleu" not in log.lower()
  # tfm eval scores the last checkpoints as training's last evaluation did (the same dev rows;
  # mlm: masked with the same fixed seed), with averaging off.
  assert cli.main(["tfm", "eval", f"--workdir={tmp_path / 'a'}", "--average=1"]) == 0
  result = json.load(open(tmp_path / "a" / "eval_dev_6_avg1.json"))
  assert result["task"] == task and "bleu" not in result and "sentences" not in result
  assert math.isclose(result["perplexity"], _dev(log, "perplexity")[6], rel_tol=1e-4)
  assert result["target_tokens"] == _dev(log, "tokens")[6]
  assert ("words" in result) == (task == "lm")
  capsys.readouterr()


def test_stacked_lm_members_are_their_solo_runs(experiment_module, tmp_path):
  # Learning rate 0.5 (peak 0.06): at the tiny runs' 4.0 this lm's loss climbs after step 3, and
  # that unstable regime blows the vmapped step's float rounding up to 1e-2 in 6 steps.
  member = lambda s: _config(experiment_module, "lm", f"train.seed={s}", f"data.shuffle_seed={s}",
                             "model.dropout_rate=0.2", "train.learning_rate=0.5")
  solo = [run_train(member(s), tmp_path / f"solo-s{s}") for s in (0, 1)]
  out = io.StringIO()
  states = loop.train_stack([member(s) for s in (0, 1)],
                            [str(tmp_path / f"run-s{s}") for s in (0, 1)], stream=out)
  assert "tfm: a stack of 2 runs" in out.getvalue()
  for (solo_state, solo_log), state, s in zip(solo, states, (0, 1)):
    assert helpers.max_diff(state.params, solo_state.params, key_biases=False) < 1e-5
    got = {int(m[1]): float(m[2]) for m in re.finditer(
        rf"\[dev run-s{s}\] step (\d+) .*?\| word_perplexity ([-\d.e+]+)", out.getvalue())}
    want = _dev(solo_log, "word_perplexity")
    assert sorted(got) == sorted(want) == [3, 6]
    np.testing.assert_allclose([got[k] for k in (3, 6)], [want[k] for k in (3, 6)], rtol=1e-4)
  assert helpers.max_diff(states[0].params, states[1].params) > 1e-3


def test_eval_scores_an_lm_at_each_context_length(experiment_module, tmp_path, capsys):
  run_train(_config(experiment_module, "lm"), tmp_path)
  assert cli.main(["tfm", "eval", f"--workdir={tmp_path}", "--context_lengths=8,32,64"]) == 0
  (path,) = glob.glob(f"{tmp_path}/eval_dev_6_avg2_ctx8-32-64.json")
  result = json.load(open(path))
  assert result["task"] == "lm" and "bleu" not in result and result["context_length"] == 32
  assert math.isclose(result["word_perplexity"],
                      math.exp(result["nll"] * result["target_tokens"] / result["words"]),
                      rel_tol=1e-5)
  by_length = {e["context_length"]: e for e in result["context_lengths"]}
  assert sorted(by_length) == [8, 32, 64]
  for entry in by_length.values():  # the same pieces at every length, each scored once
    assert entry["tokens"] == result["target_tokens"]
  assert by_length[32]["perplexity"] == result["perplexity"]  # the run's own rows
  # Rows of 8 give most pieces less context than rows of 32: a trained model's NLL is higher.
  assert by_length[8]["nll"] != by_length[32]["nll"]
  assert "context 64" in capsys.readouterr().out
  # The decoding flags, and a --context_lengths of no rows: one line each, exit 2 (a lone 0 is
  # none: the run's eval.context_lengths overridden).
  assert cli.main(["tfm", "eval", f"--workdir={tmp_path}", "--beam_size=2"]) == 2
  assert "--beam_size: decoding and BLEU flags; the run in" in capsys.readouterr().err
  assert cli.main(["tfm", "eval", f"--workdir={tmp_path}", "--context_lengths=0,8"]) == 2
  assert "--context_lengths: expected positive integers" in capsys.readouterr().err


def test_an_mlm_run_with_its_batches_in_a_process_resumes_bit_exact(experiment_module, tmp_path):
  """train.input=process: the masking counter travels with the batch process's state."""
  whole, _ = run_train(_config(experiment_module, "mlm", "train.input=process"), tmp_path / "a")
  run_train(_config(experiment_module, "mlm", "train.input=process", "train.steps=3"),
            tmp_path / "b")
  resumed, log = run_train(_config(experiment_module, "mlm", "train.input=process"),
                           tmp_path / "b")
  assert "resumed from step 3" in log and _same(whole, resumed)


def test_a_sweep_of_lm_and_mlm_runs_reports_perplexities_without_bleu(corpus, tmp_path, capsys):
  from tests.integration.conftest import sweep_overrides  # pylint: disable=import-outside-toplevel
  for task in ("lm", "mlm"):
    root = tmp_path / task
    argv = (["tfm", "sweep", "--config=configs/quickstart.py", f"--root={root}",
             "--grid=model.num_heads=1,2"]
            + [f"--config.{o}" for o in sweep_overrides(corpus, 3, *TASKS[task])])
    code = cli.main(argv)
    assert code == 0, capsys.readouterr().err[-2000:]
    lines = [json.loads(line) for line in (root / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and all(r["status"] == "ok" and r["task"] == task for r in lines)
    for r in lines:
      assert r["dev_ppl"] > 1 and r["bleu"] is None and 0 <= r["dev_accuracy"] <= 1
      assert (r["word_ppl"] > r["dev_ppl"]) if task == "lm" else r["word_ppl"] is None
      evaluation = json.loads(next(root.glob(f"{r['name']}/eval_dev_3_avg1.json")).read_text())
      assert evaluation["perplexity"] == r["dev_ppl"] and "sentences" not in evaluation
    table = (root / "table.md").read_text()
    assert "BLEU |" not in table and f"| {task} |" in table
    assert ("word PPL" in table) == (task == "lm")


def test_an_eval_set_with_no_text_stops_training_with_nothing_written(experiment_module,
                                                                      tmp_path):
  """A dev file whose lines are all blank or not UTF-8: one ValueError naming the set, before a
  checkpoint directory or config.json exists (the eval batches are built first)."""
  (tmp_path / "train.en").write_text("".join(f"line {i} of some text here\n" for i in range(200)))
  (tmp_path / "dev.en").write_bytes(b"\n\n\xff\n")
  config = _config(experiment_module, "lm", "data.dataset=text",
                   f"data.train_files={tmp_path}/train.{{lang}}",
                   f"data.dev_files={tmp_path}/dev.{{lang}}", "data.eval_max_examples=3")
  with pytest.raises(ValueError, match="evaluation set 'dev': its 3 examples hold no text"):
    run_train(config, tmp_path / "run")
  assert not (tmp_path / "run" / "checkpoints").exists()
  assert not (tmp_path / "run" / "config.json").exists()
