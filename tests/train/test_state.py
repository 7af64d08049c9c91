"""The abstract train state: float32 parameters and optimizer state whatever the compute dtype."""

import jax
import jax.numpy as jnp
import numpy as np

from tests.train.helpers import mesh_cfg, train_cfg
from tfm.model.config import ModelConfig
from tfm.model.transformer import Transformer
from tfm.train.mesh import create_mesh
from tfm.train.optimizer import make_optimizer
from tfm.train.sharding import logical_rules
from tfm.train.state import abstract_train_state, parameter_count


def test_bfloat16_model_keeps_float32_state():
  cfg = ModelConfig(vocab_size=64, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=8,
                    num_encoder_layers=1, num_decoder_layers=1, dtype="bfloat16")
  mesh = create_mesh(mesh_cfg(), jax.devices()[:1])
  tx, _ = make_optimizer(train_cfg(), cfg.d_model)
  abstract, shardings = abstract_train_state(Transformer(cfg), tx, mesh, logical_rules(mesh_cfg()))
  floats = jax.tree_util.tree_leaves((abstract.params, abstract.opt_state))
  assert {x.dtype for x in floats if jnp.issubdtype(x.dtype, jnp.floating)} == {np.dtype("float32")}
  assert abstract.step.dtype == np.int32 and abstract.nonfinite_count.dtype == np.int32
  assert abstract.rng.shape == (2,)
  adam = abstract.opt_state[0]
  assert parameter_count(adam.mu) == parameter_count(abstract.params) == parameter_count(adam.nu)
  # Every leaf carries the sharding it will be created (or restored) with.
  assert jax.tree_util.tree_all(jax.tree_util.tree_map(lambda x, s: x.sharding == s, abstract, shardings))
