"""Small models, parameters and batches shared by the model tests."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from tfm.model.config import ModelConfig
from tfm.model.transformer import Transformer

TINY = dict(vocab_size=40, d_model=16, d_ff=32, num_heads=4, d_k=4, d_v=4, num_encoder_layers=2,
            num_decoder_layers=2, dropout_rate=0.0, max_length=32)


def tiny(**changes) -> ModelConfig:
  return ModelConfig(**{**TINY, **changes})


def init(cfg: ModelConfig, inputs, targets, seed=0):
  """(model, variables) from the model's own initialisers (model.init, jitted)."""
  model = Transformer(cfg)
  return model, jax.jit(model.init)(jax.random.PRNGKey(seed), inputs, targets)


def draw(cfg: ModelConfig, inputs, targets, seed=0):
  """(model, {"params": ...}): parameters of the shapes model.init builds, drawn with numpy.

  For tests that need some parameters, not the initial distribution (tests/train/test_scan_state.py
  checks that): compiling model.init costs ~2 s a config on CPU, more
  than the computation under test (flax folds the key once per parameter, each fold a threefry
  kernel). Kernels ~ N(0, 1 / fan_in) with fan_in all axes but the last, layer-norm scales near 1,
  biases and tables near 0.
  """
  model = Transformer(cfg)
  shapes = nn.meta.unbox(jax.eval_shape(model.init, jax.random.PRNGKey(seed), inputs, targets))
  rng = np.random.default_rng(seed)

  def leaf(path, s):
    noise = rng.standard_normal(s.shape).astype(np.float32)
    name = path[-1].key
    if name == "scale":
      return jnp.asarray(1 + 0.1 * noise)
    if name == "bias" or s.ndim < 2:
      return jnp.asarray(0.1 * noise)
    return jnp.asarray(noise * (s.size / s.shape[-1]) ** -0.5)

  return model, {"params": jax.tree_util.tree_map_with_path(leaf, shapes["params"])}


def random_tokens(key, shape, vocab, min_id=3):
  return jax.random.randint(key, shape, min_id, vocab).astype(jnp.int32)
