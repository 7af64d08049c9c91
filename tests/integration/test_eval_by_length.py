"""`tfm eval --length_buckets`: dev perplexity and BLEU by source length, beyond the training
lengths, checked against a per-sentence computation of its own."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sacrebleu

from tests.integration.conftest import run_train
from tfm import cli
from tfm.data import pipeline
from tfm.decode.text import translate_texts
from tfm.eval.restore import load_trained
from tfm.model.transformer import Transformer

TRAIN = ("train.steps=4", "eval.beam_size=2", "eval.max_extra_length=5", "eval.batch_size=4",
         "data.max_length=16", "data.overlong=filter")  # trains on pairs of at most 16 pieces


@pytest.fixture(scope="module")
def trained(experiment_module, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("short")
  run_train(experiment_module(*TRAIN), workdir)
  return str(workdir)


def _lengths(t):
  """Source length in pieces (EOS included) of every dev pair the evaluation reads, with its
  token ids: computed here from the run's tokenizer."""
  pairs = pipeline.eval_text_pairs(t.config.data, t.experiment.data_source, "dev")
  return [(len(t.tokenizer.encode(s)), t.tokenizer.encode(s), t.tokenizer.encode(g))
          for s, g in pairs]


def _perplexity(t, examples) -> float:
  """exp(summed NLL / target tokens) of `examples`, each run through the model alone (a row of
  its own, padded with zeros to one shape for all: the model masks the padding)."""
  model = Transformer(t.config.model)
  # One program for every example (log-softmax included); each example's own positions are then
  # picked in numpy (slices of a length of their own would each compile).
  logp_of = jax.jit(lambda p, x, y: jax.nn.log_softmax(
      model.apply({"params": p}, x, y).astype(jnp.float32)))
  pad = lambda ids, n: jnp.asarray([list(ids) + [0] * (n - len(ids))])
  sources, targets = max(len(e[1]) for e in examples), max(len(e[2]) for e in examples)
  nll, tokens = 0.0, 0
  for _, source, target in examples:
    logp = np.asarray(logp_of(t.params, pad(source, sources), pad(target, targets)))[0, :len(target)]
    nll -= float(np.sum(np.take_along_axis(logp, np.asarray(target)[:, None], -1)))
    tokens += len(target)
  return math.exp(nll / tokens)


def test_buckets_hold_every_pair_and_their_perplexity_is_each_sentence_s(trained, capsys):
  t = load_trained(trained, average=1)
  lengths = _lengths(t)
  longest = max(n for n, _, _ in lengths)
  assert longest > 16, "the fake dev set needs sources longer than training's"
  edges = (16, 24, 2 * longest)  # the training lengths, then longer ones
  assert cli.main(["tfm", "eval", f"--workdir={trained}", "--average=1", "--limit=4",
                   f"--length_buckets={','.join(map(str, edges))}"]) == 0
  name = f"eval_dev_4_avg1_first4_len{'-'.join(map(str, edges))}.json"
  result = json.load(open(f"{trained}/{name}"))
  assert result["length_buckets"] == list(edges) and result["longer_than_buckets"] == 0
  buckets = result["by_length"]
  assert [b["bucket"] for b in buckets] == ["1-16", "17-24", f"25-{2 * longest}"]
  pairs = pipeline.eval_text_pairs(t.config.data, t.experiment.data_source, "dev")
  translate = t.experiment.translate_fn(eos_id=t.tokenizer.eos_id)
  for b, (lo, hi) in zip(buckets, [(0, 16), (16, 24), (24, 2 * longest)]):
    members = [e for e in lengths if lo < e[0] <= hi]
    assert b["sentences"] == len(members) > 0
    # every pair of the bucket, the long ones included, none truncated
    assert b["target_tokens"] == sum(len(target) for _, _, target in members)
    assert math.isclose(b["perplexity"], _perplexity(t, members), rel_tol=2e-4)
  # BLEU beyond the training lengths: sacreBLEU of the long bucket's sources, chosen here and
  # translated in one batch of their own at the run's settings
  chosen = [(s, g) for (s, g), e in zip(pairs, lengths) if 24 < e[0]]
  hyps, _ = translate_texts(translate, t.params, t.tokenizer, [s for s, _ in chosen],
                            batch_size=8, max_input_length=2 * longest)
  assert buckets[2]["bleu"] == pytest.approx(
      sacrebleu.corpus_bleu(hyps, [[g for _, g in chosen]]).score, abs=1e-9)
  assert all(b["bleu"] >= 0 and b["tokenized_bleu"] >= 0 for b in buckets)
  out = capsys.readouterr().out
  assert f"length 25-{2 * longest}" in out


