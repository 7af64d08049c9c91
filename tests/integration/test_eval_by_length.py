"""Sources longer than the training rows: `tfm eval --length_buckets` (dev perplexity and BLEU by
source length, checked against a per-sentence computation of its own), and `tfm translate` and
`tfm eval`, which decode every source whole where the positions allow it and say what each figure
scored, left out or cut."""

import functools
import glob
import json
import pathlib
import math
import types

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


@functools.lru_cache(maxsize=None)
def _logp_of(model_config):
  """The model's log-softmax over one example's positions, jitted once a model config."""
  model = Transformer(model_config)
  return jax.jit(lambda p, x, y: jax.nn.log_softmax(
      model.apply({"params": p}, x, y).astype(jnp.float32)))


def _perplexity(t, examples) -> float:
  """exp(summed NLL / target tokens) of `examples`, each run through the model alone (a row of
  its own, padded with zeros to one shape for all: the model masks the padding)."""
  # One program for every example of every call (log-softmax included): rows as long as the dev
  # set's longest source and target; each example's own positions are then picked in numpy
  # (slices of a length of their own would each compile).
  logp_of = _logp_of(t.config.model)
  pad = lambda ids, n: jnp.asarray([list(ids) + [0] * (n - len(ids))])
  every = _lengths(t)
  sources, targets = max(len(e[1]) for e in every), max(len(e[2]) for e in every)
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
  # translated at the run's settings (batches of eval.batch_size: the shapes the eval compiled)
  chosen = [(s, g) for (s, g), e in zip(pairs, lengths) if 24 < e[0]]
  hyps, _ = translate_texts(translate, t.params, t.tokenizer, [s for s, _ in chosen],
                            batch_size=t.config.eval.batch_size, max_input_length=2 * longest)
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


def _source_ids(t, text):
  return t.tokenizer.encode(text)


def test_translate_decodes_a_source_longer_than_the_training_rows_whole(trained, tmp_path,
                                                                       capsys):
  """Three dev sources of 17-32 pieces (training rows of 16): `tfm translate` prints what the
  run's search gives for the whole sources, a batch of them as the command batches them (sorted
  by length, padded to 32), decoded here through the search directly; nothing is counted as
  refused or cut."""
  t = load_trained(trained)
  pairs = pipeline.eval_text_pairs(t.config.data, t.experiment.data_source, "dev")
  chosen = [s for s, _ in pairs if 16 < len(_source_ids(t, s)) <= 32][:3]
  assert len(chosen) == 3, "the fake dev set needs sources longer than training's"
  (tmp_path / "in.txt").write_text("".join(f"{s}\n" for s in chosen), encoding="utf-8")
  assert cli.main(["tfm", "translate", f"--workdir={trained}", f"--input={tmp_path}/in.txt"]) == 0
  out = capsys.readouterr()
  order = sorted(range(3), key=lambda i: len(_source_ids(t, chosen[i])))
  inputs = np.zeros((4, 32), np.int32)  # the 3 lines in a batch of eval.batch_size 4 rows
  for row, i in enumerate(order):
    ids = _source_ids(t, chosen[i])
    inputs[row, :len(ids)] = ids
  translate = t.experiment.translate_fn(eos_id=t.tokenizer.eos_id)
  tokens, _ = translate(t.params, inputs, jax.random.PRNGKey(0))
  want = [None] * 3
  for row, i in enumerate(order):
    want[i] = t.tokenizer.decode([int(x) for x in np.asarray(tokens)[row] if x])
  assert out.out.splitlines() == want
  assert "not translated" not in out.err and "cut to" not in out.err


def test_eval_says_what_bleu_and_perplexity_each_scored(trained, capsys):
  """data.max_length=16 with data.overlong=filter: BLEU translates all 8 dev pairs whole, the
  perplexity reads the pairs whose two sides fit 16 pieces; the result counts both (from the
  tokenizer here) and its note says it, on the console too."""
  assert cli.main(["tfm", "eval", f"--workdir={trained}", "--average=1",
                   "--out", f"{trained}/counts.json"]) == 0
  printed = capsys.readouterr().out
  result = json.load(open(f"{trained}/counts.json"))
  t = load_trained(trained, average=1)
  lengths = _lengths(t)
  fit = sum(len(source) <= 16 and len(target) <= 16 for _, source, target in lengths)
  assert 0 < fit < len(lengths) == 8  # the fake dev set's
  assert (result["sentences"], result["sentences_dropped"], result["sentences_truncated"]) == (
      8, 0, 0)
  assert (result["perplexity_pairs"], result["perplexity_dropped"],
          result["perplexity_truncated"], result["examples_skipped"]) == (fit, 8 - fit, 0, 0)
  assert result["target_tokens"] == sum(len(target) for _, source, target in lengths
                                        if len(source) <= 16 and len(target) <= 16)
  assert result["note"] == (f"perplexity over {fit} of 8 pairs, {8 - fit} longer than "
                            "data.max_length=16 left out (data.overlong='filter')")
  assert f"note: {result['note']}" in printed
  # --truncate cuts only what a learned table cannot hold: here (sinusoids) it is refused, in one
  # line, before anything is written (it would write the same figures under another name).
  assert cli.main(["tfm", "eval", f"--workdir={trained}", "--average=1", "--truncate"]) == 2
  assert ("--truncate: model.positions='sinusoidal' decodes a source of any length whole"
          in capsys.readouterr().err)
  assert not list(pathlib.Path(trained).glob("*truncate*"))


