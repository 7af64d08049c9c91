"""Prompt continuation (tfm/decode/generate.py) against full, uncached forward passes of the
model."""

import functools
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.data import tfm_data_testlib as testlib
from tests.model.helpers import draw, tiny
from tfm.data import tokenizer as tokenizer_lib
from tfm.data import vocabulary
from tfm.decode import generate as gen
from tfm.decode.sampling import sample
from tfm.decode.translate import cached_step
from tfm.model.config import ModelConfig
from tfm.model.transformer import Transformer

PROMPTS = [[5, 9, 3, 17, 22, 8, 30], [], [12], [7, 7, 31, 4]]  # ragged, one empty
NEW = 6
FULL_LENGTH = 32


@functools.lru_cache(maxsize=None)
def lm():
  """(model, params, a jitted full forward pass) of a tiny decoder-only model with learned positions
  (the rotary and other positions' caches: tests/model/test_decode_cache.py). One layer: the
  generator's prefill, steps and sampling take the model's cache whole, whatever its depth (that
  each layer keeps its own is test_decode_cache.py's, with two)."""
  cfg = tiny(architecture="decoder_only", num_encoder_layers=0, num_decoder_layers=1,
             positions="learned", max_length=FULL_LENGTH)
  targets = jnp.ones((1, FULL_LENGTH), jnp.int32)
  model, v = draw(cfg, None, targets, seed=3)
  full = jax.jit(lambda p, t: model.apply({"params": p}, None, t))
  return model, v["params"], full


def next_logits(full, params, sequence):
  """The model's logits [vocab] for the token after `sequence`, from one uncached forward pass over
  the whole of it: the decoder input is [0] + sequence, so the logits at position len(sequence)
  (fed the sequence's last token) predict what follows. The row is padded to FULL_LENGTH with a
  placeholder after the sequence and 0 (padding, masked) after that."""
  row = np.zeros((1, FULL_LENGTH), np.int32)
  row[0, :len(sequence)] = sequence
  row[0, len(sequence)] = 3  # a real token, so position len(sequence) is not padding
  return np.asarray(full(params, jnp.asarray(row)))[0, len(sequence)]


def argmax_continuation(full, params, prompt, limit, eos=1):
  """Greedy continuation by repeated full forward passes; pad (0) is never chosen."""
  out = []
  while len(out) < limit:
    logits = next_logits(full, params, list(prompt) + out).astype(np.float64)
    logits[0] = -np.inf
    out.append(int(np.argmax(logits)))
    if out[-1] == eos:
      break
  return out


def tokens_of(sequences):
  """Rows of a DecodeResult's sequences as lists, cut after EOS / before padding."""
  rows = []
  for row in np.asarray(sequences):
    row = [int(t) for t in row]
    rows.append(row[:row.index(1) + 1] if 1 in row else [t for t in row if t != 0])
  return rows


@functools.lru_cache(maxsize=None)
def generator(**settings):
  """make_generator for lm(), built once per setting (each compiles its functions)."""
  return gen.make_generator(lm()[0], max_new_tokens=NEW, **settings)


def run_batch(generator, params, prompts, seed=0, limits=None):
  batch = gen.prompt_batch(prompts, len(prompts))
  keys = gen.row_keys(seed, 0, len(prompts))
  limits = np.full((len(prompts),), NEW) if limits is None else np.asarray(limits)
  limits = limits.astype(np.int32)
  result = generator.generate(params, batch.fed, batch.counts, batch.last, keys, limits)
  return tokens_of(result.sequences)


def test_greedy_is_the_argmax_of_full_forward_passes():
  _, params, full = lm()
  expected = [argmax_continuation(full, params, p, NEW) for p in PROMPTS]
  greedy = generator(temperature=0)
  assert run_batch(greedy, params, PROMPTS) == expected  # ragged prompts in one batch
  # (The streamed path, and its samples against the batch's: test_generate_command.py.)
  # Per-row limits: the batch stops each row at its own.
  assert run_batch(greedy, params, PROMPTS, limits=[2, 1, 3, 6]) == [
      e[:n] for e, n in zip(expected, [2, 1, 3, 6])]


