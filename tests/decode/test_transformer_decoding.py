"""Decoding the real Transformer: the cache changes nothing but the cost."""

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.model.helpers import init, tiny
from tfm.decode.beam import beam_search
from tfm.decode.translate import (beam_invariant_cache, cached_step, init_cache, make_translate_fn,
                                  uncached_step)
from tfm.model.attention import grow_cache
from tfm.model.scan_convert import stack_layers
from tfm.model.transformer import Transformer


@functools.lru_cache(maxsize=None)  # one init per process: every test reads the same parameters
def _model():
  cfg = tiny(vocab_size=12, d_model=16, num_heads=2, d_k=8, d_v=8)
  inputs = jnp.array([[5, 6, 7, 1, 0, 0], [8, 9, 10, 11, 4, 1]])
  model, v = init(cfg, inputs, inputs, seed=3)
  return model, nn.meta.unbox(v["params"]), inputs


@pytest.mark.slow
def test_cached_beam_search_equals_uncached():
  model, params, inputs = _model()
  max_len = 7
  search = lambda step, state: beam_search(step, state, beam_size=3, alpha=0.6,
                                           max_decode_len=max_len, early_stopping=False)
  # Jitted whole: the search's set-up would otherwise compile op by op.
  cached = jax.jit(lambda p: search(cached_step(model, p), init_cache(model, p, inputs, max_len)))(
      params)
  make_state, step = uncached_step(model, params)
  uncached = jax.jit(lambda x: search(step, make_state(x, max_len)))(inputs)
  np.testing.assert_array_equal(cached[0], uncached[0])
  np.testing.assert_allclose(cached[1], uncached[1], rtol=1e-4, atol=1e-4)
  assert np.all(np.isfinite(np.asarray(cached[1])[:, 0]))


def test_translate_scores_are_the_models_log_probability():
  model, params, inputs = _model()
  tokens, scores = _unrolled_translation((("beam_size", 1),))  # greedy, 8 past the input
  # Teacher-force the returned output and sum its log-probabilities independently.
  logits = jax.jit(model.apply)({"params": params}, inputs, tokens)
  logp = jax.nn.log_softmax(logits)
  picked = jnp.take_along_axis(logp, tokens[..., None], -1)[..., 0]
  expected = jnp.sum(jnp.where(tokens != 0, picked, 0.0), axis=-1)
  np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-4)
  lengths = np.asarray((tokens != 0).sum(-1))
  assert np.all(lengths <= np.asarray((inputs != 0).sum(-1)) + 8)


def test_beam_invariant_leaves_kept_once_per_example_change_nothing():
  """The projected encoder output and padding stay [batch, ...] inside the search (cross-attention
  multiplies an example's beams with them at once): the same hypotheses as with every leaf tiled
  over the beams and reordered, scores equal to float rounding."""
  model, params, inputs = _model()
  max_len = 7
  cache = init_cache(model, params, inputs, max_len)
  skipped = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(cache)
             if beam_invariant_cache(p)]
  # cross K/V per decoder layer and the encoder padding; never self-attention, never the position.
  assert len(skipped) == 2 * model.cfg.num_decoder_layers + 1, skipped
  assert not any("cached_" in p or "index" in p for p in skipped)
  rows = {}

  def step(ids, c):  # records, while tracing, the rows of every leaf the search passes
    rows.update({jax.tree_util.keystr(p): x.shape[0] for p, x in jax.tree_util.tree_leaves_with_path(c)})
    return cached_step(model, params)(ids, c)

  run = lambda invariant: jax.jit(lambda c: beam_search(
      step, c, beam_size=3, alpha=0.6, max_decode_len=max_len, early_stopping=False,
      beam_invariant=invariant))(cache)
  full_seqs, full_scores = run(None)
  assert set(rows.values()) == {2 * 3}
  fast_seqs, fast_scores = run(beam_invariant_cache)
  assert {p for p, n in rows.items() if n == 2} == set(skipped)
  assert {n for p, n in rows.items() if p not in skipped} == {2 * 3}
  np.testing.assert_array_equal(full_seqs, fast_seqs)
  np.testing.assert_allclose(full_scores, fast_scores, rtol=1e-6, atol=1e-6)


SEARCHES = [dict(beam_size=3), dict(beam_size=1), dict(temperature=0.9, top_k=6)]
SEARCH_IDS = ["beam", "greedy", "sample"]
RNG = jax.random.PRNGKey(5)


@functools.lru_cache(maxsize=None)
def _unrolled_translation(search: tuple) -> tuple:
  """(tokens, scores) of make_translate_fn's `search` (sorted (name, value) pairs) on the unrolled
  model, 8 positions past the input, key RNG, one cache: the reference of the scanned model's
  decodes and of the growing cache's (computed once for both); greedy's scores are also checked
  against the model's log-probabilities."""
  model, params, inputs = _model()
  return make_translate_fn(model, max_extra_length=8, **dict(search))(params, inputs, RNG)


@pytest.mark.parametrize("search", SEARCHES, ids=SEARCH_IDS)
def test_scanned_model_decodes_like_the_unrolled_one(search):
  """model.scan_layers: the same parameters, stacked, give the same outputs (the cache is stacked
  behind the batch, so beam search tiles and reorders it as it does the unrolled model's)."""
  model, params, inputs = _model()
  scanned = Transformer(dataclasses.replace(model.cfg, scan_layers=True))
  want_tokens, want_scores = _unrolled_translation(tuple(sorted(search.items())))
  tokens, scores = make_translate_fn(scanned, max_extra_length=8, **search)(stack_layers(params),
                                                                           inputs, RNG)
  np.testing.assert_array_equal(tokens, want_tokens)
  np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)
  assert np.any(np.asarray(tokens) != 0)


