"""Decoding chosen on a trained model (tfm eval's grid, tfm translate's n-best and --score), chrF and
TER beside BLEU, and the best checkpoint by dev perplexity, on a briefly trained tiny model."""

import glob
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sacrebleu

from tests.integration.conftest import run_train
from tfm import cli
from tfm.data import pipeline
from tfm.decode.beam import length_penalty
from tfm.decode.translate import uncached_step
from tfm.eval.restore import load_trained, read_workdir_config
from tfm.experiment import Experiment
from tfm.train.checkpoint import best as best_lib
from tfm.train import checkpoint as ckpt_lib
from tfm.train.trackers import events


@pytest.fixture(scope="module")
def trained(experiment_module, tmp_path_factory):
  """6 steps, dev perplexity every 2 and the best checkpoint by it; beam 2, alpha 0.6, +5. The
  last checkpoint alone is evaluated (averaging is tests/integration/test_eval_commands.py's):
  each command here restores one checkpoint, not two."""
  workdir = tmp_path_factory.mktemp("trained")
  run_train(experiment_module("train.steps=6", "eval.beam_size=2", "eval.max_extra_length=5",
                              "eval.batch_size=4", "train.eval_every=2",
                              "train.best_metric=dev_ppl", "train.average_checkpoints=1"),
            workdir)
  return str(workdir)


# What a plain `tfm eval --limit=4` of `trained` writes: 4 dev sources, one batch (eval.batch_size),
# so each search compiles for one input shape.
NAME = "eval_dev_6_avg1_first4"


def _eval(workdir, *flags):
  assert cli.main(["tfm", "eval", f"--workdir={workdir}", "--limit=4", *flags]) == 0


def _read(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


@pytest.fixture(scope="module")
def plain(trained, tmp_path_factory):
  """The result of a plain `tfm eval --limit=4` of `trained`, saved apart (--out)."""
  path = tmp_path_factory.mktemp("plain") / "eval.json"
  _eval(trained, "--out", str(path))
  return _read(path)


def test_the_grid_holds_plain_evals_figures_at_the_runs_own_point(trained, plain, capsys):
  """A grid over beam {1, 2} x alpha {0, 0.6}: the point of the run's own settings (2, 0.6) is
  written where a plain `tfm eval` writes, with the same figures; every other point has its own
  file naming its settings; a plain `tfm eval --beam_size=1 --length_penalty=1`, a search of
  its own, gives the grid's greedy figures (greedy reads no alpha)."""
  assert not os.path.exists(f"{trained}/{NAME}.json")
  capsys.readouterr()
  _eval(trained, "--beam_size=1,2", "--length_penalty=0,0.6,1")
  out = capsys.readouterr().out
  names = sorted(os.path.basename(p) for p in glob.glob(f"{trained}/{NAME}*.json"))
  assert names == [f"{NAME}.json", f"{NAME}_beam1_lp0.6_extra5.json",
                   f"{NAME}_beam1_lp0_extra5.json", f"{NAME}_beam1_lp1_extra5.json",
                   f"{NAME}_beam2_lp0_extra5.json", f"{NAME}_beam2_lp1_extra5.json"]
  # Beam 2 at alphas 0 and 1: one compiled search, alpha its argument; the second compiles nothing.
  traced = [_read(f"{trained}/{NAME}_beam2_lp{a}_extra5.json") for a in ("0", "1")]
  assert traced[0]["decode_compile_s"] > 0 and traced[1]["decode_compile_s"] < 0.01
  own = _read(f"{trained}/{NAME}.json")
  for key in ("bleu", "tokenized_bleu", "chrf", "ter", "perplexity", "checkpoints", "sentences"):
    assert own[key] == plain[key], key
  assert (own["beam_size"], own["length_penalty"], own["max_extra_length"]) == (2, 0.6, 5)
  greedy = [_read(f"{trained}/{NAME}_beam1_lp{a}_extra5.json") for a in ("0", "0.6")]
  assert [(g["beam_size"], g["length_penalty"]) for g in greedy] == [(1, 0.0), (1, 0.6)]
  assert greedy[0]["bleu"] == greedy[1]["bleu"] and greedy[0]["chrf"] == greedy[1]["chrf"]
  lines = out.splitlines()
  header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["beam", "alpha", "extra"])
  rows = [line.split() for line in lines[header + 1:header + 7]]
  assert [r[:3] for r in rows] == [["1", "0", "5"], ["1", "0.6", "5"], ["1", "1", "5"],
                                   ["2", "0", "5"], ["2", "0.6", "5"], ["2", "1", "5"]]
  assert rows[4][-1] == "*" and float(rows[4][3]) == pytest.approx(plain["bleu"], abs=0.005)
  assert float(rows[5][3]) == pytest.approx(traced[1]["bleu"], abs=0.005)
  # Greedy alone at alpha 1, decoded by a search of its own (the grid searched greedy once for
  # every alpha): the grid's greedy figures.
  os.rename(f"{trained}/{NAME}_beam1_lp1_extra5.json", f"{trained}/greedy.json")
  _eval(trained, "--beam_size=1", "--length_penalty=1")
  single = _read(f"{trained}/{NAME}_beam1_lp1_extra5.json")
  assert single["decode_compile_s"] > 0  # searched anew, not read from the grid's search
  for key in ("bleu", "chrf", "ter", "tokenized_bleu"):
    assert single[key] == greedy[0][key], key