def test_top_k_1_sampling_is_greedy_and_a_seed_fixes_the_samples():
  _, params, _ = lm()
  top1 = generator(temperature=1.3, top_k=1)
  assert run_batch(top1, params, PROMPTS, seed=5) == run_batch(generator(temperature=0),
                                                               params, PROMPTS)
  sampler = generator(temperature=0.7)
  batch = run_batch(sampler, params, PROMPTS, seed=7)
  assert run_batch(sampler, params, PROMPTS[::-1], seed=7) != batch[::-1]  # keys by position
  assert run_batch(sampler, params, PROMPTS, seed=7) == batch
  assert run_batch(sampler, params, PROMPTS, seed=8) != batch  # 24 draws at temperature 0.7


def test_sampling_frequencies_follow_the_softmax_at_temperature():
  """N rows of one prompt, one key each: the first new token's counts against N * softmax(logits /
  T) (pad excluded) of a full forward pass, within 5 binomial standard deviations (+1) for every
  token of the vocabulary; then the second token's counts among the rows whose first token was the
  most common one, against its conditional."""
  _, params, full = lm()
  temperature, rows, prompt = 0.7, 3000, [4, 6, 2]

  def expected(sequence):
    logits = next_logits(full, params, sequence).astype(np.float64) / temperature
    logits[0] = -np.inf
    p = np.exp(logits - logits.max())
    return p / p.sum()

  def check(tokens, probs):
    n = len(tokens)
    counts = np.bincount(tokens, minlength=len(probs))
    bound = 5 * np.sqrt(n * probs * (1 - probs)) + 1
    assert np.all(np.abs(counts - n * probs) <= bound), (counts, n * probs)

  sampler = generator(temperature=temperature)
  batch = gen.prompt_batch([prompt] * rows, rows)
  result = sampler.generate(params, batch.fed, batch.counts, batch.last,
                            gen.row_keys(0, 0, rows), np.full((rows,), 2, np.int32))  # 2 steps
  seqs = np.asarray(result.sequences)
  check(seqs[:, 0], expected(prompt))
  first = np.bincount(seqs[:, 0][seqs[:, 0] != 1]).argmax()
  check(seqs[seqs[:, 0] == first, 1], expected(prompt + [int(first)]))


def stepwise_prefill(tokens_to_logits, cache, fed, counts):
  """The reference prefill (tfm's before the one-pass `gen.prefill`): row r's first counts[r]
  tokens of fed [rows, P] through the step function one a step, a row's cache kept as it is once
  its tokens have run out (max(counts) steps)."""

  def body(t, cache):
    _, stepped = tokens_to_logits(jax.lax.dynamic_slice_in_dim(fed, t, 1, axis=1), cache)
    active = t < counts
    return jax.tree.map(lambda new, old: jnp.where(
        active.reshape((-1,) + (1,) * (new.ndim - 1)), new, old), stepped, cache)

  return jax.lax.fori_loop(0, jnp.max(counts), body, cache)


def stepwise_generate(model, **settings):
  """Generator.generate's signature and result with the prompts run through `stepwise_prefill`."""

  @jax.jit
  def generate(params, fed, counts, last, keys, limits):
    cache = model.apply({"params": params}, None, None, fed.shape[0], fed.shape[1] + NEW,
                        method=Transformer.init_cache, mutable=["cache"])[1]["cache"]
    cache = stepwise_prefill(cached_step(model, params), cache, fed, counts)
    return sample(cached_step(model, params), cache, keys, max_decode_len=NEW, max_lengths=limits,
                  start_id=last, **settings)

  return generate


