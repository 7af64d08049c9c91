"""model.scan_layers: the scanned stack computes what the unrolled one computes, from its parameters
stacked (tfm/model/scan_convert.py). The unrolled model is the reference for every number here."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.model.helpers import draw, random_tokens, tiny
from tests.model.test_decode_cache import cached_logits
from tfm.model.params import count_params, param_shapes
from tfm.model.scan_convert import stack_layers, stacked_dims, unstack_layers
from tfm.model.transformer import Transformer

VARIANTS = {
    "paper": {},
    "pre_ln_relative": dict(norm="pre", positions="relative", num_encoder_layers=3,
                            num_decoder_layers=3, norm_kind="rms", ffn="gated_gelu",
                            use_bias=False, tie_embeddings=False,
                            share_embeddings=True),  # T5's parts
    "learned_untied": dict(positions="learned", tie_embeddings=False),
    "rope_gqa": dict(positions="rope", num_kv_heads=2, ffn="swiglu"),
    "alibi_decoder_only": dict(positions="alibi", architecture="decoder_only"),
    "relative_encoder_only": dict(positions="relative", architecture="encoder_only", norm="pre",
                                  token_types=2, embedding_norm=True,
                                  mlm_head=True),  # BERT's parts
}


# Learned positions and untied output logits sit outside the stack: the scanned layers are the
# paper's, which [paper] checks; tests/model/test_decode_cache.py decodes both kinds, unrolled.
OUTSIDE_THE_STACK = pytest.param("learned_untied", marks=pytest.mark.long)


def _batch(cfg):
  tokens = random_tokens(jax.random.PRNGKey(5), (2, 7), cfg.vocab_size).at[0, 5:].set(0)
  inputs = None if cfg.architecture == "decoder_only" else tokens
  targets = None if cfg.architecture == "encoder_only" else tokens
  return inputs, targets


def _pair(change):
  """(unrolled model, scanned model, unrolled params, the same params stacked)."""
  cfg = tiny(**change)
  inputs, targets = _batch(cfg)
  unrolled, variables = draw(cfg, inputs, targets)  # plain arrays, no boxes
  scanned = Transformer(tiny(**change, scan_layers=True))
  params = variables["params"]
  return unrolled, scanned, params, stack_layers(params)


def _loss_and_grads(model, params, inputs, targets):
  labels = targets if targets is not None else inputs

  def loss(p):
    logits = model.apply({"params": p}, inputs, targets, train=True)  # dropout 0: deterministic
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits), labels[..., None], -1)[..., 0]
    return -jnp.sum(jnp.where(labels != 0, logp, 0.0)) / jnp.sum(labels != 0)

  return jax.jit(jax.value_and_grad(loss))(params)


def _axes(boxed):
  """{key path: logical axis names} of a boxed parameter tree."""
  leaves = jax.tree_util.tree_leaves_with_path(boxed, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
  return {jax.tree_util.keystr(path): box.names for path, box in leaves}


def _boxed_shapes(model, inputs, targets):
  return jax.eval_shape(model.init, jax.random.PRNGKey(0), inputs, targets)["params"]


@pytest.mark.slow
@pytest.mark.parametrize("name", [n if n != "learned_untied" else OUTSIDE_THE_STACK
                                  for n in VARIANTS])
def test_scanned_loss_and_gradients_equal_unrolled(name):
  unrolled, scanned, params, stacked = _pair(VARIANTS[name])
  inputs, targets = _batch(unrolled.cfg)
  loss, grads = _loss_and_grads(unrolled, params, inputs, targets)
  scanned_loss, scanned_grads = _loss_and_grads(scanned, stacked, inputs, targets)
  np.testing.assert_allclose(scanned_loss, loss, rtol=1e-6)
  scanned_grads = unstack_layers(scanned_grads)
  assert jax.tree.structure(scanned_grads) == jax.tree.structure(grads)
  # Absolute tolerance on the scale of the largest gradient: some gradients are exactly 0 in exact
  # arithmetic (key biases: softmax ignores a shift of all logits) and differ in rounding noise only.
  scale = max(float(np.max(np.abs(np.asarray(g)))) for g in jax.tree.leaves(grads))
  for (path, g), s in zip(jax.tree_util.tree_leaves_with_path(grads), jax.tree.leaves(scanned_grads)):
    np.testing.assert_allclose(s, g, rtol=1e-5, atol=1e-6 * scale, err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("name", ["paper", "alibi_decoder_only", "relative_encoder_only"])
def test_scanned_parameters_are_the_unrolled_ones_stacked_on_a_layers_axis(name):
  cfg = tiny(**VARIANTS[name])
  scanned_cfg = tiny(**VARIANTS[name], scan_layers=True)
  inputs, targets = _batch(cfg)
  unrolled = _boxed_shapes(Transformer(cfg), inputs, targets)
  scanned = _boxed_shapes(Transformer(scanned_cfg), inputs, targets)
  # tfm/model/params.py traces the scanned model for either layout: the shapes each model builds.
  shape_of = lambda tree: jax.tree.map(lambda x: (x.shape, x.dtype), tree)
  assert shape_of(param_shapes(cfg)) == shape_of(nn.meta.unbox(unrolled))
  assert shape_of(param_shapes(scanned_cfg)) == shape_of(nn.meta.unbox(scanned))
  assert count_params(scanned_cfg) == count_params(cfg)
  # Shapes: the unrolled tree with each stack's layer_i stacked, every leaf [N, ...].
  expected = jax.eval_shape(stack_layers, nn.meta.unbox(unrolled))
  assert jax.tree.map(lambda x: (x.shape, x.dtype), nn.meta.unbox(scanned)) == \
      jax.tree.map(lambda x: (x.shape, x.dtype), expected)
  # Logical axes: 'layers' in front of layer_0's names; everything outside the layers unchanged.
  want = {}
  for key, names in _axes(unrolled).items():
    if "['layer_" not in key:
      want[key] = names
    elif "['layer_0']" in key:
      want[key.replace("['layer_0']", "['layers']")] = ("layers",) + names
  assert _axes(scanned) == want


def test_conversion_round_trip_is_exact():
  _, _, params, stacked = _pair({})
  for stack in ("encoder", "decoder"):
    assert set(stacked[stack]) == set(params[stack]) - {"layer_0", "layer_1"} | {"layers"}
  back = unstack_layers(stacked)
  assert jax.tree.structure(back) == jax.tree.structure(params)
  assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(params)))
  np.testing.assert_array_equal(stacked["decoder"]["layers"]["ffn"]["wo"]["kernel"][1],
                                params["decoder"]["layer_1"]["ffn"]["wo"]["kernel"])


def test_conversion_refuses_a_gap_in_the_layers():
  _, _, params, _ = _pair({})
  encoder = dict(params["encoder"])
  encoder["layer_2"] = encoder.pop("layer_1")
  with pytest.raises(ValueError, match="layer_2"):
    stack_layers(dict(params, encoder=encoder))


@pytest.mark.parametrize("name", ["paper", "pre_ln_relative", "rope_gqa", "alibi_decoder_only",
                                  OUTSIDE_THE_STACK])
def test_scanned_cache_decodes_like_the_unrolled_one(name):
  unrolled, scanned, params, stacked = _pair(VARIANTS[name])
  inputs, targets = _batch(unrolled.cfg)
  decoder_inputs = jnp.pad(targets, ((0, 0), (1, 0)))[:, :-1]
  want, cache = cached_logits(unrolled, {"params": params}, inputs, decoder_inputs, max_len=9)
  got, scanned_cache = cached_logits(scanned, {"params": stacked}, inputs, decoder_inputs, max_len=9)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  # The scanned cache is the unrolled one with each layer's leaves stacked behind the batch.
  expected = stack_layers(cache)
  assert jax.tree.structure(scanned_cache) == jax.tree.structure(expected)
  for (path, want_leaf), leaf in zip(jax.tree_util.tree_leaves_with_path(expected),
                                     jax.tree.leaves(scanned_cache)):
    if stacked_dims(path):
      want_leaf = jnp.moveaxis(want_leaf, 0, 1)  # [N, b, ...] -> [b, N, ...]
    np.testing.assert_allclose(leaf, want_leaf, rtol=1e-5, atol=1e-5,
                               err_msg=jax.tree_util.keystr(path))
  assert all(leaf.shape[0] == 2 for leaf in jax.tree.leaves(scanned_cache))
