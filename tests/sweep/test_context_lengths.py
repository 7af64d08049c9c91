"""eval.context_lengths: the key (validated, refused off lm, within a learned table, absent from
older configs and fingerprints), `tfm eval`'s result names, and a sweep's results and report at
each context length (the seeds' mean and sample std checked against `statistics`)."""

import statistics

import pytest

from configs import positions
from tfm import config as config_lib
from tfm.commands import eval_files
from tfm.config import Config
from tfm.data.config import DataConfig
from tfm.eval.config import EvalConfig
from tfm.model.config import ModelConfig
from tfm.sweep import hparams, publish, report
from tfm.sweep.result import RunResult

LM = dict(model=ModelConfig(architecture="decoder_only", num_encoder_layers=0),
          data=DataConfig(text_key="en"), task="lm")


def test_the_default_is_none_and_an_older_config_keeps_its_fingerprint(monkeypatch):
  assert EvalConfig().context_lengths == () == config_lib.ADDED_LATER["eval.context_lengths"]
  config = Config(**LM)
  older = config.to_dict()
  del older["eval"]["context_lengths"]  # config.json as tfm wrote it before the key
  assert config_lib.build(older) == config
  now = publish.fingerprint(config, "v", 0)
  to_dict = Config.to_dict  # the same run's fingerprint before the key existed
  monkeypatch.setattr(Config, "to_dict", lambda self: {
      **to_dict(self), "eval": {k: v for k, v in to_dict(self)["eval"].items()
                                if k != "context_lengths"}})
  assert publish.fingerprint(config, "v", 0) == now
  monkeypatch.undo()
  other = Config(**LM, eval=EvalConfig(context_lengths=(64, 128)))
  assert publish.fingerprint(other, "v", 0) != now  # a set value is part of the run


@pytest.mark.parametrize("value", [(0,), (64, -1), (64, 64), ("64",), (64.0,), "64,128"])
def test_bad_lengths_are_refused_in_one_line(value):
  with pytest.raises(ValueError, match=r"^config key eval.context_lengths: expected a tuple of "
                                       r"distinct positive integers"):
    config_lib.build({**Config(**LM).to_dict(), "eval": {"context_lengths": value}})


def test_a_json_list_or_one_int_reads_as_a_tuple():
  built = config_lib.build({**Config(**LM).to_dict(), "eval": {"context_lengths": [64, 256]}})
  assert built.eval.context_lengths == (64, 256)
  assert config_lib.build({**Config(**LM).to_dict(),
                           "eval": {"context_lengths": 128}}).eval.context_lengths == (128,)


def test_other_tasks_and_short_learned_tables_refuse_them():
  with pytest.raises(ValueError, match=r"^config keys task='translate' and "
                                       r"eval.context_lengths=\(64,\): context lengths score a "
                                       r"language model"):
    Config(eval=EvalConfig(context_lengths=(64,)))
  mlm = dict(model=ModelConfig(architecture="encoder_only", num_decoder_layers=0),
             data=DataConfig(text_key="en"), task="mlm")
  with pytest.raises(ValueError, match=r"^config keys task='mlm' and eval.context_lengths"):
    Config(**mlm, eval=EvalConfig(context_lengths=(64,)))
  learned = dict(LM, model=ModelConfig(architecture="decoder_only", num_encoder_layers=0,
                                       positions="learned", max_length=128),
                 data=DataConfig(text_key="en", max_length=64))
  with pytest.raises(ValueError, match=r"^config keys eval.context_lengths=\(64, 256\) and "
                                       r"model.max_length=128: learned positions"):
    Config(**learned, eval=EvalConfig(context_lengths=(64, 256), max_extra_length=0))
  assert Config(**learned, eval=EvalConfig(context_lengths=(64, 128), max_extra_length=0)
                ).eval.context_lengths == (64, 128)


def test_the_positions_lm_form_scores_l_2l_and_4l():
  for row in (None,) + positions.LM_ROWS:
    c = positions.lm_config(row)
    assert c.eval.context_lengths == (64, 128, 256) and c.data.max_length == 64


