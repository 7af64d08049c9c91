"""The abstract train state: float32 parameters and optimizer state whatever the compute dtype."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.train.helpers import experiment_config, mesh_cfg, train_cfg
from tfm import experiment as experiment_lib
from tfm.experiment import Experiment
from tfm.model.config import ModelConfig
from tfm.model.params import parameter_count


def test_bfloat16_model_keeps_float32_state():
  cfg = ModelConfig(vocab_size=64, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=8,
                    num_encoder_layers=1, num_decoder_layers=1, dtype="bfloat16")
  exp = Experiment(experiment_config(cfg, train_cfg(), mesh_cfg()), devices=jax.devices()[:1])
  abstract, shardings = exp.abstract_state, exp.state_shardings
  floats = jax.tree_util.tree_leaves((abstract.params, abstract.opt_state))
  assert {x.dtype for x in floats if jnp.issubdtype(x.dtype, jnp.floating)} == {np.dtype("float32")}
  assert abstract.step.dtype == np.int32 and abstract.nonfinite_count.dtype == np.int32
  assert abstract.rng.shape == (2,)
  adam = abstract.opt_state["adam"]
  assert parameter_count(adam.mu) == parameter_count(abstract.params) == parameter_count(adam.nu)
  # Every leaf carries the sharding it will be created (or restored) with.
  assert jax.tree_util.tree_all(jax.tree_util.tree_map(lambda x, s: x.sharding == s, abstract, shardings))


def test_inference_parameters_need_no_optimizer():
  """Experiment.abstract_params: the train state's parameters, shapes and shardings, without Adam."""
  cfg = ModelConfig(vocab_size=64, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=8,
                    num_encoder_layers=1, num_decoder_layers=1)
  experiment_lib.forget_shared()
  exp = Experiment(experiment_config(cfg, train_cfg(), mesh_cfg()), devices=jax.devices()[:1])
  params = exp.abstract_params
  assert "optimizer" not in exp.pieces  # nothing built it
  state_params = exp.abstract_state.params
  same = jax.tree_util.tree_map(lambda a, b: (a.shape, a.dtype, a.sharding) == (b.shape, b.dtype, b.sharding),
                                params, state_params)
  assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(state_params)
  assert all(jax.tree_util.tree_leaves(same))


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_an_experiment_refuses_a_default_prng_other_than_threefry(impl):
  """Under another default PRNG (jax_default_prng_impl, JAX_DEFAULT_PRNG_IMPL) PRNGKey(train.seed)
  is a key of 4 words: the run's init and checkpointed rng would follow a setting its config.json
  does not record (a resume without it cannot restore the rng), and a step with
  train.dropout_prng=rbg fails on it. Refused in one line, before anything is built."""
  cfg = ModelConfig(vocab_size=64, d_model=16, d_ff=32, num_heads=2, d_k=8, d_v=8,
                    num_encoder_layers=1, num_decoder_layers=1)
  config = experiment_config(cfg, train_cfg(dropout_prng="rbg"), mesh_cfg())
  with jax.default_prng_impl(impl):
    assert jax.random.PRNGKey(0).shape == (4,)  # the key such a run would start from
    with pytest.raises(ValueError, match=rf"^jax_default_prng_impl='{impl}' "
                                         r"\(JAX_DEFAULT_PRNG_IMPL\): tfm's keys are"):
      Experiment(config)
  assert Experiment(config).key.step_train.dropout_prng == "rbg"  # threefry's default: accepted