def test_the_stepwise_reference_keeps_finished_rows():
  """stepwise_prefill against the step contract alone: a cache that records every token it is
  fed."""

  def step(ids, cache):
    seen = cache["seen"].at[jnp.arange(ids.shape[0]), cache["n"]].set(ids[:, 0])
    return jnp.zeros((ids.shape[0], 4)), {"seen": seen, "n": cache["n"] + 1}

  batch = gen.prompt_batch([[5, 6, 7], [], [8]], 4)
  np.testing.assert_array_equal(batch.counts, [3, 0, 1, 0])
  np.testing.assert_array_equal(batch.last, [7, 0, 8, 0])
  cache = {"seen": jnp.full((4, 8), -1, jnp.int32), "n": jnp.zeros((4,), jnp.int32)}
  out = stepwise_prefill(step, cache, jnp.asarray(batch.fed), jnp.asarray(batch.counts))
  np.testing.assert_array_equal(out["n"], [3, 0, 1, 0])
  np.testing.assert_array_equal(np.asarray(out["seen"])[:, :3],
                                [[0, 5, 6], [-1, -1, -1], [0, -1, -1], [-1, -1, -1]])


def test_the_prompt_costs_one_pass_of_the_decoder():
  """Generator.start holds no loop: the decoder runs once over the [rows, P] prompts, whatever
  their lengths (the stepwise prefill was a loop of max(counts) one-token steps)."""
  model, params, _ = lm()
  batch = gen.prompt_batch(PROMPTS, len(PROMPTS))
  jaxpr = str(jax.make_jaxpr(gen.make_generator(model, max_new_tokens=NEW).start)(
      params, batch.fed, batch.counts))
  assert "dot_general" in jaxpr and " while[" not in jaxpr and " scan[" not in jaxpr


def same_as_stepwise(model, params, settings, prompts, seed=0, made_by=None):
  """The generator's (one-pass prefill; made_by, else one made here) tokens and model
  log-probabilities against stepwise_generate's: the tokens equal, log P to 1e-5 (float32)."""
  batch = gen.prompt_batch(prompts, len(prompts))
  args = (params, batch.fed, batch.counts, batch.last, gen.row_keys(seed, 0, len(prompts)),
          np.full((len(prompts),), NEW, np.int32))
  made_by = made_by or gen.make_generator(model, max_new_tokens=NEW, **settings)
  made, want = made_by.generate(*args), stepwise_generate(model, **settings)(*args)
  np.testing.assert_array_equal(made.sequences, want.sequences)
  np.testing.assert_allclose(made.log_probs, want.log_probs, atol=1e-5, rtol=1e-5)
  assert np.all(np.asarray(made.lengths) >= 1)


def test_one_pass_prefill_generates_what_the_stepwise_one_did():
  """lm() (learned positions), PROMPTS: greedy, and samples at temperature 0.7 drawn with the same
  keys."""
  model, params, _ = lm()
  for settings, seed in ((dict(temperature=0), 0), (dict(temperature=0.7), 7)):
    same_as_stepwise(model, params, settings, PROMPTS, seed, made_by=generator(**settings))


@pytest.mark.long
@pytest.mark.parametrize("changes", [
    dict(positions="sinusoidal"), dict(positions="rope"), dict(positions="alibi"),
    dict(positions="relative"), dict(positions="none"),
    dict(positions="rope", num_kv_heads=2, norm="pre", ffn="swiglu"),
    dict(positions="alibi", num_kv_heads=1)], ids=lambda c: "_".join(map(str, c.values())))
def test_one_pass_prefill_generates_what_the_stepwise_one_did_for_every_position_kind(changes):
  """As above, greedy, for the other position kinds and grouped- and multi-query attention, PROMPTS
  and one of 20 pieces (P = 32, two LENGTH_STEPs) (long: two compiles a kind; each kind's prefill
  against the full forward pass is in the fast tier, tests/model/test_decode_cache.py)."""
  cfg = tiny(architecture="decoder_only", num_encoder_layers=0, max_length=FULL_LENGTH, **changes)
  model, v = draw(cfg, None, jnp.ones((1, FULL_LENGTH), jnp.int32), seed=3)
  same_as_stepwise(model, v["params"], dict(temperature=0),
                   PROMPTS + [[(5 * i) % 33 + 3 for i in range(20)]])