def test_chrf_and_ter_are_sacrebleus_on_the_translations(trained, plain, tmp_path, capsys):
  """The eval's chrF and TER are sacrebleu.corpus_chrf / corpus_ter of what `tfm translate` gives
  for the same dev sources, against their references."""
  result = plain
  config = read_workdir_config(trained)  # the dev pairs; no parameters needed here
  pairs = pipeline.eval_text_pairs(config.data, Experiment(config).data_source, "dev")[:4]
  (tmp_path / "in.txt").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
  capsys.readouterr()
  assert cli.main(["tfm", "translate", f"--workdir={trained}", f"--input={tmp_path / 'in.txt'}"]) == 0
  hyps = capsys.readouterr().out.splitlines()
  refs = [[r for _, r in pairs]]
  assert len(hyps) == 4
  assert result["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, refs).score, abs=1e-9)
  assert result["ter"] == pytest.approx(sacrebleu.corpus_ter(hyps, refs).score, abs=1e-9)
  assert result["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, refs).score, abs=1e-9)
  assert result["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0")
  assert "tok:tercom" in result["ter_signature"]


def _teacher_forced_logp(t, inputs, targets):
  """log P(target | input) token by token through uncached_step (the decoder rerun over the whole
  prefix at each step), independent of the score function's single pass."""
  make_state, step = uncached_step(t.model, t.params)
  # Jitted: the encoder one program a source length (not op by op), and each step with its
  # log-softmax one program for every step (the prefix is as long as the longest target).
  make_state = jax.jit(make_state, static_argnums=1)

  @jax.jit
  def logp_step(ids, state):
    logits, state = step(ids, state)
    return jax.nn.log_softmax(logits[0].astype(jnp.float32)), state

  longest = max(len(target) for target in targets) + 1
  out = []
  for source, target in zip(inputs, targets):
    state = make_state(jnp.asarray(source[None]), longest)
    ids, total = 0, 0.0
    for token in target:
      logp, state = logp_step(jnp.array([[ids]], jnp.int32), state)
      total += float(np.asarray(logp)[token])
      ids = int(token)
    out.append(total)
  return np.array(out)


def test_n_best_scores_are_teacher_forced_log_probs_over_the_length_penalty(trained):
  """The search's n best (beam 2): scores = log P / lp(|Y|) with log P the score function's and an
  independent token-by-token computation's, best first; the first is the plain search's best."""
  t = load_trained(trained)
  exp = t.experiment
  pairs = pipeline.eval_text_pairs(t.config.data, exp.data_source, "dev")[:4]
  inputs = np.zeros((4, 16), np.int32)
  for row, (source, _) in enumerate(pairs):
    ids = t.tokenizer.encode(source)[:16]
    inputs[row, :len(ids)] = ids
  tokens, scores = exp.translate_fn(n_best=2)(t.params, inputs, None)
  best, best_scores = exp.translate_fn()(t.params, inputs, None)
  tokens, scores = np.asarray(tokens), np.asarray(scores)
  assert tokens.shape == (4, 2, 16 + 5) and scores.shape == (4, 2)
  np.testing.assert_array_equal(tokens[:, 0], np.asarray(best))
  np.testing.assert_array_equal(scores[:, 0], np.asarray(best_scores))
  assert np.all(scores[:, 0] >= scores[:, 1])
  flat_inputs = np.repeat(inputs, 2, axis=0)
  flat = tokens.reshape(8, -1)
  logp, lengths = map(np.asarray, exp.score_fn()(t.params, flat_inputs, flat))
  np.testing.assert_array_equal(lengths, np.sum(flat != 0, axis=1))
  lp = np.asarray(length_penalty(lengths, 0.6))
  np.testing.assert_allclose(scores.reshape(-1), logp / lp, rtol=2e-5, atol=2e-5)
  reference = _teacher_forced_logp(t, flat_inputs, [row[row != 0] for row in flat])
  np.testing.assert_allclose(logp, reference, rtol=2e-5, atol=2e-4)
  # Alpha as the search's argument (tfm eval's grid): the scores of its hypotheses at alpha 1.
  tokens, scores = map(np.asarray, exp.translate_fn(n_best=2)(t.params, inputs, None,
                                                              np.float32(1.0)))
  logp, lengths = map(np.asarray, exp.score_fn()(t.params, flat_inputs, tokens.reshape(8, -1)))
  np.testing.assert_allclose(scores.reshape(-1), logp / ((5 + lengths) / 6), rtol=2e-5, atol=2e-5)


def test_translate_prints_the_n_best_and_scores_given_targets(trained, tmp_path, capsys):
  """--n_best=2: two lines an input, best first, the first the plain translation. --score on
  SOURCE<TAB>TARGET: log P, tokens and log P / lp, log P the token-by-token reference's."""
  source = tmp_path / "in.txt"
  source.write_text("in the beginning god made the light\nthe word of life\n", encoding="utf-8")
  assert cli.main(["tfm", "translate", f"--workdir={trained}", f"--input={source}"]) == 0
  plain = capsys.readouterr().out.splitlines()
  assert cli.main(["tfm", "translate", f"--workdir={trained}", f"--input={source}",
                   "--n_best=2"]) == 0
  lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
  assert [line[0] for line in lines] == ["0", "0", "1", "1"]
  assert [lines[0][2], lines[2][2]] == plain
  assert float(lines[0][1]) >= float(lines[1][1]) and float(lines[2][1]) >= float(lines[3][1])
  pairs = [("in the beginning god made the light", "en el principio"), ("the word", plain[1])]
  (tmp_path / "pairs.txt").write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
  assert cli.main(["tfm", "translate", f"--workdir={trained}", f"--input={tmp_path / 'pairs.txt'}",
                   "--score", "--length_penalty=1.0"]) == 0
  scored = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
  t = load_trained(trained)
  targets = [np.array(t.tokenizer.encode(target)) for _, target in pairs]
  sources = [np.array(t.tokenizer.encode(s)) for s, _ in pairs]
  reference = _teacher_forced_logp(t, sources, targets)
  assert [int(line[1]) for line in scored] == [len(target) for target in targets]
  for line, logp, target in zip(scored, reference, targets):
    assert float(line[0]) == pytest.approx(logp, abs=2e-4)
    assert float(line[2]) == pytest.approx(float(line[0]) / ((5 + len(target)) / 6), abs=2e-6)


@pytest.mark.parametrize("argv, message", [
    (["eval", "--beam_size=0,2"], "--beam_size=0,2: expected positive integers (1 = greedy), got '0'"),
    (["eval", "--length_penalty=x"], "--length_penalty=x: expected non-negative numbers, got 'x'"),
    (["eval", "--beam_size=1,2", "--out=x.json"], "--out: one file for 2 decoding points"),
    (["translate", "--n_best=3"], "--n_best=3: at most the beam size, 2"),
    (["translate", "--score", "--beam_size=2"], "--score scores the given targets; --beam_size"),
])
def test_bad_decoding_flags_are_one_line(trained, capsys, argv, message, tmp_path):
  source = tmp_path / "in.txt"
  source.write_text("the word\n", encoding="utf-8")
  extra = [f"--input={source}"] if argv[0] == "translate" else []
  code = cli.main(["tfm", *argv, f"--workdir={trained}", *extra])
  err = capsys.readouterr().err.strip().splitlines()
  assert code in (1, 2) and message in err[-1], err


def test_the_best_checkpoint_is_kept_apart_and_evaluated(trained, capsys):
  """Dev perplexity at 2, 4 and 6: the best of them (TensorBoard's dev/perplexity, read
  independently) is WORKDIR/best's only checkpoint, though keep_checkpoints may have deleted it
  from the series; `tfm eval --checkpoint=best` evaluates it alone, its perplexity the one logged
  at that step, written to its own file."""
  curve = dict(events.read_scalars(os.path.join(trained, "tensorboard"))["dev/perplexity"])
  assert sorted(curve) == [2, 4, 6]
  step = min(curve, key=lambda s: (curve[s], s))
  assert ckpt_lib.available_steps(best_lib.best_dir(trained)) == [step]
  record = best_lib.read_record(trained)
  assert record["metric"] == "dev_ppl" and [s for s, _ in record["history"]] == [2, 4, 6]
  _eval(trained, "--checkpoint=best")
  result = _read(f"{trained}/eval_dev_best{step}_first4.json")
  assert result["checkpoints"] == [step] and result["checkpoint"] == "best"
  assert result["best"] == {"metric": "dev_ppl", "value": pytest.approx(curve[step], rel=1e-6)}
  assert result["perplexity"] == pytest.approx(curve[step], rel=1e-5)
  assert "written" in capsys.readouterr().out
  assert cli.main(["tfm", "eval", f"--workdir={trained}", "--checkpoint=best", "--average=2"]) == 1
  assert "--average=2 with --checkpoint=best" in capsys.readouterr().err
