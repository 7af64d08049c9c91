"""Decoding the real Transformer: the cache changes nothing but the cost."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from tests.model.helpers import init, tiny
from tfm.decode.beam import beam_search
from tfm.decode.translate import cached_step, init_cache, make_translate_fn, uncached_step


def _model():
  cfg = tiny(vocab_size=12, d_model=16, num_heads=2, d_k=8, d_v=8)
  inputs = jnp.array([[5, 6, 7, 1, 0, 0], [8, 9, 10, 11, 4, 1]])
  model, v = init(cfg, inputs, inputs, seed=3)
  return model, nn.meta.unbox(v["params"]), inputs


def test_cached_beam_search_equals_uncached():
  model, params, inputs = _model()
  max_len = 7
  cached = beam_search(cached_step(model, params), init_cache(model, params, inputs, max_len),
                       beam_size=3, alpha=0.6, max_decode_len=max_len, early_stopping=False)
  make_state, step = uncached_step(model, params)
  uncached = beam_search(step, make_state(inputs, max_len), beam_size=3, alpha=0.6,
                         max_decode_len=max_len, early_stopping=False)
  np.testing.assert_array_equal(cached[0], uncached[0])
  np.testing.assert_allclose(cached[1], uncached[1], rtol=1e-4, atol=1e-4)
  assert np.all(np.isfinite(np.asarray(cached[1])[:, 0]))


def test_translate_scores_are_the_models_log_probability():
  model, params, inputs = _model()
  tokens, scores = make_translate_fn(model, beam_size=1, max_extra_length=3)(params, inputs)
  # Teacher-force the returned output and sum its log-probabilities independently.
  logits = model.apply({"params": params}, inputs, tokens)
  logp = jax.nn.log_softmax(logits)
  picked = jnp.take_along_axis(logp, tokens[..., None], -1)[..., 0]
  expected = jnp.sum(jnp.where(tokens != 0, picked, 0.0), axis=-1)
  np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-4)
  lengths = np.asarray((tokens != 0).sum(-1))
  assert np.all(lengths <= np.asarray((inputs != 0).sum(-1)) + 3)
