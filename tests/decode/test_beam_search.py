"""Beam search against hand arithmetic, greedy decoding and an exhaustive numpy search."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from tfm.decode import beam, common
from tests.decode.toy_models import (EOS, PAD, MarkovToy, PrefixToy, exhaustive_search, np_lp,
                                     np_sequence_logp, run_beam, run_greedy, trim)

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


def test_beam_size_one_is_greedy():
  # PrefixToy: logits depend on the whole prefix, so the cache must follow the chosen beam.
  model = PrefixToy(1, BATCH, VOCAB, eos_bias=np.linspace(-2, 2, 12))
  limits = np.array([12, 3, 6, 1])
  r = run_beam(model, beam_size=1, alpha=0.6, max_decode_len=12, max_lengths=limits)
  g = run_greedy(model, max_decode_len=12, max_lengths=limits)
  np.testing.assert_array_equal(r.sequences[:, 0], g.sequences)
  np.testing.assert_array_equal(r.lengths[:, 0], g.lengths)
  lp = np.array([np_lp(int(n), 0.6) for n in g.lengths])
  np.testing.assert_allclose(r.scores[:, 0], g.log_probs / lp, rtol=1e-5)
  assert len(set(g.lengths)) > 2  # hypotheses of several lengths, some cut at their limit


@pytest.mark.parametrize("toy,alpha,pad_id", [
    (MarkovToy, 0.6, PAD), (PrefixToy, 0.6, PAD), (PrefixToy, 0.0, PAD), (MarkovToy, 2.0, PAD),
    (PrefixToy, -0.5, PAD), (MarkovToy, 0.6, None)])
def test_matches_exhaustive_search(toy, alpha, pad_id):
  # vocab 5 and |Y| <= 4: at most 5 * 4**2 = 80 extensions per step (pad allowed), so beam 80
  # keeps all of them and the search must return exactly the 80 best complete hypotheses.
  vocab, beam_size, limits = 5, 80, [4, 2, 3, 1]
  model = toy(3, BATCH, vocab, scale=1.5)
  r = run_beam(model, beam_size=beam_size, alpha=alpha, max_decode_len=5, max_lengths=limits,
               pad_id=pad_id)
  for row, limit in enumerate(limits):
    ref = exhaustive_search(model, row, limit, alpha, pad_id)
    n = min(beam_size, len(ref))
    got = [trim(r.sequences[row, i], r.lengths[row, i]) for i in range(n)]
    assert got == [seq for _, seq in ref[:n]]
    np.testing.assert_allclose(r.scores[row, :n], [s for s, _ in ref[:n]], rtol=2e-5)
    if n < beam_size:  # fewer hypotheses exist than beams: empty slots
      assert np.all(np.isneginf(r.scores[row, n:])) and not r.sequences[row, n:].any()


def test_beam4_scores_are_consistent_with_the_model():
  model = PrefixToy(5, BATCH, VOCAB, eos_bias=np.linspace(-3, 3, 12))
  r = run_beam(model, beam_size=4, alpha=0.6, max_decode_len=40, max_lengths=[40, 8, 5, 2])
  for row in range(BATCH):
    assert np.all(np.diff(r.scores[row]) <= 0)  # best first
    seqs = [trim(r.sequences[row, i], r.lengths[row, i]) for i in range(4)]
    assert len(set(seqs)) == 4
    for i, seq in enumerate(seqs):
      expect = np_sequence_logp(model, row, seq) / np_lp(len(seq), 0.6)
      assert r.scores[row, i] == pytest.approx(expect, rel=1e-5)


def test_eos_and_padding_with_mixed_limits():
  model = MarkovToy(6, BATCH, VOCAB, eos_bias=np.linspace(-3, 1, 12))
  limits = np.array([1, 3, 12, 6])
  r = run_beam(model, beam_size=4, alpha=0.6, max_decode_len=40, max_lengths=limits)
  assert r.sequences.shape == (BATCH, 4, 40) and r.scores.shape == (BATCH, 4)
  for row in range(BATCH):
    for i in range(4):
      seq, n = r.sequences[row, i], r.lengths[row, i]
      assert 1 <= n <= limits[row]
      assert not seq[n:].any()  # nothing but 0 after the hypothesis
      assert EOS not in seq[:n - 1] and PAD not in seq[:n]  # padding is never generated
      assert seq[n - 1] == EOS or n == limits[row]  # ends in EOS or was truncated at its limit
  assert set(r.lengths[0]) == {1}
  # Some hypotheses must actually end in EOS and some be truncated, or this test checks little.
  last = r.sequences[np.arange(BATCH)[:, None], np.arange(4)[None], r.lengths - 1]
  assert (last == EOS).any() and (last != EOS).any()


def test_early_termination_stops_early_without_changing_the_result():
  # EOS becomes likely after a few steps, so every row finishes long before its limit.
  model = MarkovToy(7, BATCH, VOCAB, eos_bias=[-1.0, 0.0, 4.0])
  kw = dict(beam_size=4, alpha=0.6, max_decode_len=40, max_lengths=[40, 30, 40, 35])
  early = run_beam(model, **kw)
  full = run_beam(model, early_stopping=False, **kw)
  assert int(full.num_steps) == 40
  assert int(early.num_steps) < 15
  np.testing.assert_array_equal(early.sequences, full.sequences)
  np.testing.assert_array_equal(early.lengths, full.lengths)
  np.testing.assert_allclose(early.scores, full.scores, rtol=1e-6)


def _rule_alpha_positive(step, prev):
  if step == 0:
    return {EOS: 0.4, 2: 0.3, 3: 0.2, 4: 0.1}
  if prev == 2:
    return {EOS: 0.8, 2: 0.2} if step == 1 else {2: 1.0}
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
#    2 2 2 ... (probability 1 per step) truncated at 10 tokens scores -2.81 / lp(10) = -1.13 and
#    ranks second; a bound using lp(3) (-2.11 < -1.97) would have stopped.
#  alpha = -1 (shorter is better, lp(L) = 6 / (5 + L)): after step 1 the finished scores are
#    [2 EOS] -1.62, [3 EOS] -1.88, [4 EOS] -1.88, [EOS] -2.30, and [2 2] is live with log P
#    -1.39; [2 2 EOS] scores -1.85 and replaces [EOS]; a bound using lp(10) (-3.47) would have
#    stopped.
@pytest.mark.parametrize("rule,alpha,expected", [
    (_rule_alpha_positive, 1.0, [(EOS,), (2,) * 10, (2, EOS), (3, EOS)]),
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
