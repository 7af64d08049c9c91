"""Cached one-token-at-a-time decoding gives the logits of the full teacher-forced pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.model.helpers import draw, tiny
from tfm.model.transformer import Transformer

VARIANTS = {
    "paper": {},
    "learned": dict(positions="learned"),
    "rope": dict(positions="rope"),
    "alibi": dict(positions="alibi"),
    "relative_t5": dict(positions="relative", norm="pre", norm_kind="rms", ffn="gated_gelu",
                        use_bias=False, tie_embeddings=False, share_embeddings=True),  # T5's parts
    "none": dict(positions="none"),
    "gqa_pre_ln": dict(num_kv_heads=2, norm="pre", ffn="swiglu"),
    "mqa": dict(num_kv_heads=1, ffn="gelu"),
    "untied": dict(tie_embeddings=False),
    "decoder_only": dict(architecture="decoder_only", positions="rope"),
}
# Layers a stack: two in the paper's model (each layer keeps and reads its own cache), one in the
# other variants (a position or attention kind changes what each layer computes, and one layer
# compiles in about half the time of two).
TWO_LAYERS = ("paper",)


def cached_logits(model, v, inputs, decoder_inputs, max_len):
  b, t = decoder_inputs.shape
  if model.cfg.architecture == "decoder_only":
    encoded, segmentation = None, None
  else:
    encoded = jax.jit(lambda v, i: model.apply(v, i, method=Transformer.encode))(v, inputs)
    segmentation = (inputs != 0).astype(jnp.int32)
  init = jax.jit(lambda v, e, s: model.apply(v, e, s, b, max_len, method=Transformer.init_cache,
                                             mutable=["cache"])[1])
  state = init(v, encoded, segmentation)
  cache = state["cache"]
  step = jax.jit(lambda c, tok: model.apply({**v, "cache": c}, tok, method=Transformer.decode_step,
                                            mutable=["cache"]))
  out = []
  for i in range(t):
    logits, state = step(cache, decoder_inputs[:, i:i + 1])
    cache = state["cache"]
    out.append(logits)
  return np.stack(out, axis=1), cache


@pytest.mark.parametrize("name", list(VARIANTS))
def test_cached_decoding_matches_full_forward(name):
  layers = 2 if name in TWO_LAYERS else 1
  cfg = tiny(num_encoder_layers=layers, num_decoder_layers=layers, **VARIANTS[name])
  inputs = jnp.array([[5, 6, 7, 1, 0, 0], [8, 9, 10, 11, 12, 1]])
  targets = jnp.array([[13, 14, 15, 1, 0], [16, 17, 1, 0, 0]])
  model, v = draw(cfg, None if cfg.architecture == "decoder_only" else inputs, targets)
  full = np.asarray(jax.jit(model.apply)(v, None if cfg.architecture == "decoder_only" else inputs,
                                         targets))
  decoder_inputs = jnp.pad(targets, ((0, 0), (1, 0)))[:, :-1]
  got, cache = cached_logits(model, v, inputs, decoder_inputs, max_len=8)
  valid = np.asarray(targets != 0)
  np.testing.assert_allclose(got[valid], full[valid], atol=1e-4)
  assert np.all(np.asarray(cache["decoder"]["index"]) == targets.shape[1])
  # Every cache leaf leads with the batch dimension (beam search tiles and reorders along it).
  assert all(leaf.shape[0] == 2 for leaf in jax.tree.leaves(cache))


# Decoder-only variants of every position kind (learned: a table of 7, shorter than the padded
# prompts: their padding must not look past its end), grouped- and multi-query attention with
# pre-LN, and a scanned stack.
PREFILL_VARIANTS = {
    "sinusoidal": {},
    "learned": dict(positions="learned", max_length=7),
    "rope": dict(positions="rope"),
    "alibi": dict(positions="alibi"),
    "relative": dict(positions="relative"),
    "none": dict(positions="none"),
    "gqa_pre_ln": dict(num_kv_heads=2, norm="pre", ffn="swiglu", positions="rope"),
    "mqa": dict(num_kv_heads=1, positions="alibi"),
    "scanned": dict(scan_layers=True, positions="relative"),
}
PREFILL_TWO_LAYERS = ("sinusoidal", "scanned")  # as TWO_LAYERS above; a scan of two layers


@pytest.mark.parametrize("name", list(PREFILL_VARIANTS))
def test_a_prefilled_cache_continues_as_the_full_forward_pass(name):
  """Transformer.prefill runs ragged prompts (decoder inputs 4, 1, 5 and 0 of 8 columns) in one
  pass into a fresh cache of 10 positions: its logits at each prompt's last position, and those of
  the decode_step after it (which reads every prompt key and value from the cache), are the full
  forward pass's at those positions, in float32 to 1e-5; the cache index is the prompt length."""
  cfg = tiny(architecture="decoder_only", num_encoder_layers=0,
             num_decoder_layers=2 if name in PREFILL_TWO_LAYERS else 1, **PREFILL_VARIANTS[name])
  targets = jnp.array([[13, 14, 15, 16, 17, 18, 1], [19, 20, 21, 1, 0, 0, 0],
                       [22, 23, 24, 25, 26, 27, 28], [29, 30, 1, 0, 0, 0, 0]])
  lengths = jnp.array([4, 1, 5, 0], jnp.int32)
  model, v = draw(cfg, None, targets)
  inputs = jnp.pad(targets, ((0, 0), (1, 0)))[:, :-1]  # the decoder inputs, start token first
  fed = jnp.where(jnp.arange(8) < lengths[:, None], jnp.pad(inputs, ((0, 0), (0, 1))), 0)

  @jax.jit
  def run(v):
    cache = model.apply(v, None, None, 4, 10, method=Transformer.init_cache,
                        mutable=["cache"])[1]["cache"]
    last, state = model.apply({**v, "cache": cache}, fed, lengths, method=Transformer.prefill,
                              mutable=["cache"])
    index = state["cache"]["decoder"]["index"]
    step, _ = model.apply({**v, **state}, jnp.take_along_axis(inputs, lengths[:, None], axis=1),
                          method=Transformer.decode_step, mutable=["cache"])
    return last, step, index, model.apply(v, None, targets)

  last, step, index, full = (np.asarray(x) for x in run(v))
  n = np.asarray(lengths)
  np.testing.assert_array_equal(index, n)
  np.testing.assert_allclose(last[:3], full[np.arange(3), n[:3] - 1], atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(step, full[np.arange(4), n], atol=1e-5, rtol=1e-5)  # (row 3: 0)