def test_one_bucket_over_the_training_lengths_is_the_plain_evaluation(trained):
  """With one bucket holding every source of at most data.max_length pieces, and training's
  filter, the bucket's figures are the whole evaluation's (BLEU over every pair)."""
  assert cli.main(["tfm", "eval", f"--workdir={trained}", "--average=1", "--length_buckets=16",
                   "--out", f"{trained}/one.json"]) == 0
  result = json.load(open(f"{trained}/one.json"))
  (bucket,) = result["by_length"]
  t = load_trained(trained, average=1)
  short = [e for e in _lengths(t) if e[0] <= 16]
  assert bucket["sentences"] == len(short)
  assert result["longer_than_buckets"] == len(_lengths(t)) - len(short)
  # The plain dev perplexity reads the pairs data.overlong='filter' keeps: both sides <= 16; the
  # bucket every source of at most 16 pieces, whatever its target's length.
  both = [e for e in short if len(e[2]) <= 16]
  assert math.isclose(result["perplexity"], _perplexity(t, both), rel_tol=2e-4)
  assert math.isclose(bucket["perplexity"], _perplexity(t, short), rel_tol=2e-4)


@pytest.mark.long
def test_a_learned_table_too_short_says_so(experiment_module, tmp_path):
  """A learned position table of 27 rows (data.max_length 16, eval.max_extra_length 5): sources of
  17-40 pieces have no rows, and that bucket says why while the others are scored. The check is the
  decode's: with --max_extra_length=8 (16 + 8 fits the table) sources of 17-21 pieces would
  decode past row 27, so that bucket gets no BLEU, though the run's own 5 would have fitted."""
  run_train(experiment_module(*TRAIN, "model.positions=learned", "model.max_length=27",
                              "train.steps=2"), tmp_path)
  assert cli.main(["tfm", "eval", f"--workdir={tmp_path}", "--average=1",
                   "--length_buckets=16,40", "--out", f"{tmp_path}/e.json"]) == 0
  short, long = json.load(open(f"{tmp_path}/e.json"))["by_length"]
  assert "note" not in short and short["perplexity"] > 0 and "bleu" in short
  assert long["sentences"] > 0
  assert "perplexity" not in long and "bleu" not in long
  assert "past the learned table's 27 (model.max_length)" in long["note"]
  assert cli.main(["tfm", "eval", f"--workdir={tmp_path}", "--average=1", "--max_extra_length=8",
                   "--length_buckets=16,21", "--out", f"{tmp_path}/e8.json"]) == 0
  short, longer = json.load(open(f"{tmp_path}/e8.json"))["by_length"]
  assert "note" not in short and "bleu" in short and longer["sentences"] > 0
  assert "bleu" not in longer and longer["note"].endswith(
      "no BLEU: sources of up to 21 pieces decode up to 29 positions, past the learned table's "
      "27 (model.max_length)"), longer


def test_bad_edges_are_named_in_one_line(trained, capsys):
  for bad in ("32,16", "32,x", "-4"):
    assert cli.main(["tfm", "eval", f"--workdir={trained}", f"--length_buckets={bad}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "tfm eval: error: --length_buckets: expected strictly increasing positive integers"), err
