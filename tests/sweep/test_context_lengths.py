"""eval.context_lengths: the key (validated, refused off lm, within a learned table, absent from
older configs and fingerprints), `tfm eval`'s result names, and a sweep's results and report at
each context length (the seeds' mean and sample std checked against `statistics`)."""

import dataclasses
import statistics

import pytest

from configs import positions
from tfm import config as config_lib
from tfm.commands import eval_files
from tfm.config import Config
from tfm.data.config import DataConfig
from tfm.eval.config import EvalConfig
from tfm.model.config import ModelConfig
from tfm.sweep import by_context, hparams, publish, report
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


def _positions_runs():
  """Two seeds each of a reference that breaks past 64, a row that holds to 256, a learned row
  above the reference at 256 beyond the seeds' spread, and one seed of a row that is mixed."""
  figures = {
      "lm_sinusoidal": [{64: 30.0, 128: 45.0, 256: 90.0}, {64: 31.0, 128: 47.0, 256: 80.0}],
      "lm_alibi": [{64: 29.0, 128: 26.0, 256: 25.0}, {64: 30.0, 128: 27.5, 256: 26.0}],
      "lm_learned": [{64: 28.0, 128: 60.0, 256: 150.0}, {64: 29.0, 128: 70.0, 256: 170.0}],
      "lm_rope": [{64: 30.0, 128: 29.0, 256: 33.0}, {64: 31.0, 128: 30.5, 256: 30.0}],
  }
  paper = {"lm_sinusoidal": dict(claim="Vaswani", reference=True),
           "lm_learned": dict(claim="row E", hypothesis="Sinusoids extrapolate better"),
           "lm_alibi": dict(claim="Press"), "lm_rope": {}}
  results = []
  for k, (group, seeds) in enumerate(figures.items()):
    for s, f in enumerate(seeds):
      run = _run(group, s, {n: (p, 3 * p) for n, p in f.items()})
      results.append(dataclasses.replace(run, index=2 * k + s, paper=paper[group]))
  return figures, results


def test_the_report_says_where_each_row_stops_holding_and_answers_the_hypothesis(tmp_path):
  figures, results = _positions_runs()
  t = by_context.table(results[2:] + results[:2])  # the marked reference first, whatever the order
  assert t.contexts == [64, 128, 256] and t.groups[0] == "lm_sinusoidal"
  assert [by_context.reach(t, g) for g in t.groups] == [
      "breaks at 128", "holds to 256", "breaks at 128", "mixed at 256"]
  assert [by_context.verdict(t, g, "lm_sinusoidal") for g in t.groups[1:]] == [
      "lower", "higher", "lower"]
  lines = report.table_markdown(results).splitlines()
  assert "## By context length" in lines
  row = next(line for line in lines if line.startswith("| lm_learned | 2 |")).split(" | ")
  learned = figures["lm_learned"]
  for k, n in enumerate((64, 128, 256)):
    values = [f[n] for f in learned]
    assert row[2 + k] == f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"
  for k, n in enumerate((128, 256)):  # each seed's own change from 64, averaged
    assert row[5 + k] == f"{100 * statistics.mean(f[n] / f[64] - 1 for f in learned):+.1f}%"
  assert row[7] == "breaks at 128 |"
  assert "| lm_alibi | 25.50 ± 0.71 | lower | Press |" in lines
  assert ("**Sinusoids extrapolate better: yes** (perplexity per piece at 256: lm_sinusoidal "
          "85.00 ± 7.07, lm_learned 160.00 ± 14.14).") in lines
  paths = report.write_report(results, str(tmp_path))
  assert (tmp_path / "by_context.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert str(tmp_path / "by_context.png") in paths


def test_one_context_length_or_none_has_no_section():
  _, results = _positions_runs()
  one = [dataclasses.replace(r, context_lengths=r.context_lengths[:1]) for r in results]
  assert by_context.table(one) is None and "By context length" not in report.table_markdown(one)


def test_a_sweep_part_way_or_of_mixed_lengths_reports_without_a_wrong_answer(tmp_path):
  """The report is rewritten after each run: the reference failed (or not scored at every length)
  answers no hypothesis against another row; runs of disjoint length sets leave the section out
  rather than crash the sweep; a diverged seed (NaN) neither holds nor is compared."""
  _, results = _positions_runs()
  failed = [r.ended("failed", "boom") if r.group == "lm_sinusoidal" else r for r in results]
  t = by_context.table(failed)
  assert t.reference == "lm_sinusoidal" and "lm_sinusoidal" not in t.groups
  assert by_context.verdict(t, "lm_learned", t.reference) == ""
  lines = report.table_markdown(failed).splitlines()
  assert "**Sinusoids extrapolate better: not scored (lm_sinusoidal has no run scored at every " \
         "length yet)**" in lines
  assert not any("(reference)" in line for line in lines)
  report.write_report(failed, str(tmp_path / "failed"))
  disjoint = [_run("a", 0, {64: (30.0, 90.0), 128: (40.0, 120.0)}),
              dataclasses.replace(_run("b", 0, {64: (30.0, 90.0), 256: (50.0, 150.0)}), index=1)]
  assert by_context.table(disjoint) is None
  report.write_report(disjoint, str(tmp_path / "disjoint"))  # before: IndexError in markdown
  assert "By context length" not in (tmp_path / "disjoint" / "table.md").read_text()
  nan = float("nan")
  diverged = [dataclasses.replace(r, context_lengths=[dict(e, perplexity=nan)
                                                      for e in r.context_lengths])
              if r.group == "lm_learned" else r for r in results]
  t = by_context.table(diverged)
  assert by_context.past_training(t, "lm_learned", 128) == "breaks"
  assert by_context.verdict(t, "lm_learned", "lm_sinusoidal").startswith("not comparable")
  assert "**Sinusoids extrapolate better: not scored (a non-finite perplexity)**" in \
      report.table_markdown(diverged)
