"""A whole TrainState converted between unrolled and scanned layers (tfm/model/scan_convert.py)
trains on exactly as the original: parameters, Adam's moments, step and rng carry over."""

import dataclasses

import flax.linen as nn
import jax
import numpy as np
import pytest

from tests.train import helpers
from tfm.model.config import ModelConfig
from tfm.model.scan_convert import stack_layers, unstack_layers
from tfm.model.transformer import Transformer
from tfm.train.optimizer import decay_mask
from tfm.data.prefetch import to_device
from tfm.train.sharding import batch_sharding

# No projection biases: a key bias has gradient 0 in exact arithmetic (softmax ignores it), and Adam
# turns the rounding noise of such a gradient into a full-size update, which no model can reproduce.
CFG = ModelConfig(vocab_size=64, d_model=16, d_ff=32, num_heads=2, d_k=8, d_v=8, num_encoder_layers=2,
                  num_decoder_layers=2, dropout_rate=0.0, max_length=32, use_bias=False)
# Weight decay and clipping on: the decay mask must not count the layers dimension.
TRAIN = helpers.train_cfg(weight_decay=0.1, grad_clip_norm=1.0)


@pytest.fixture(scope="module")
def setups():
  make = lambda cfg: helpers.Setup(Transformer(cfg), TRAIN, helpers.mesh_cfg(), jax.devices()[:1])
  return make(CFG), make(dataclasses.replace(CFG, scan_layers=True))


def _batch(setup, seed):
  batch = helpers.packed_batch(8, 10, CFG.vocab_size, seed)
  return to_device(batch, batch_sharding(setup.mesh, setup.rules))


def _assert_close(got, want, what):
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(want), jax.tree.leaves(got)):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7, err_msg=f"{what}{jax.tree_util.keystr(path)}")


def test_decay_mask_ignores_the_layers_dimension():
  tokens = np.ones((1, 4), np.int32)
  params = nn.meta.unbox(jax.eval_shape(Transformer(CFG).init, jax.random.PRNGKey(0), tokens,
                                        tokens)["params"])
  stacked = jax.eval_shape(stack_layers, params)
  per_layer = stack_layers(decay_mask(params))  # each layer's flag, stacked
  assert decay_mask(stacked) == jax.tree.map(lambda flags: bool(np.all(flags)), per_layer)
  layer = decay_mask(stacked)["decoder"]["layers"]
  assert layer["ffn"]["wi"]["kernel"] and not layer["ffn_norm"]["scale"]


def test_a_scanned_model_starts_from_the_unrolled_initialisation(setups):
  """The same seed gives the same initial state in both layouts (so the same loss curve)."""
  unrolled, scanned = setups
  stacked = stack_layers(unrolled.initial)
  assert jax.tree.structure(stacked) == jax.tree.structure(scanned.initial)
  assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(stacked),
                                                  jax.tree.leaves(scanned.initial)))


@pytest.mark.slow
def test_converted_state_trains_on_like_the_original(setups):
  unrolled, scanned = setups
  state = unrolled.fresh_state()
  for seed in (0, 1):  # Adam's moments are non-trivial after two updates
    state, _ = unrolled.step(state, _batch(unrolled, seed))
  host = jax.device_get(state)
  converted = stack_layers(host)
  assert jax.tree.structure(converted) == jax.tree.structure(scanned.initial)
  assert jax.tree.map(np.shape, converted) == jax.tree.map(np.shape, scanned.initial)
  back = unstack_layers(converted)
  assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(host)))

  # One more update on each side: same loss, same new parameters and moments.
  want, want_metrics = unrolled.step(state, _batch(unrolled, 2))
  got, got_metrics = scanned.step(jax.device_put(converted, scanned.shardings), _batch(scanned, 2))
  for key in ("loss", "grad_norm", "learning_rate"):
    assert float(got_metrics[key]) == pytest.approx(float(want_metrics[key]), rel=1e-5), key
  _assert_close(unstack_layers(jax.device_get(got)), jax.device_get(want), "scanned ")

  # And back: the scanned state, unstacked, continues on the unrolled model.
  want_next, _ = unrolled.step(want, _batch(unrolled, 3))
  back_state = jax.device_put(unstack_layers(jax.device_get(got)), unrolled.shardings)
  got_next, _ = unrolled.step(back_state, _batch(unrolled, 3))
  _assert_close(jax.device_get(got_next), jax.device_get(want_next), "unstacked ")
  assert int(got_next.step) == 4
