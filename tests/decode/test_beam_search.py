"""Beam search against hand arithmetic, greedy decoding and an exhaustive numpy search."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tfm.decode import beam, common
from tests.decode.toy_models import (EOS, PAD, MarkovToy, PrefixToy, exhaustive_search, np_lp,
                                     np_sequence_logp, run_beam, trim)

BATCH, VOCAB = 4, 6


def test_length_penalty_by_hand():
  # ((5 + 1) / 6) ** 0.6 = 1;  (7 / 6) ** 0.6 = exp(0.6 * 0.1541507) = exp(0.0924904) = 1.0969026;
  # (15 / 6) ** 0.6 = exp(0.6 * 0.9162907) = 1.7328621;  alpha = 0 gives 1 at every length.
  got = np.asarray(beam.length_penalty(jnp.array([1, 2, 10]), 0.6))
  np.testing.assert_allclose(got, [1.0, 1.0969026, 1.7328621], rtol=1e-6)
  np.testing.assert_allclose(np.asarray(beam.length_penalty(jnp.arange(1, 9), 0.0)), 1.0)
  assert float(beam.length_penalty(3, 1.0)) == pytest.approx(8 / 6)


def test_tile_and_gather_layout():
  x = jnp.arange(6).reshape(2, 3)  # [batch=2, 3]
  tiled = np.asarray(beam.tile_beams({"a": x}, 2)["a"])
  np.testing.assert_array_equal(tiled, np.repeat(np.arange(6).reshape(2, 3), 2, axis=0))
  y = jnp.arange(2 * 3 * 4).reshape(2, 3, 4)  # [batch, beam, ...]
  parents = jnp.array([[2, 2, 0], [1, 0, 1]])
  got = np.asarray(beam.gather_beams(y, parents))
  ref = np.stack([np.asarray(y)[b, np.asarray(parents)[b]] for b in range(2)])
  np.testing.assert_array_equal(got, ref)


def _low_probability_eos(step, prev):
  """EOS is only the third most likely first token; every longer hypothesis is unlikely."""
  if step == 0:
    return {2: 0.35, 3: 0.34, EOS: 0.31}
  return {2: 0.24, 3: 0.24, 4: 0.24, 5: 0.24, EOS: 0.04}


def test_finds_an_early_low_probability_eos_as_an_exhaustive_search_does():
  # Beam 2. Step 0 ranks [2] .35, [3] .34, [EOS] .31: a search that keeps only the beam_size best
  # extensions never finishes [EOS]. The paper's search looks at the 2 * beam_size best, finishes
  # [EOS] (score ln .31 = -1.171) and keeps [2], [3] live; every longer hypothesis scores below it
  # ([2 EOS]: (ln .35 + ln .04) / lp(2) = -3.89), as the exhaustive search confirms.
  model = MarkovToy.from_rule(_low_probability_eos, BATCH, VOCAB)
  limit = 5
  r = run_beam(model, beam_size=2, alpha=0.6, max_decode_len=limit)
  for row in range(BATCH):
    best_score, best = exhaustive_search(model, row, limit, 0.6)[0]
    assert best == (EOS,)
    assert trim(r.sequences[row, 0], r.lengths[row, 0]) == best
    assert r.scores[row, 0] == pytest.approx(best_score, rel=1e-5)
    assert r.scores[row, 0] == pytest.approx(np.log(0.31), rel=1e-5)
  # Beam 1 looks at the 2 best first tokens only, [2] and [3], and misses it.
  narrow = run_beam(model, beam_size=1, alpha=0.6, max_decode_len=limit)
  assert all(trim(narrow.sequences[row, 0], narrow.lengths[row, 0]) != (EOS,) for row in range(BATCH))


@pytest.mark.parametrize("toy,alpha,pad_id", [
    (MarkovToy, 0.6, PAD), (PrefixToy, 0.6, PAD), (PrefixToy, 0.0, PAD), (MarkovToy, 2.0, PAD),
    (PrefixToy, -0.5, PAD), (MarkovToy, 0.6, None)])
def test_matches_exhaustive_search(toy, alpha, pad_id):
  # vocab 5 and |Y| <= 4: at most 4**3 = 64 live hypotheses and 64 * 5 = 320 extensions per step
  # (pad allowed), so beam 160 (2 x 160 candidates) keeps all of them and the search must return
  # every hypothesis ending in EOS, best first (only [EOS] for the row limited to one token).
  vocab, beam_size, limits = 5, 160, [4, 2, 3, 1]
  model = toy(3, BATCH, vocab, scale=1.5)
  full = run_beam(model, beam_size=beam_size, alpha=alpha, max_decode_len=5, max_lengths=limits,
                  pad_id=pad_id, early_stopping=False)
  early = run_beam(model, beam_size=beam_size, alpha=alpha, max_decode_len=5, max_lengths=limits,
                   pad_id=pad_id)
  for row, limit in enumerate(limits):
    ref = exhaustive_search(model, row, limit, alpha, pad_id)
    assert 0 < len(ref) < beam_size
    got = [trim(full.sequences[row, i], full.lengths[row, i]) for i in range(len(ref))]
    assert got == [seq for _, seq in ref]
    np.testing.assert_allclose(full.scores[row, :len(ref)], [s for s, _ in ref], rtol=2e-5)
    assert np.all(np.isneginf(full.scores[row, len(ref):]))  # empty slots
    assert not full.sequences[row, len(ref):].any()
    # Stopping early returns the best of them, exactly (a prefix of the full list).
    n = int(np.sum(early.scores[row] > -np.inf))
    assert n >= 1
    np.testing.assert_array_equal(early.sequences[row, :n], full.sequences[row, :n])
    np.testing.assert_allclose(early.scores[row, :n], full.scores[row, :n], rtol=1e-6)


def test_beam4_scores_are_consistent_with_the_model():
  model = PrefixToy(5, BATCH, VOCAB, eos_bias=np.linspace(-3, 3, 12))
  r = run_beam(model, beam_size=4, alpha=0.6, max_decode_len=40, max_lengths=[40, 8, 5, 2])
  filled = 0
  for row in range(BATCH):
    n = int(np.sum(r.scores[row] > -np.inf))
    filled += n
    assert n >= 1 and np.all(np.diff(r.scores[row, :n]) <= 0)  # best first
    seqs = [trim(r.sequences[row, i], r.lengths[row, i]) for i in range(n)]
    assert len(set(seqs)) == n
    for i, seq in enumerate(seqs):
      expect = np_sequence_logp(model, row, seq) / np_lp(len(seq), 0.6)
      assert r.scores[row, i] == pytest.approx(expect, rel=1e-5)
  assert filled > BATCH  # more than one hypothesis in some rows, or this checks little


def test_eos_and_padding_with_mixed_limits():
  model = MarkovToy(6, BATCH, VOCAB, eos_bias=np.linspace(-3, 1, 12))
  limits = np.array([1, 3, 12, 6])
  r = run_beam(model, beam_size=4, alpha=0.6, max_decode_len=40, max_lengths=limits)
  assert r.sequences.shape == (BATCH, 4, 40) and r.scores.shape == (BATCH, 4)
  for row in range(BATCH):
    for i in range(int(np.sum(r.scores[row] > -np.inf))):
      seq, n = r.sequences[row, i], r.lengths[row, i]
      assert 1 <= n <= limits[row]
      assert not seq[n:].any()  # nothing but 0 after the hypothesis
      assert EOS not in seq[:n - 1] and PAD not in seq[:n]  # padding is never generated
      assert seq[n - 1] == EOS  # EOS-ended hypotheses exist here, so none is a truncated one
  assert r.lengths[0, 0] == 1 and r.sequences[0, 0, 0] == EOS  # limit 1: only [EOS] ends in EOS
  assert np.all(r.scores[0, 1:] == -np.inf)


def _no_eos(step, prev):
  """No EOS; per-step probabilities, so no two sequences tie."""
  return [{2: 0.5, 3: 0.3, 4: 0.2}, {2: 0.6, 3: 0.25, 4: 0.15}, {2: 0.7, 3: 0.2, 4: 0.1}][min(step, 2)]


def test_without_any_eos_the_live_beams_are_returned_truncated():
  # EOS has probability 0: no hypothesis ever finishes, so at its limit a row returns its live
  # beams, the beam_size most likely sequences of limit tokens (tensor2tensor's fallback).
  model = MarkovToy.from_rule(_no_eos, BATCH, VOCAB, floor=-np.inf)
  limits = [3, 1, 2, 3]
  r = run_beam(model, beam_size=4, alpha=0.6, max_decode_len=6, max_lengths=limits)
  for row, limit in enumerate(limits):
    ref = exhaustive_search(model, row, limit, 0.6)[:4]
    got = [trim(r.sequences[row, i], r.lengths[row, i]) for i in range(len(ref))]
    assert got == [seq for _, seq in ref] and all(len(seq) == limit for seq in got)
    np.testing.assert_allclose(r.scores[row, :len(ref)], [sc for sc, _ in ref], rtol=1e-5)
  assert r.lengths[1, 3] == 0  # one token, three candidates: the fourth slot stays empty


def test_early_termination_stops_early_without_changing_the_result():
  # EOS becomes likely after a few steps, so every row finishes long before its limit.
  model = MarkovToy(7, BATCH, VOCAB, eos_bias=[-1.0, 0.0, 4.0])
  kw = dict(beam_size=4, alpha=0.6, max_decode_len=40, max_lengths=[40, 30, 40, 35])
  early = run_beam(model, **kw)
  full = run_beam(model, early_stopping=False, **kw)
  assert int(full.num_steps) == 40
  assert int(early.num_steps) < 15
  for row in range(BATCH):  # what the early search returns is the head of the full result
    n = int(np.sum(early.scores[row] > -np.inf))
    assert n >= 1
    np.testing.assert_array_equal(early.sequences[row, :n], full.sequences[row, :n])
    np.testing.assert_array_equal(early.lengths[row, :n], full.lengths[row, :n])
    np.testing.assert_allclose(early.scores[row, :n], full.scores[row, :n], rtol=1e-6)


def _rule_alpha_positive(step, prev):
  if step == 0:
    return {EOS: 0.4, 2: 0.3, 3: 0.2, 4: 0.1}
  if prev == 2:
    return {EOS: 0.8, 2: 0.2} if step == 1 else {2: 1.0} if step < 9 else {EOS: 1.0}
  return {EOS: 1.0}


def _rule_alpha_negative(step, prev):
  if step == 0:
    return {EOS: 0.1, 2: 0.5, 3: 0.2, 4: 0.2}
  if step == 1 and prev == 2:
    return {EOS: 0.5, 2: 0.5}
  return {EOS: 1.0}


# Hand-made cases (beam 4, limit 10) where a live beam that looks hopeless at its current length
# still enters the final 4 hypotheses, so a bound with the wrong length penalty stops too early.
#  alpha = 1: after step 1 the finished scores are [EOS] -0.92, [2 EOS] -1.22, [3 EOS] -1.38,
#    [4 EOS] -1.97, and [2 2] is live with log P = ln .3 + ln .2 = -2.81. Its continuation
#    2 2 ... 2 EOS (probability 1 per step, EOS at the 10th token) scores -2.81 / lp(10) = -1.13
#    and ranks second; a bound using lp(3) (-2.11 < -1.97) would have stopped.
#  alpha = -1 (shorter is better, lp(L) = 6 / (5 + L)): after step 1 the finished scores are
#    [2 EOS] -1.62, [3 EOS] -1.88, [4 EOS] -1.88, [EOS] -2.30, and [2 2] is live with log P
#    -1.39; [2 2 EOS] scores -1.85 and replaces [EOS]; a bound using lp(10) (-3.47) would have
#    stopped.
@pytest.mark.parametrize("rule,alpha,expected", [
    (_rule_alpha_positive, 1.0, [(EOS,), (2,) * 9 + (EOS,), (2, EOS), (3, EOS)]),
    (_rule_alpha_negative, -1.0, [(2, EOS), (2, 2, EOS), (3, EOS), (4, EOS)]),
])
def test_early_termination_bound_uses_the_most_favourable_length_penalty(rule, alpha, expected):
  model = MarkovToy.from_rule(rule, BATCH, VOCAB)
  kw = dict(beam_size=4, alpha=alpha, max_decode_len=40, max_lengths=[10] * BATCH)
  early, full = run_beam(model, **kw), run_beam(model, early_stopping=False, **kw)
  for row in range(BATCH):
    got = [trim(early.sequences[row, i], early.lengths[row, i]) for i in range(4)]
    assert got == expected
    ref = [np_sequence_logp(model, row, seq) / np_lp(len(seq), alpha) for seq in expected]
    np.testing.assert_allclose(early.scores[row], ref, rtol=1e-5)
  np.testing.assert_array_equal(early.sequences, full.sequences)
  np.testing.assert_allclose(early.scores, full.scores, rtol=1e-6)
  assert int(full.num_steps) == 10 and int(early.num_steps) <= 10


def test_length_limit_helpers():
  inputs = jnp.array([[5, 6, 7, 1, 0, 0], [8, 1, 0, 0, 0, 0]])
  np.testing.assert_array_equal(np.asarray(common.input_length_limits(inputs)), [54, 52])
  limits = common.resolve_max_lengths(jnp.array([54, 0, 3]), 3, max_decode_len=10)
  np.testing.assert_array_equal(np.asarray(limits), [10, 1, 3])
  with pytest.raises(ValueError, match="shape"):
    common.resolve_max_lengths(jnp.array([5, 5]), 3, max_decode_len=10)
  assert common.infer_batch_size({"x": jnp.zeros((7, 2))}, None, None) == 7
  with pytest.raises(ValueError, match="batch size"):
    common.infer_batch_size({}, None, None)


def _flat_top_k(logits, live_logp, done, pad_id, n):
  """The definition best_extensions implements: log_softmax, pad and finished rows -inf, one top_k
  over each row's beam * vocab candidates."""
  batch, beams, vocab = logits.shape
  logp = jax.nn.log_softmax(logits, axis=-1)
  if pad_id is not None:
    logp = logp.at[:, :, pad_id].set(-jnp.inf)
  cand = jnp.where(done[:, None, None], -jnp.inf, live_logp[:, :, None] + logp)
  values, index = jax.lax.top_k(cand.reshape(batch, beams * vocab), n)
  return values, index // vocab, index % vocab