def test_the_last_rows_of_a_learned_table_continue_as_full_forward_passes():
  # Prompts of FULL_LENGTH - 3 and FULL_LENGTH - 1 pieces: their new tokens sit at the table's last
  # rows, in a cache longer than the table (the prompt padded to 32, + NEW); an index past the
  # table would be clamped by the gather, not refused, so the tokens are checked, not the shapes.
  _, params, full = lm()
  prompts = [[(7 * i) % 30 + 4 for i in range(FULL_LENGTH - 3)], [9] * (FULL_LENGTH - 1)]
  limits = [gen.new_token_limit(lm()[0].cfg, len(p), NEW) for p in prompts]
  assert limits == [3, 1]
  expected = [argmax_continuation(full, params, p, n) for p, n in zip(prompts, limits)]
  assert run_batch(generator(temperature=0), params, prompts, limits=limits) == expected


def test_learned_positions_bound_the_prompt_and_the_new_tokens():
  cfg = ModelConfig(architecture="decoder_only", num_encoder_layers=0, positions="learned",
                    max_length=10)
  assert gen.new_token_limit(cfg, 4, 100) == 6  # inputs at positions 0 .. 9
  assert gen.new_token_limit(cfg, 9, 100) == 1
  with pytest.raises(ValueError, match="model.max_length=10"):
    gen.new_token_limit(cfg, 10, 1)
  rope = ModelConfig(architecture="decoder_only", num_encoder_layers=0, positions="rope",
                     max_length=10)
  assert gen.new_token_limit(rope, 50, 100) == 100  # no table of positions to run out of
  with pytest.raises(ValueError, match="decoder_only"):
    gen.make_generator(type("M", (), {"cfg": ModelConfig()})(), max_new_tokens=3)


def test_streamed_text_is_the_decoded_whole(tmp_path):
  """text_deltas on a real SentencePiece vocabulary: after every token the text shown is the new
  part of decode(prompt + tokens so far), and the deltas join to decode(prompt + tokens up to EOS)
  less decode(prompt): word-start spaces included, the first one of an empty prompt's text not."""
  texts = [clean for _, clean in testlib.corpus()["web"].values()][:400]
  vocabulary.train_vocab(texts, 300, tmp_path / "spm.model")
  tok = tokenizer_lib.Tokenizer.load(tmp_path / "spm.model")
  rng = np.random.default_rng(0)
  for trial in range(40):
    prompt = tok.encode(texts[trial])[:-1][:int(rng.integers(0, 8))]
    tokens = [int(t) for t in rng.integers(2, tok.vocab_size, 10)]
    if trial % 2:
      tokens[int(rng.integers(0, 10))] = tok.eos_id
    fed = []

    def feed():
      for token in tokens:
        fed.append(token)
        yield token

    head, shown = tok.decode(prompt), ""
    for delta in gen.text_deltas(tok, prompt, feed()):
      assert delta
      shown += delta
      if fed[-1] != tok.eos_id:
        assert head + shown == tok.decode(prompt + fed)  # live: nothing held back
    ended = tokens[:tokens.index(tok.eos_id)] if tok.eos_id in tokens else tokens
    whole = tok.decode(prompt + ended)
    assert whole.startswith(head) and shown == whole[len(head):]
    assert shown == gen.continuation(tok, prompt, tokens)
    if not prompt and ended:
      assert not shown.startswith(" ")


@pytest.mark.long
def test_a_scanned_model_generates_as_its_unrolled_twin():
  """model.scan_layers: the batch and the stream decode the unrolled twin (parameters unstacked
  once by prepare), and both give the scanned model's full-pass argmax (long: two compiles)."""
  cfg = tiny(architecture="decoder_only", num_encoder_layers=0, positions="rope",
             max_length=FULL_LENGTH, scan_layers=True)
  model, v = draw(cfg, None, jnp.ones((1, FULL_LENGTH), jnp.int32), seed=5)
  params = v["params"]
  full = jax.jit(lambda p, t: model.apply({"params": p}, None, t))
  expected = [argmax_continuation(full, params, p, NEW) for p in PROMPTS]
  greedy = gen.make_generator(model, max_new_tokens=NEW, temperature=0)
  assert run_batch(greedy, params, PROMPTS) == expected
  keys = gen.row_keys(0, 0, len(PROMPTS))
  assert [list(gen.stream_tokens(greedy, params, p, key=keys[i], limit=NEW))
          for i, p in enumerate(PROMPTS)] == expected