def test_result_names_record_the_context_lengths():
  name = eval_files.result_name("dev", [90, 100], 0, contexts=(64, 128, 256))
  assert name == "eval_dev_100_avg2_ctx64-128-256.json"
  assert eval_files.RESULT.fullmatch(name)["step"] == "100"
  assert eval_files.contexts_named(name) == (64, 128, 256)
  assert eval_files.contexts_named("eval_dev_100_avg2.json") == ()
  ema = eval_files.result_name("dev", [100], 0, ema=True, contexts=(32,))
  assert ema == "eval_dev_ema100_ctx32.json" and eval_files.contexts_named(ema) == (32,)


def _run(group, seed, figures):
  """An lm run of `group` whose tfm eval scored {length: (ppl, word ppl)}."""
  run = RunResult(name=f"{group}-s{seed}", group=group, row=group, seed=seed, index=seed,
                  steps=10, status="ok", params=850_816, wall_s=5.0, task="lm")
  first = figures[min(figures)]
  evaluation = dict(
      split="dev", task="lm", checkpoints=[10], averaged=1, perplexity=first[0], nll=1.0, loss=1.0,
      accuracy=0.3, target_tokens=100, word_perplexity=first[1], words=30, context_length=64,
      train_target_tokens=640,
      context_lengths=[dict(context_length=n, perplexity=p, nll=1.0, word_perplexity=w,
                            accuracy=0.3, tokens=100) for n, (p, w) in sorted(figures.items())])
  return run.with_eval(evaluation)


def test_the_report_shows_each_lengths_perplexity_over_the_seeds():
  a = [{64: (30.0, 90.0), 128: (41.5, 120.0), 256: (55.25, 170.0)},
       {64: (32.0, 95.0), 128: (44.0, 130.0), 256: (61.0, 190.0)},
       {64: (31.0, 92.0), 128: (40.0, 118.0), 256: (58.5, 180.0)}]
  b = [{64: (28.0, 80.0), 128: (29.0, 82.0), 256: (29.5, 83.0)}]
  results = [_run("lm_alibi", s, f) for s, f in enumerate(a)] + [_run("lm_none", 0, b[0])]
  back = RunResult.from_json(results[0].to_json())
  assert back == results[0] and back.context_lengths[2]["perplexity"] == 55.25
  figures = hparams.metrics(results[0])  # the run's trackers and HParams records
  assert [figures[f"sweep/ppl_ctx{n}"] for n in (64, 128, 256)] == [30.0, 41.5, 55.25]
  table = report.table_markdown(results)
  lines = table.splitlines()
  head = next(line for line in lines if line.startswith("| row"))
  assert head == ("| row | task | changes | seeds | dev PPL | last fifth | word PPL | ppl@64 "
                  "| ppl@128 | ppl@256 | accuracy | params (M) |")
  cells = next(line for line in lines if line.startswith("| lm_alibi |")).split(" | ")
  column = {name: k for k, name in enumerate(head.split(" | "))}
  for n in (64, 128, 256):
    values = [f[n][0] for f in a]
    assert cells[column[f"ppl@{n}"]] == (f"{statistics.mean(values):.2f} ± "
                                        f"{statistics.stdev(values):.2f}")
  alone = next(line for line in lines if line.startswith("| lm_none |")).split(" | ")
  assert [alone[column[f"ppl@{n}"]] for n in (64, 128, 256)] == ["28.00", "29.00", "29.50"]
  assert "ppl@N is the perplexity per piece" in table


def test_runs_without_context_lengths_keep_the_table_as_it_was():
  run = RunResult(name="a-s0", group="a", row=None, seed=0, index=0, steps=10, status="ok",
                  task="lm").with_eval(dict(split="dev", task="lm", checkpoints=[10], averaged=1,
                                            perplexity=30.0, nll=1.0, loss=1.0, accuracy=0.3,
                                            target_tokens=10, word_perplexity=90.0, words=3))
  assert run.context_lengths is None and "ppl@" not in report.table_markdown([run])
