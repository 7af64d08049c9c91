"""Greedy decoding and sampling (temperature, top-k, top-p) against numpy references."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tfm.decode import sampling
from tests.decode.toy_models import (EOS, PAD, MarkovToy, PrefixToy, np_log_softmax,
                                     np_sequence_logp, run_greedy, run_sample, trim)

BATCH, VOCAB = 4, 6
LIMITS = np.array([12, 3, 7, 1])


def np_greedy(model, row, limit):
  seq = ()
  while len(seq) < limit and (not seq or seq[-1] != EOS):
    logits = model.np_logits(row, seq).copy()
    logits[PAD] = -np.inf  # the padding id is never generated
    seq += (int(np.argmax(logits)),)
  return seq


def check_padding(result, limits):
  for row, limit in enumerate(limits):
    seq, n = result.sequences[row], result.lengths[row]
    assert 1 <= n <= limit and not seq[n:].any() and EOS not in seq[:n - 1]
    assert PAD not in seq[:n]  # padding is never generated
    assert seq[n - 1] == EOS or n == limit


def test_greedy_matches_numpy():
  model = PrefixToy(1, BATCH, VOCAB, eos_bias=np.linspace(-2, 2, 12))
  g = run_greedy(model, max_decode_len=12, max_lengths=LIMITS)
  for row, limit in enumerate(LIMITS):
    expect = np_greedy(model, row, limit)
    assert trim(g.sequences[row], g.lengths[row]) == expect
    assert g.log_probs[row] == pytest.approx(np_sequence_logp(model, row, expect), rel=1e-5)
  check_padding(g, LIMITS)


@pytest.mark.parametrize("temperature,top_k", [(1.0, 1), (0.0, 0), (1e-5, 0)])
def test_top_k_1_and_low_temperature_are_greedy(temperature, top_k):
  # The table has near ties (a gap of 0.0036 on a greedy path): at T = 1e-3 sampling rightly
  # differs from greedy there; at T = 1e-5 the gap becomes 360 nats.
  model = PrefixToy(2, BATCH, VOCAB, eos_bias=np.linspace(-2, 2, 12))
  g = run_greedy(model, max_decode_len=12, max_lengths=LIMITS)
  for seed in range(3):
    s = run_sample(model, jax.random.key(seed), max_decode_len=12, max_lengths=LIMITS,
                   temperature=temperature, top_k=top_k)
    np.testing.assert_array_equal(s.sequences, g.sequences)
    np.testing.assert_allclose(s.log_probs, g.log_probs, rtol=1e-6)


def test_same_key_same_output_and_padding():
  model = PrefixToy(3, BATCH, VOCAB, scale=0.5, eos_bias=np.linspace(-2, 2, 12))
  a = run_sample(model, jax.random.key(7), max_decode_len=12, max_lengths=LIMITS)
  b = run_sample(model, jax.random.key(7), max_decode_len=12, max_lengths=LIMITS)
  np.testing.assert_array_equal(a.sequences, b.sequences)
  others = [run_sample(model, jax.random.key(k), max_decode_len=12, max_lengths=LIMITS).sequences
            for k in range(8, 12)]
  assert any((o != a.sequences).any() for o in others)  # other keys give other samples
  check_padding(a, LIMITS)
  for row in range(BATCH):  # log_probs is the model's (unprocessed) log P of the sample
    seq = trim(a.sequences[row], a.lengths[row])
    assert a.log_probs[row] == pytest.approx(np_sequence_logp(model, row, seq), rel=1e-5)


def test_top_k_never_emits_tokens_outside_the_top_k():
  batch, vocab, k = 256, 12, 3
  model = MarkovToy(4, batch, vocab, steps=10, scale=1.0, eos_bias=-1.0)
  s = run_sample(model, jax.random.key(0), max_decode_len=10, top_k=k)
  seen_rank = np.zeros(k, int)
  for row in range(batch):
    seq = trim(s.sequences[row], s.lengths[row])
    for t, tok in enumerate(seq):
      order = [i for i in np.argsort(-model.np_logits(row, seq[:t])) if i != PAD]
      rank = order.index(tok)
      assert rank < k
      seen_rank[rank] += 1
  assert np.all(seen_rank > 0)  # every allowed rank occurs: the filter is not just greedy


@pytest.mark.parametrize("p", [0.3, 0.75, 0.95])
def test_top_p_filter_keeps_the_smallest_nucleus(p):
  logits = np.random.default_rng(5).standard_normal((64, 10)).astype(np.float32) * 2
  kept = np.isfinite(np.asarray(sampling.top_p_filter(jnp.asarray(logits), p)))
  for row in range(64):
    probs = np.exp(np_log_softmax(logits[row]))
    order = np.argsort(-probs)
    m = int(np.searchsorted(np.cumsum(probs[order]), p) + 1)  # fewest tokens with mass >= p
    assert set(np.flatnonzero(kept[row])) == set(order[:m])
    assert probs[kept[row]].sum() >= p - 1e-6
  np.testing.assert_array_equal(np.asarray(sampling.top_p_filter(jnp.asarray(logits), 1.0)),
                                logits)


def test_top_p_sampling_frequencies():
  # Every step draws from the same distribution; padding (0) is never generated, EOS (1) is
  # outside the nucleus, so each row draws 12 tokens: 20 keys x 4 rows x 12 = 960 draws.
  probs = np.array([0.0, 0.04, 0.4, 0.25, 0.15, 0.16])
  model = PrefixToy.constant(np.log(np.maximum(probs, 1e-30)), BATCH)

  def draw(top_p):
    return np.concatenate([run_sample(model, jax.random.key(k), max_decode_len=12,
                                      top_p=top_p).sequences.ravel() for k in range(20)])

  tokens = draw(0.75)
  assert set(np.unique(tokens)) == {2, 3, 5}  # sorted: .4 + .25 < .75 <= .4 + .25 + .16
  freq = np.bincount(tokens, minlength=6)[[2, 3, 5]] / tokens.size
  np.testing.assert_allclose(freq, probs[[2, 3, 5]] / probs[[2, 3, 5]].sum(), atol=0.05)
  tokens = draw(1.0)  # the full distribution (EOS now ends rows early, then 0 pads)
  tokens = tokens[tokens != 0]
  assert set(np.unique(tokens)) == {1, 2, 3, 4, 5}
  np.testing.assert_allclose(np.bincount(tokens, minlength=6)[2:] / np.sum(tokens != 1),
                             probs[2:] / probs[2:].sum(), atol=0.05)


def test_process_logits_order_and_argument_checks():
  logits = jnp.array([[2.0, 1.0, 0.0, -1.0]])
  out = np.asarray(sampling.process_logits(logits, temperature=0.5, top_k=3, top_p=1.0))
  np.testing.assert_allclose(out[0, :3], [4.0, 2.0, 0.0])
  assert np.isneginf(out[0, 3])
  model = MarkovToy(0, BATCH, VOCAB)
  with pytest.raises(ValueError):
    sampling.sample(model.tokens_to_logits, model.init_cache(), jax.random.key(0),
                    max_decode_len=4, top_p=0.0)
  with pytest.raises(ValueError):
    sampling.sample(model.tokens_to_logits, model.init_cache(), jax.random.key(0),
                    max_decode_len=4, temperature=-1.0)
