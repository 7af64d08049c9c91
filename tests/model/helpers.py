"""Small models and batches shared by the model tests."""

import jax
import jax.numpy as jnp

from tfm.model.config import ModelConfig
from tfm.model.transformer import Transformer

TINY = dict(vocab_size=40, d_model=16, d_ff=32, num_heads=4, d_k=4, d_v=4, num_encoder_layers=2,
            num_decoder_layers=2, dropout_rate=0.0, max_length=32)


def tiny(**changes) -> ModelConfig:
  return ModelConfig(**{**TINY, **changes})


def init(cfg: ModelConfig, inputs, targets, seed=0):
  model = Transformer(cfg)
  return model, jax.jit(model.init)(jax.random.PRNGKey(seed), inputs, targets)


def random_tokens(key, shape, vocab, min_id=3):
  return jax.random.randint(key, shape, min_id, vocab).astype(jnp.int32)