@pytest.mark.parametrize("vocab,chunk,pad_id,beams,n", [
    (1003, 16, 0, 4, 8), (1024, 16, None, 4, 8), (1003, 7, 5, 4, 8), (20, 128, 0, 4, 8),
    (9, 2, 0, 5, 10), (12, 4, -1, 4, 8)])
def test_best_extensions_is_one_top_k_over_all_candidates(vocab, chunk, pad_id, beams, n):
  """Same values as one jax.lax.top_k over log_softmax's candidates, and the same parents and
  tokens wherever the value is finite. Rows: few distinct logits (ties within and across chunks
  and beams), random logits, the best logits in a beam's last (padded) chunk, every logit equal,
  a tie at the n-th value between a chunk with a higher maximum and an earlier one, the padding
  token as every beam's largest logit, only negative logits (a chunk padded with 0 would win),
  fewer than n finite candidates, and a finished row. Vocabularies that are no multiple of the
  chunk, (20, 128) the short path without chunks, (9, 2) n larger than the vocabulary (the -inf
  picks of a finished row include padded slots: their tokens must still be ids), pad_id -1 the
  last id."""
  pad = 0 if pad_id is None else pad_id % vocab  # the padding token's id (0 without one)
  rng = np.random.RandomState(vocab + chunk)
  x = rng.randint(0, 6, (9, beams, vocab)).astype(np.float32)
  x[1] = rng.randn(beams, vocab)
  x[2, 1, -3:] = 40.0  # beam 1's best in its last chunk
  x[3] = 0.0  # every logit equal: a tie across all chunks
  x[4] = -20.0  # one high chunk maximum, and the other picks tie at 1 with an earlier chunk
  edge = min(3 * chunk, vocab - n)
  x[4, :, edge:edge + n] = 1.0
  x[4, :, edge] = 9.0
  x[4, :, :n] = 1.0
  x[5, :, pad] = 50.0  # the padding token (or id 0 without one) is every beam's largest
  x[6] = -10.0 - rng.randint(0, 6, (beams, vocab))
  x[7] = -np.inf  # beam 0 alone is live, and only two of its tokens are finite candidates
  x[7, 0, [pad, 3, vocab - 1]] = [2.0, 1.0, 0.5]
  live = np.tile(np.linspace(-1.0, -4.0, beams, dtype=np.float32), (9, 1))
  live[0, :2], live[0, 2] = -1.0, -np.inf  # equal log P, an empty beam
  live[[1, 7], 1:] = -np.inf  # the first step: beam 0 alone
  live[[3, 4]] = -1.0
  done = np.arange(9) == 8
  got = jax.jit(lambda *a: beam.best_extensions(*a, pad_id, n, chunk))(x, live, done)
  want = jax.jit(lambda *a: _flat_top_k(*a, pad_id, n))(x, live, done)
  got, want = [np.asarray(a) for a in got], [np.asarray(a) for a in want]
  np.testing.assert_array_equal(got[0], want[0])
  finite = np.isfinite(want[0])
  assert finite[[0, 2, 3, 4, 5, 6]].all() and 0 < finite[7].sum() < n and not finite[8].any()
  for g, w in zip(got[1:], want[1:]):
    np.testing.assert_array_equal(g[finite], w[finite])
  assert ((got[1] >= 0) & (got[1] < beams) & (got[2] >= 0) & (got[2] < vocab)).all()
