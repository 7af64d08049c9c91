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
  cfg = tiny(**VARIANTS[name])
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