@pytest.fixture(scope="module")
def learned(experiment_module, tmp_path_factory):
  """A learned position table of 27 rows (data.max_length 16, eval.max_extra_length 5)."""
  workdir = tmp_path_factory.mktemp("learned")
  run_train(experiment_module(*TRAIN, "model.positions=learned", "model.max_length=27",
                              "train.steps=2"), workdir)
  return workdir


@pytest.mark.long
def test_a_learned_table_refuses_a_longer_source_or_cuts_it_when_asked(learned, tmp_path, capsys):
  """The table holds sources of up to 27 - 5 = 22 pieces: `tfm translate` leaves a longer line
  untranslated (an empty line) and says which, or with --truncate cuts it and says so; `tfm eval`
  scores BLEU without those pairs and counts them, or with --truncate cuts them (its own file)."""
  t = load_trained(str(learned), average=1)
  lengths = _lengths(t)
  longer = sum(n > 22 for n, _, _ in lengths)
  assert 0 < longer < len(lengths)
  text = " ".join(["word"] * 40)
  assert len(t.tokenizer.encode(text)) > 22
  (tmp_path / "in.txt").write_text(f"in the beginning\n{text}\n", encoding="utf-8")
  capsys.readouterr()  # load_trained's own line, printed above
  assert cli.main(["tfm", "translate", f"--workdir={learned}", f"--input={tmp_path}/in.txt"]) == 0
  out = capsys.readouterr()
  assert len(out.out.splitlines()) == 2 and out.out.splitlines()[1] == ""
  assert ("; 1 not translated, printed empty (line 2: a source longer than the 22 pieces the "
          "learned position table holds, model.max_length 27 - max_extra_length 5; --truncate "
          "cuts a source to them)") in out.err
  assert cli.main(["tfm", "translate", f"--workdir={learned}", f"--input={tmp_path}/in.txt",
                   "--truncate"]) == 0
  out = capsys.readouterr()
  assert "; 1 cut to 22 pieces by --truncate (line 2)" in out.err
  inputs = np.zeros((2, 22), np.int32)  # both lines, sorted by length, padded to the cut's 22
  for row, ids in enumerate([t.tokenizer.encode("in the beginning"),
                             t.tokenizer.encode(text)[:21] + [1]]):
    inputs[row, :len(ids)] = ids
  tokens, _ = t.experiment.translate_fn(eos_id=1)(t.params, inputs, jax.random.PRNGKey(0))
  assert out.out.splitlines()[1] == t.tokenizer.decode(
      [int(x) for x in np.asarray(tokens)[1] if x])
  assert cli.main(["tfm", "eval", f"--workdir={learned}", "--average=1",
                   "--out", f"{tmp_path}/e.json"]) == 0
  result = json.load(open(f"{tmp_path}/e.json"))
  assert (result["sentences"], result["sentences_dropped"], result["sentences_truncated"]) == (
      len(lengths) - longer, longer, 0)
  assert result["note"].startswith(f"BLEU over {len(lengths) - longer} of {len(lengths)} pairs, "
                                   f"{longer} not translated: a source longer than the 22 pieces")
  assert cli.main(["tfm", "eval", f"--workdir={learned}", "--average=1", "--truncate"]) == 0
  (path,) = glob.glob(f"{learned}/eval_dev_*_truncate.json")
  result = json.load(open(path))
  assert (result["sentences"], result["sentences_dropped"], result["sentences_truncated"]) == (
      len(lengths), 0, longer)


def test_score_with_truncate_is_not_told_to_truncate():
  """--score --truncate: a pair refused for its target (longer than the table; a target is never
  cut) is counted without the hint to use --truncate, which was given; without the flag the hint
  stays."""
  from tfm.commands.translate import _counted  # pylint: disable=import-outside-toplevel
  config = types.SimpleNamespace(model=types.SimpleNamespace(max_length=24))
  stats = dict(refused=[2], truncated=[])
  given = _counted(stats, 24, "a source or a target", config, done="scored", truncate=True)
  assert given == ("; 1 not scored, printed empty (line 3: a source or a target longer than the "
                   "24 pieces the learned position table holds, model.max_length 24)")
  assert _counted(stats, 24, "a source or a target", config, done="scored").endswith(
      "model.max_length 24; --truncate cuts a source to them)")


@pytest.mark.long
def test_a_learned_table_too_short_says_so(learned):
  """A learned position table of 27 rows (data.max_length 16, eval.max_extra_length 5): sources of
  17-40 pieces have no rows, and that bucket says why while the others are scored. The check is the
  decode's: with --max_extra_length=8 (16 + 8 fits the table) sources of 17-21 pieces would
  decode past row 27, so that bucket gets no BLEU, though the run's own 5 would have fitted."""
  tmp_path = learned
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