def _search(m, p, inputs, lengths=(9,)):
  """Beam search (3 beams, alpha 0.6, 9 positions) over model m's own cache, its self-attention
  caches growing through `lengths` (one length: one cache of 9)."""
  return jax.jit(lambda p: beam_search(
      cached_step(m, p), init_cache(m, p, inputs, lengths[0]), beam_size=3, alpha=0.6,
      max_decode_len=9, beam_invariant=beam_invariant_cache, cache_lengths=lengths,
      grow_cache=grow_cache))(p)


@functools.lru_cache(maxsize=None)
def _unrolled_search():
  """_search on the unrolled model: the reference of the scanned model's searches below."""
  model, params, inputs = _model()
  return _search(model, params, inputs)


def test_scanned_cache_searches_like_the_unrolled_one():
  """The scanned model's own decode path (cache stacked behind the batch), which make_translate_fn
  does not take: beam search over it gives the unrolled model's hypotheses."""
  model, params, inputs = _model()
  scanned = Transformer(dataclasses.replace(model.cfg, scan_layers=True))
  (want_seqs, want_scores), (seqs, scores) = _unrolled_search(), _search(scanned,
                                                                         stack_layers(params), inputs)
  np.testing.assert_array_equal(seqs, want_seqs)
  np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)


def test_translate_runs_a_scanned_model_unrolled():
  """make_translate_fn decodes a scanned model without a scan over its layers."""
  model, params, inputs = _model()
  scanned = Transformer(dataclasses.replace(model.cfg, scan_layers=True))
  primitives = lambda m, p: str(jax.make_jaxpr(make_translate_fn(m, beam_size=2, max_extra_length=2)
                                               )(p, inputs))
  assert " scan[" not in primitives(scanned, stack_layers(params))
  assert " scan[" in str(jax.make_jaxpr(lambda p: init_cache(scanned, p, inputs, 5))(stack_layers(params)))


def test_scanned_cache_has_the_same_beam_invariant_leaves():
  model, params, inputs = _model()
  scanned = Transformer(dataclasses.replace(model.cfg, scan_layers=True))
  cache = jax.eval_shape(lambda p: init_cache(scanned, p, inputs, 7), stack_layers(params))
  skipped = {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(cache)
             if beam_invariant_cache(p)}
  # cross K/V of all layers (one stacked leaf each) and the encoder padding.
  assert skipped == {"['decoder']['layers']['cross_attention']['cross_key']",
                     "['decoder']['layers']['cross_attention']['cross_value']",
                     "['decoder']['encoder_segmentation']"}
  assert all(leaf.shape[0] == inputs.shape[0] for leaf in jax.tree.leaves(cache))


@pytest.mark.parametrize("search", SEARCHES, ids=SEARCH_IDS)
def test_a_growing_cache_decodes_like_a_full_one(search):
  """cache_phases=3: the self-attention caches hold 5, then 10, then 14 positions (max_extra_length 8
  over 6 input positions); same tokens, scores equal to float rounding. Padding a cache anywhere
  but after its written positions would change the attention and so the scores."""
  model, params, inputs = _model()
  want_tokens, want_scores = _unrolled_translation(tuple(sorted(search.items())))  # one cache
  tokens, scores = make_translate_fn(model, max_extra_length=8, cache_phases=3,
                                     **search)(params, inputs, RNG)
  np.testing.assert_array_equal(tokens, want_tokens)
  np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)
  assert np.any((np.asarray(tokens) != 0).sum(-1) > 10)  # outputs run into the third phase


def test_a_scanned_cache_grows_on_its_length_axes():
  """grow_cache on the stacked cache ([b, layers, kvh, d_k, s] keys, [b, layers, kvh, s, d_v]
  values): the scanned model's own search in two phases gives the unrolled model's hypotheses."""
  model, params, inputs = _model()
  scanned = Transformer(dataclasses.replace(model.cfg, scan_layers=True))
  want_seqs, want_scores = _unrolled_search()
  seqs, scores = _search(scanned, stack_layers(params), inputs, (4, 9))
  np.testing.assert_array_equal(seqs, want_seqs)
  np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)


def test_grow_cache_pads_self_attention_caches_at_the_end():
  model, params, inputs = _model()
  cache = init_cache(model, params, inputs, 4)
  cache = jax.tree_util.tree_map_with_path(  # distinct values where positions were written
      lambda p, x: x + 1 if "cached_" in jax.tree_util.keystr(p) else x, cache)
  grown = grow_cache(cache, 7)
  for path, old in jax.tree_util.tree_leaves_with_path(cache):
    new = grown
    for key in path:
      new = new[key.key]
    name = path[-1].key
    if name in ("cached_key", "cached_value"):
      axis = old.ndim - 1 if name == "cached_key" else old.ndim - 2
      assert new.shape[axis] == 7 and old.shape[axis] == 4
      np.testing.assert_array_equal(jnp.take(new, jnp.arange(4), axis=axis), old)
      np.testing.assert_array_equal(jnp.take(new, jnp.arange(4, 7), axis=axis), 0)
    else:  # cross-attention's encoder projections, the position, the encoder padding
      np.testing.assert_array_equal(new, old)
  with pytest.raises(ValueError, match="cannot shrink a decode cache from 7 to 5 positions"):
    grow_cache(grown, 5)
